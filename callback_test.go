package sandgate_test

import (
	"strings"
	"testing"

	"github.com/sandgate/sandgate"
)

func TestNormalizeCallbackURL(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"https", "https://hooks.example.com/sandgate/done?team=a", "https://hooks.example.com/sandgate/done?team=a"},
		{"case and default port", "HTTPS://Hooks.Example.COM:443/x", "https://hooks.example.com/x"},
		{"http default port", "http://127.0.0.1:80/cb", "http://127.0.0.1/cb"},
		{"other port kept", "http://127.0.0.1:8443/cb", "http://127.0.0.1:8443/cb"},
		{"trailing dot", "https://hooks.example.com./x", "https://hooks.example.com/x"},
		{"ipv6", "http://[0:0:0:0:0:0:0:1]:9000/", "http://[::1]:9000/"},
		{"ipv4-mapped ipv6", "http://[::ffff:127.0.0.1]/", "http://127.0.0.1/"},
		{"no path", "https://example.com", "https://example.com"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := sandgate.NormalizeCallbackURL(tt.in)
			if err != nil {
				t.Fatalf("NormalizeCallbackURL(%q): %v", tt.in, err)
			}
			if got != tt.want {
				t.Errorf("NormalizeCallbackURL(%q) = %q, want %q", tt.in, got, tt.want)
			}
			// The normal form is a fixed point.
			if again, err := sandgate.NormalizeCallbackURL(got); err != nil || again != got {
				t.Errorf("NormalizeCallbackURL(%q) = %q, %v; want it unchanged", got, again, err)
			}
		})
	}
}

func TestNormalizeCallbackURLRefused(t *testing.T) {
	for name, in := range map[string]string{
		"relative":          "/callback",
		"no scheme":         "hooks.example.com/x",
		"ftp":               "ftp://hooks.example.com/x",
		"file":              "file:///etc/passwd",
		"opaque":            "https:hooks.example.com",
		"no host":           "https:///x",
		"credentials":       "https://user:secret@hooks.example.com/x",
		"user only":         "https://user@hooks.example.com/x",
		"fragment":          "https://hooks.example.com/x#frag",
		"empty fragment":    "https://hooks.example.com/x#",
		"zone":              "http://[fe80::1%25eth0]/x",
		"port zero":         "http://example.com:0/x",
		"port too big":      "http://example.com:65536/x",
		"empty port":        "http://example.com:/x",
		"decimal ip":        "http://2130706433/x",
		"short ip":          "http://127.1/x",
		"hex ip":            "http://0x7f.0.0.1/x",
		"octal ip":          "http://0177.0.0.1/x",
		"unicode host":      "https://bücher.example/x",
		"underscore host":   "https://a_b.example.com/x",
		"space":             "https://hooks.example.com/a b",
		"newline":           "https://hooks.example.com/\nx",
		"label starts dash": "https://-a.example.com/",
		"empty label":       "https://a..example.com/",
	} {
		t.Run(name, func(t *testing.T) {
			got, err := sandgate.NormalizeCallbackURL(in)
			if err == nil {
				t.Fatalf("NormalizeCallbackURL(%q) = %q, want an error", in, got)
			}
			if sandgate.ErrorCodeOf(err) != sandgate.CodeInvalidRequest || !strings.Contains(err.Error(), "callback_url") {
				t.Errorf("error %v: want INVALID-REQUEST naming callback_url", err)
			}
		})
	}
}

func TestNormalizeStoresCallbackURL(t *testing.T) {
	got, err := sandgate.Normalize(sandgate.RunSpec{Command: []string{"true"}, CallbackURL: "HTTPS://Hooks.Example.com:443/done"}, sandgate.BuiltinDefaults)
	if err != nil {
		t.Fatal(err)
	}
	if got.CallbackURL != "https://hooks.example.com/done" {
		t.Errorf("CallbackURL = %q", got.CallbackURL)
	}
	if _, err := sandgate.Normalize(sandgate.RunSpec{Command: []string{"true"}, CallbackURL: "ftp://x/"}, sandgate.BuiltinDefaults); sandgate.ErrorCodeOf(err) != sandgate.CodeInvalidRequest {
		t.Errorf("ftp callback: %v, want INVALID-REQUEST", err)
	}
	long := sandgate.RunSpec{Command: []string{"true"}, CallbackURL: "https://x/" + strings.Repeat("a", sandgate.MaxCallbackURL)}
	if err := long.CheckBounds(); err == nil || !strings.Contains(err.Error(), "callback_url") {
		t.Errorf("CheckBounds of a long callback_url: %v", err)
	}
}
