package gateway

import (
	"strconv"
	"testing"
	"time"
)

// TestCheckForwarded holds a forwarded request's signature to the
// cluster's secret, the forwarding node, the method, the path with its
// query, and a minute of clock skew.
func TestCheckForwarded(t *testing.T) {
	secret := []byte("0123456789abcdef-cluster")
	now := time.Unix(1_800_000_000, 0)
	at := strconv.FormatInt(now.Unix(), 10)
	sig := forwardMAC(secret, "gw-a", at, "DELETE", "/v1/runs/x?y=1")
	tests := []struct {
		name                  string
		secret                []byte
		node, at, method, uri string
		sig                   string
		now                   time.Time
		want                  bool
	}{
		{"valid", secret, "gw-a", at, "DELETE", "/v1/runs/x?y=1", sig, now, true},
		{"upper-case hex", secret, "gw-a", at, "DELETE", "/v1/runs/x?y=1", toUpper(sig), now, true},
		{"skew within a minute", secret, "gw-a", at, "DELETE", "/v1/runs/x?y=1", sig, now.Add(59 * time.Second), true},
		{"too old", secret, "gw-a", at, "DELETE", "/v1/runs/x?y=1", sig, now.Add(2 * time.Minute), false},
		{"from the future", secret, "gw-a", at, "DELETE", "/v1/runs/x?y=1", sig, now.Add(-2 * time.Minute), false},
		{"another secret", []byte("another-secret-of-16"), "gw-a", at, "DELETE", "/v1/runs/x?y=1", sig, now, false},
		{"no secret here", nil, "gw-a", at, "DELETE", "/v1/runs/x?y=1", sig, now, false},
		{"another node", secret, "gw-b", at, "DELETE", "/v1/runs/x?y=1", sig, now, false},
		{"another method", secret, "gw-a", at, "GET", "/v1/runs/x?y=1", sig, now, false},
		{"another path", secret, "gw-a", at, "DELETE", "/v1/runs/z?y=1", sig, now, false},
		{"another query", secret, "gw-a", at, "DELETE", "/v1/runs/x?y=2", sig, now, false},
		{"bad time", secret, "gw-a", "soon", "DELETE", "/v1/runs/x?y=1", sig, now, false},
		{"no signature", secret, "gw-a", at, "DELETE", "/v1/runs/x?y=1", "", now, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := checkForwarded(tc.secret, tc.node, tc.at, tc.sig, tc.method, tc.uri, tc.now); got != tc.want {
				t.Errorf("checkForwarded = %v, want %v", got, tc.want)
			}
		})
	}
}

func toUpper(s string) string {
	b := []byte(s)
	for i, c := range b {
		if c >= 'a' && c <= 'f' {
			b[i] = c - 'a' + 'A'
		}
	}
	return string(b)
}
