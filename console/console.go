// Package console is sandgate's web console for security staff and
// auditors: a handful of static files (HTML, CSS and JavaScript modules)
// embedded in the binary and served by the gateway under /console/. The
// pages hold no data of their own: they sign in with a bearer token kept
// in the page's memory and read everything from the HTTP API, which
// enforces every role. There is no build step: the files in assets/ are
// what the browser runs.
//
// It imports the standard library only; the gateway mounts Handler.
package console

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed assets
var assets embed.FS

// ContentSecurityPolicy is the policy every console answer carries. Only
// the console's own files may run or style the page (no inline script or
// style, no eval), the page may talk to its own origin only, no page may
// frame it, forms cannot submit anywhere (the sign-in form is read by
// script, so a token can never end up in a URL), and Trusted Types allow
// no HTML to be written into the page from a string: the console builds
// every element with the DOM and sets text with textContent.
const ContentSecurityPolicy = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; font-src 'self'; manifest-src 'self'; base-uri 'none'; form-action 'none'; " +
	"frame-ancestors 'none'; object-src 'none'; require-trusted-types-for 'script'; trusted-types 'none'"

// SecurityHeaders are set on every answer of the console, found or not.
var SecurityHeaders = map[string]string{
	"Content-Security-Policy":      ContentSecurityPolicy,
	"X-Frame-Options":              "DENY",
	"X-Content-Type-Options":       "nosniff",
	"Referrer-Policy":              "no-referrer",
	"Cross-Origin-Opener-Policy":   "same-origin",
	"Cross-Origin-Resource-Policy": "same-origin",
	"Permissions-Policy":           "camera=(), microphone=(), geolocation=(), payment=(), usb=()",
	"Cache-Control":                "no-cache",
}

// file is one embedded asset, read once.
type file struct {
	body        []byte
	contentType string
	etag        string
}

// Handler serves the console's files: "/" is the page, "/assets/…" its
// scripts and styles. Mount it with the prefix stripped (the gateway
// serves it at /console/). It answers GET and HEAD only; files are
// revalidated by ETag on every load, so an upgraded gateway never serves
// a mix of old and new modules.
func Handler() http.Handler {
	files := map[string]file{}
	err := fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := assets.ReadFile(p)
		if err != nil {
			return err
		}
		sum := sha256.Sum256(b)
		ct := mime.TypeByExtension(path.Ext(p))
		switch path.Ext(p) {
		case ".js":
			// Module scripts must be served as JavaScript whatever the
			// host's mime table says.
			ct = "text/javascript; charset=utf-8"
		case ".html":
			ct = "text/html; charset=utf-8"
		case ".css":
			ct = "text/css; charset=utf-8"
		case ".svg":
			ct = "image/svg+xml"
		}
		if ct == "" {
			ct = "application/octet-stream"
		}
		rel := strings.TrimPrefix(p, "assets/")
		if rel == "index.html" {
			rel = ""
		} else {
			rel = "assets/" + rel
		}
		files["/"+rel] = file{body: b, contentType: ct, etag: `"` + hex.EncodeToString(sum[:16]) + `"`}
		return nil
	})
	if err != nil {
		// The files are compiled in: a walk cannot fail but by a bug.
		panic("console: read embedded assets: " + err.Error())
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		for k, v := range SecurityHeaders {
			h.Set(k, v)
		}
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.Set("Allow", "GET, HEAD")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
			return
		}
		f, ok := files[r.URL.Path]
		if !ok {
			http.Error(w, "not found", http.StatusNotFound)
			return
		}
		h.Set("Content-Type", f.contentType)
		h.Set("ETag", f.etag)
		http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(f.body))
	})
}

// Paths lists the URL paths Handler serves, relative to its mount point,
// for tests and documentation.
func Paths() []string {
	var out []string
	_ = fs.WalkDir(assets, "assets", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel := strings.TrimPrefix(p, "assets/")
			if rel == "index.html" {
				out = append(out, "/")
			} else {
				out = append(out, "/assets/"+rel)
			}
		}
		return nil
	})
	return out
}
