package egress

import (
	"fmt"
	"net/http"
	"net/netip"
	"net/textproto"
	"strings"

	"github.com/sandgate/sandgate"
)

// The reasons a request of a run with secrets is refused.
const (
	// ReasonSecretMisdirected: a request carries a placeholder of one of
	// the run's secrets where the secret may not go (secret.misdirected).
	ReasonSecretMisdirected = "secret_misdirected"
	// ReasonUpstreamTLS: the destination's certificate did not verify
	// against the proxy's roots, or its handshake failed.
	ReasonUpstreamTLS = "upstream_tls"
	// ReasonUnreadableAnswer: the destination answered a request that
	// carried a secret in an encoding the proxy cannot read to remove the
	// secret from.
	ReasonUnreadableAnswer = "unreadable_answer"
)

// DefaultTLSPorts are Options.TLSPorts' default: HTTPS's.
var DefaultTLSPorts = []int{443}

// Secret is a secret the proxy writes into a run's requests.
type Secret struct {
	Name    string
	Version int64
	// Placeholder is what the run's sandbox holds in the secret's place
	// (sandgate.SecretPlaceholder).
	Placeholder string
	Value       sandgate.SecretValue
	// Destinations are where the proxy writes it, normalised egress
	// destinations (the binding's).
	Destinations []string
	// Header and Format are the binding's: the header written, and its
	// value with "{value}" where the secret goes.
	Header, Format string
}

// secretSet is a run's secrets as the proxy uses them.
type secretSet struct {
	secrets []boundSecret
}

// boundSecret is a Secret with its destinations parsed, its header
// canonical, and what its value is removed as from answers.
type boundSecret struct {
	Secret
	dests    []sandgate.EgressDestination
	header   string
	patterns [][]byte
}

func newSecretSet(list []Secret) (*secretSet, error) {
	if len(list) == 0 {
		return nil, nil
	}
	s := &secretSet{}
	for _, sec := range list {
		if sec.Placeholder == "" || !strings.HasPrefix(sec.Placeholder, sandgate.SecretPlaceholderPrefix) {
			return nil, fmt.Errorf("secret %s has no placeholder", sec.Name)
		}
		b := boundSecret{Secret: sec, header: textproto.CanonicalMIMEHeaderKey(sec.Header), patterns: scrubPatterns(sec.Value.Reveal())}
		for _, d := range sec.Destinations {
			dest, err := sandgate.ParseEgressDestination(d)
			if err != nil {
				return nil, fmt.Errorf("secret %s: %v", sec.Name, err)
			}
			b.dests = append(b.dests, dest)
		}
		s.secrets = append(s.secrets, b)
	}
	return s, nil
}

// boundTo reports whether the proxy writes b to host:port.
func (b *boundSecret) boundTo(host string, port int) bool {
	for _, d := range b.dests {
		if d.Matches(host, port, netip.Addr{}) {
			return true
		}
	}
	return false
}

// misdirection is a request refused for a placeholder where its secret
// may not go.
type misdirection struct {
	secret *boundSecret
	// where is "url", "header_name", or "header" for a header of a
	// request to a destination the secret is not for.
	where string
}

// check looks for the run's placeholders in req, to host:port: one in
// the URL or in a header's name goes nowhere, one in a header's value
// only to the secret's destinations. The first that may not go is the
// request's refusal.
func (s *secretSet) check(req *http.Request, host string, port int) *misdirection {
	for i := range s.secrets {
		b := &s.secrets[i]
		ph := b.Placeholder
		if strings.Contains(req.RequestURI, ph) || strings.Contains(req.URL.String(), ph) {
			return &misdirection{b, "url"}
		}
		for name, vs := range req.Header {
			if strings.Contains(name, ph) {
				return &misdirection{b, "header_name"}
			}
			for _, v := range vs {
				if strings.Contains(v, ph) && !b.boundTo(host, port) {
					return &misdirection{b, "header"}
				}
			}
		}
	}
	return nil
}

// bound is the first secret bound to host:port, nil when none is.
func (s *secretSet) bound(host string, port int) *boundSecret {
	for i := range s.secrets {
		if s.secrets[i].boundTo(host, port) {
			return &s.secrets[i]
		}
	}
	return nil
}

// inject writes into req, to host:port, every secret bound there: its
// header from the template, and its value wherever a header holds its
// placeholder. It returns the secrets it wrote.
func (s *secretSet) inject(req *http.Request, host string, port int) []*boundSecret {
	var used []*boundSecret
	for i := range s.secrets {
		b := &s.secrets[i]
		if !b.boundTo(host, port) {
			continue
		}
		v := b.Value.Reveal()
		for _, vs := range req.Header {
			for j := range vs {
				vs[j] = strings.ReplaceAll(vs[j], b.Placeholder, v)
			}
		}
		req.Header.Set(b.header, strings.Replace(b.Format, sandgate.SecretFormatValue, v, 1))
		used = append(used, b)
	}
	return used
}
