package sandgate_test

import (
	"errors"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
)

func TestNormalizeEgress(t *testing.T) {
	tests := []struct {
		name    string
		network string
		egress  []string
		want    []string
		field   string
	}{
		{"names lower case", "egress", []string{"PyPI.org:443", "*.NPMJS.org.:443"}, []string{"pypi.org:443", "*.npmjs.org:443"}, ""},
		{"cidr masked", "egress", []string{"10.2.3.4/16:5432", "[fd00::1/8]:443"}, []string{"10.2.0.0/16:5432", "[fd00::/8]:443"}, ""},
		{"addresses", "egress", []string{"127.0.0.1:80", "[::1]:8080"}, []string{"127.0.0.1:80", "[::1]:8080"}, ""},
		{"port required", "egress", []string{"pypi.org:443", "pypi.org"}, nil, "egress[1]"},
		{"port zero", "egress", []string{"pypi.org:0"}, nil, "egress[0]"},
		{"port too big", "egress", []string{"pypi.org:65536"}, nil, "egress[0]"},
		{"bad cidr", "egress", []string{"10.2.0.0/33:1"}, nil, "egress[0]"},
		{"ipv6 unbracketed", "egress", []string{"::1:80"}, nil, "egress[0]"},
		{"wildcard of a tld", "egress", []string{"*.com:443"}, nil, "egress[0]"},
		{"wildcard inside", "egress", []string{"a.*.com:443"}, nil, "egress[0]"},
		{"url", "egress", []string{"https://pypi.org:443"}, nil, "egress[0]"},
		{"duplicate", "egress", []string{"pypi.org:443", "PYPI.org:443"}, nil, "egress[1]"},
		{"numeric name", "egress", []string{"127.1:80"}, nil, "egress[0]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			n, err := sandgate.Normalize(sandgate.RunSpec{Command: []string{"true"}, Network: tc.network, Egress: tc.egress}, sandgate.Defaults{})
			if tc.field != "" {
				var se *sandgate.Error
				if !errors.As(err, &se) || se.Code != sandgate.CodeInvalidRequest || se.Field != tc.field {
					t.Fatalf("err = %v; want INVALID-REQUEST naming %s", err, tc.field)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, n.Egress); diff != "" {
				t.Errorf("egress (-want +got):\n%s", diff)
			}
			if n.EgressLimits == nil || *n.EgressLimits != sandgate.BuiltinDefaults.EgressLimits {
				t.Errorf("egress_limits = %+v; want the defaults", n.EgressLimits)
			}
		})
	}
}

func TestEgressDestinationMatches(t *testing.T) {
	tests := []struct {
		dest, host string
		port       int
		want       bool
	}{
		{"pypi.org:443", "pypi.org", 443, true},
		{"pypi.org:443", "pypi.org", 80, false},
		{"pypi.org:443", "files.pypi.org", 443, false},
		{"*.npmjs.org:443", "registry.npmjs.org", 443, true},
		{"*.npmjs.org:443", "npmjs.org", 443, false},
		{"*.npmjs.org:443", "evilnpmjs.org", 443, false},
		{"10.2.0.0/16:5432", "10.2.9.9", 5432, true},
		{"10.2.0.0/16:5432", "10.3.0.1", 5432, false},
		{"10.2.0.0/16:5432", "db.internal", 5432, false},
		{"[::1]:80", "[::1]", 80, true},
	}
	for _, tc := range tests {
		d, err := sandgate.ParseEgressDestination(tc.dest)
		if err != nil {
			t.Fatal(err)
		}
		if got := d.Matches(tc.host, tc.port, netip.Addr{}); got != tc.want {
			t.Errorf("%s matches %s:%d = %v; want %v", tc.dest, tc.host, tc.port, got, tc.want)
		}
	}
}

// FuzzParseEgressDestination: what parses has one spelling, which parses
// to itself, and matches the names and addresses it names.
func FuzzParseEgressDestination(f *testing.F) {
	for _, s := range []string{"pypi.org:443", "*.npmjs.org:443", "10.2.0.0/16:5432", "[fd00::/8]:443", "[::1]:80",
		"127.0.0.1:8080", "PyPI.ORG.:443", "::1:80", "127.1:80", "*.com:1", "a:0", "[::ffff:10.0.0.1]:1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		d, err := sandgate.ParseEgressDestination(s)
		if err != nil {
			return
		}
		norm := d.String()
		again, err := sandgate.ParseEgressDestination(norm)
		if err != nil || again.String() != norm {
			t.Fatalf("%q → %q → %q, %v", s, norm, again.String(), err)
		}
		if d.Port < 1 || d.Port > 65535 {
			t.Fatalf("%q: port %d", s, d.Port)
		}
		if d.Host != "" && !d.Wildcard() && !d.Matches(d.Host, d.Port, netip.Addr{}) {
			t.Fatalf("%q does not match its own host", s)
		}
		if d.Prefix.IsValid() && !d.Matches(d.Prefix.Addr().String(), d.Port, netip.Addr{}) {
			t.Fatalf("%q does not match its own address", s)
		}
	})
}
