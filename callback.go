package sandgate

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
)

// NormalizeCallbackURL parses a run's callback_url and returns the one
// spelling policy judges and the gateway delivers to: an absolute http or
// https URL with a host, the scheme and host in lower case, a trailing dot
// of the host dropped, an IP address in its canonical form (IPv4-mapped
// IPv6 as IPv4), the default port of the scheme dropped. It refuses, as
// INVALID-REQUEST naming callback_url, what is no such URL and what would
// make a host mean two things: credentials (they would land in the audit
// trail), a fragment, an IPv6 zone, a host that is not ASCII letters,
// digits, '-' and '.', and numeric hosts that are no dotted-quad IPv4
// address ("2130706433", "127.1", "0x7f.0.0.1": resolvers read them as
// addresses, policy would read them as names).
func NormalizeCallbackURL(raw string) (string, error) {
	bad := func(format string, args ...any) (string, error) {
		return "", FieldError("callback_url", format, args...)
	}
	if strings.ContainsAny(raw, " \t\r\n\x00") {
		return bad("must be a URL without whitespace or NUL")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad("is not a URL: %s", strings.TrimPrefix(err.Error(), "parse "+strconv.Quote(raw)+": "))
	}
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return bad("must be an absolute http or https URL; got scheme %q", u.Scheme)
	}
	if u.Opaque != "" || u.Host == "" {
		return bad("must name a host (https://host[:port]/path)")
	}
	if u.User != nil {
		return bad("must not carry credentials (user:password@): they would be recorded in the audit trail")
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		return bad("must not have a fragment (#…)")
	}
	host, port := u.Hostname(), u.Port()
	if strings.HasSuffix(u.Host, ":") {
		return bad("has an empty port")
	}
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n < 1 || n > 65535 || port[0] == '0' {
			return bad("port %q is not a number from 1 to 65535", port)
		}
		if (scheme == "http" && n == 80) || (scheme == "https" && n == 443) {
			port = ""
		}
	}
	host, err = callbackHost(host)
	if err != nil {
		return bad("%s", err.Error())
	}
	u.Scheme = scheme
	u.Host = host
	if port != "" {
		u.Host += ":" + port
	}
	return u.String(), nil
}

// callbackHost is host in its canonical form: an IP address as
// netip.Addr spells it (IPv6 in brackets), a name in lower case without
// a trailing dot.
func callbackHost(host string) (string, error) {
	if strings.Contains(host, ":") || strings.Contains(host, "%") {
		a, err := netip.ParseAddr(host)
		if err != nil || a.Zone() != "" {
			return "", fmt.Errorf("host %q is not an IP address without a zone", host)
		}
		a = a.Unmap()
		if a.Is4() {
			return a.String(), nil
		}
		return "[" + a.String() + "]", nil
	}
	host = strings.TrimSuffix(strings.ToLower(host), ".")
	if host == "" || len(host) > 253 {
		return "", errors.New("host must be a DNS name of at most 253 characters or an IP address")
	}
	labels := strings.Split(host, ".")
	for _, l := range labels {
		if l == "" || len(l) > 63 || l[0] == '-' || l[len(l)-1] == '-' {
			return "", fmt.Errorf("host %q is not a valid DNS name", host)
		}
		for _, c := range l {
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
				return "", fmt.Errorf("host %q must be ASCII letters, digits, '-' and '.' (write an international name in its xn-- form)", host)
			}
		}
	}
	// A name whose last label is numeric is an address to resolvers:
	// only the dotted quad is accepted, in its canonical form.
	last := labels[len(labels)-1]
	if strings.Trim(last, "0123456789") == "" || strings.HasPrefix(last, "0x") {
		a, err := netip.ParseAddr(host)
		if err != nil || !a.Is4() {
			return "", fmt.Errorf("host %q is numeric but not a dotted-quad IPv4 address", host)
		}
		return a.String(), nil
	}
	return host, nil
}

// SignHMAC returns the signature sandgate puts on what it POSTs to a
// receiver (completion callbacks, audit webhook sinks): "v1=" and the hex
// HMAC-SHA256, keyed with key, of the timestamp (unix seconds, as sent in
// the timestamp header), a dot and the body. A receiver recomputes it
// over the bytes it received and compares in constant time.
func SignHMAC(key []byte, timestamp string, body []byte) string {
	mac := hmac.New(sha256.New, key)
	mac.Write([]byte(timestamp))
	mac.Write([]byte{'.'})
	mac.Write(body)
	return "v1=" + hex.EncodeToString(mac.Sum(nil))
}
