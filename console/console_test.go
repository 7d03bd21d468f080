package console_test

import (
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/console"
)

func get(t *testing.T, h http.Handler, method, path string, header ...string) *http.Response {
	t.Helper()
	req := httptest.NewRequest(method, path, nil)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, req)
	return w.Result()
}

// TestSecurityHeaders checks that every answer, found or not, carries the
// console's policy: no inline script or style, no framing, no sniffing,
// no referrer, forms that submit nowhere, and Trusted Types.
func TestSecurityHeaders(t *testing.T) {
	h := console.Handler()
	for _, path := range append(console.Paths(), "/nope", "/assets/../index.html") {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			resp := get(t, h, method, path)
			for k, v := range console.SecurityHeaders {
				if got := resp.Header.Get(k); got != v {
					t.Errorf("%s %s: %s = %q, want %q", method, path, k, got, v)
				}
			}
		}
	}
	csp := console.ContentSecurityPolicy
	for _, want := range []string{"default-src 'none'", "script-src 'self'", "style-src 'self'", "frame-ancestors 'none'",
		"form-action 'none'", "base-uri 'none'", "object-src 'none'", "require-trusted-types-for 'script'", "connect-src 'self'"} {
		if !strings.Contains(csp, want) {
			t.Errorf("the CSP lacks %q", want)
		}
	}
	for _, bad := range []string{"unsafe-inline", "unsafe-eval", "http:", "https:", "*", "data:"} {
		if strings.Contains(csp, bad) {
			t.Errorf("the CSP allows %q", bad)
		}
	}
}

// TestServesFiles checks the content types (a module script must be
// JavaScript), ETag revalidation, and that only GET and HEAD are
// answered.
func TestServesFiles(t *testing.T) {
	h := console.Handler()
	tests := []struct {
		path, contentType string
	}{
		{"/", "text/html; charset=utf-8"},
		{"/assets/js/app.js", "text/javascript; charset=utf-8"},
		{"/assets/css/console.css", "text/css; charset=utf-8"},
		{"/assets/favicon.svg", "image/svg+xml"},
	}
	for _, tc := range tests {
		resp := get(t, h, http.MethodGet, tc.path)
		body, _ := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != tc.contentType || len(body) == 0 {
			t.Errorf("GET %s = %d %q, %d bytes", tc.path, resp.StatusCode, resp.Header.Get("Content-Type"), len(body))
		}
		etag := resp.Header.Get("ETag")
		if r := get(t, h, http.MethodGet, tc.path, "If-None-Match", etag); r.StatusCode != http.StatusNotModified {
			t.Errorf("GET %s with its ETag = %d, want 304", tc.path, r.StatusCode)
		}
	}
	if r := get(t, h, http.MethodGet, "/assets/js/nope.js"); r.StatusCode != http.StatusNotFound {
		t.Errorf("missing file = %d", r.StatusCode)
	}
	if r := get(t, h, http.MethodPost, "/"); r.StatusCode != http.StatusMethodNotAllowed || r.Header.Get("Allow") != "GET, HEAD" {
		t.Errorf("POST / = %d, Allow %q", r.StatusCode, r.Header.Get("Allow"))
	}
	if r := get(t, h, http.MethodHead, "/"); r.StatusCode != http.StatusOK {
		t.Errorf("HEAD / = %d", r.StatusCode)
	}
}

// TestAssetsHoldNoInlineCodeOrRemoteURL reads every embedded file: the
// page has no inline script, style or event handler; the scripts never
// parse strings as HTML or code (innerHTML, outerHTML,
// insertAdjacentHTML, document.write, eval, new Function, string timers)
// and never put the token anywhere but the Authorization header; no file
// names a host, so nothing is loaded from a CDN; and every file the page
// or a module refers to is embedded.
func TestAssetsHoldNoInlineCodeOrRemoteURL(t *testing.T) {
	root := "assets"
	served := map[string]bool{}
	for _, p := range console.Paths() {
		served[p] = true
	}
	forbiddenJS := regexp.MustCompile(`\.innerHTML|\.outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function|setTimeout\(\s*['"\x60]|setInterval\(|localStorage|sessionStorage|document\.cookie`)
	remote := regexp.MustCompile(`(?i)(https?:)?//[a-z0-9.-]+\.[a-z]{2,}`)
	ref := regexp.MustCompile(`(?:src|href)="(assets/[^"]+)"|from '(\.{1,2}/[^']+)'`)
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		s := string(b)
		rel, _ := filepath.Rel(root, path)
		// The SVG namespace is a name, not a URL anything is loaded from.
		if m := remote.FindString(strings.ReplaceAll(s, "http://www.w3.org/2000/svg", "")); m != "" {
			t.Errorf("%s names a remote URL: %s", rel, m)
		}
		switch filepath.Ext(path) {
		case ".html":
			if regexp.MustCompile(`<script(?:\s+type="module")?>`).MatchString(s) || strings.Contains(s, "<style") ||
				regexp.MustCompile(`\son[a-z]+=`).MatchString(s) || strings.Contains(s, " style=") || strings.Contains(s, "javascript:") {
				t.Errorf("%s has inline script, style or an event handler", rel)
			}
		case ".js":
			for _, m := range forbiddenJS.FindAllString(s, -1) {
				t.Errorf("%s uses %s", rel, m)
			}
			if strings.Contains(s, "token") && rel != filepath.Join("js", "api.js") && rel != filepath.Join("js", "app.js") {
				t.Errorf("%s handles the token; only api.js (and the sign-in form in app.js) may", rel)
			}
		}
		for _, m := range ref.FindAllStringSubmatch(s, -1) {
			var target string
			if m[1] != "" {
				target = "/" + m[1]
			} else {
				target = "/assets/" + filepath.ToSlash(filepath.Join(filepath.Dir(rel), m[2]))
			}
			if !served[target] {
				t.Errorf("%s refers to %s, which is not embedded", rel, target)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}
