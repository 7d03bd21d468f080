package policies

import (
	"fmt"
	"net/netip"
	"regexp"
	"strings"
)

// callbackHostKeys are the data keys that list callback host patterns
// (callbacks.rego).
var callbackHostKeys = []string{"callback_hosts", "callback_insecure_hosts", "air_gapped_callback_hosts"}

// callbackPattern is what callbacks.rego reads as a host pattern:
// host, *.domain or [ipv6], with an optional port.
var callbackPattern = regexp.MustCompile(`^(\*\.[a-z0-9.-]+|[a-z0-9.-]+|\[[0-9a-f:.]+\])(?::([0-9]{1,5}))?$`)

// checkCallbackHosts refuses callback host lists of the wrong shape: a
// pattern the rules would never match (upper case, a URL, a path, a
// non-canonical IPv6 address) would deny quietly, or, worse, a mistyped
// wildcard allow more than meant.
func (b *bundle) checkCallbackHosts() error {
	cfg := b.config()
	for _, key := range callbackHostKeys {
		var patterns []string
		if err := dataField(cfg, key, &patterns); err != nil {
			return err
		}
		for _, p := range patterns {
			if err := checkCallbackPattern(p); err != nil {
				return fmt.Errorf("data.sandgate.config.%s: %q %s", key, p, err)
			}
		}
	}
	return nil
}

func checkCallbackPattern(p string) error {
	m := callbackPattern.FindStringSubmatch(p)
	if m == nil {
		return fmt.Errorf("is not host, host:port, *.domain[:port] or [ipv6][:port] in lower case")
	}
	host, port := m[1], m[2]
	if port != "" {
		var n int
		if _, err := fmt.Sscanf(port, "%d", &n); err != nil || n < 1 || n > 65535 || port[0] == '0' {
			return fmt.Errorf("has port %s; want 1 to 65535", port)
		}
	}
	if strings.HasPrefix(host, "[") {
		a, err := netip.ParseAddr(strings.Trim(host, "[]"))
		if err != nil || !a.Is6() || a.Is4In6() || "["+a.String()+"]" != host {
			return fmt.Errorf("is not an IPv6 address in its canonical form")
		}
		return nil
	}
	name := strings.TrimPrefix(host, "*.")
	for _, l := range strings.Split(name, ".") {
		if l == "" || strings.HasPrefix(l, "-") || strings.HasSuffix(l, "-") {
			return fmt.Errorf("is not a DNS name")
		}
	}
	return nil
}
