package policies_test

import (
	"context"
	"slices"
	"testing"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/policies"
)

// TestCallbackHostsFromData: the default bundle denies every callback; a
// bundle whose data names a host admits callbacks to it, through
// normalisation, and only over https unless the data says otherwise.
func TestCallbackHostsFromData(t *testing.T) {
	rules := func(d sandgate.Decision) []string {
		var out []string
		for _, v := range d.Violations {
			out = append(out, v.Rule)
		}
		return out
	}
	spec := baseSpec()
	spec.CallbackURL = "HTTP://127.0.0.1:8080/done"
	if d := decide(t, newEngine(t, policies.Options{}), spec); d.Allow || !slices.Contains(rules(d), "callback_host_allowlist") {
		t.Errorf("default bundle: allow=%v violations %v; want callback_host_allowlist", d.Allow, rules(d))
	}

	dir := copyBundle(t)
	writeConfigOverride(t, dir, `{"callback_hosts": ["127.0.0.1", "*.example.com:8443"], "callback_insecure_hosts": ["127.0.0.1"]}`)
	e := newEngine(t, policies.Options{Dir: dir})
	for url, want := range map[string][]string{
		"HTTP://127.0.0.1:8080/done":          nil,
		"https://hooks.example.com:8443/x":    nil,
		"http://hooks.example.com:8443/x":     {"callback_https"},
		"https://hooks.example.com/x":         {"callback_host_allowlist"},
		"https://169.254.169.254/latest":      {"callback_host_allowlist"},
		"http://[::ffff:127.0.0.1]:9000/done": nil,
	} {
		spec.CallbackURL = url
		d := decide(t, e, spec)
		if got := rules(d); !slices.Equal(got, want) || d.Allow != (len(want) == 0) {
			t.Errorf("%s: allow=%v violations %v; want %v", url, d.Allow, got, want)
		}
	}
}

func TestCallbackHostsMalformedRefused(t *testing.T) {
	for name, data := range map[string]string{
		"not a list":         `{"callback_hosts": "hooks.example.com"}`,
		"a URL":              `{"callback_hosts": ["https://hooks.example.com"]}`,
		"upper case":         `{"callback_hosts": ["Hooks.example.com"]}`,
		"a path":             `{"callback_insecure_hosts": ["hooks.example.com/x"]}`,
		"bare wildcard":      `{"callback_hosts": ["*"]}`,
		"inner wildcard":     `{"callback_hosts": ["a.*.example.com"]}`,
		"port out of range":  `{"callback_hosts": ["hooks.example.com:70000"]}`,
		"ipv6 not canonical": `{"air_gapped_callback_hosts": ["[0:0::1]"]}`,
		"ipv6 unbracketed":   `{"callback_hosts": ["::1"]}`,
		"empty label":        `{"callback_hosts": ["a..example.com"]}`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := copyBundle(t)
			writeConfigOverride(t, dir, data)
			if _, err := policies.New(context.Background(), policies.Options{Dir: dir}); err == nil {
				t.Fatal("bundle with malformed callback hosts loaded")
			}
		})
	}
}
