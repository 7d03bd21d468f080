package policies

import (
	"fmt"
	"net/textproto"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/sandgate/sandgate"
)

// Where a secret may go is data (data.sandgate.config.secrets, rules in
// secrets.rego); the bindings of a revision travel with its decisions
// (sandgate.Enforcement.Secrets) to the egress proxy, which writes each
// secret only as its binding says.

// secretData is one secret's entry in data.sandgate.config.secrets.
type secretData struct {
	Teams        []string `json:"teams"`
	Destinations []string `json:"destinations"`
	Header       string   `json:"header"`
	Format       string   `json:"format"`
	Env          string   `json:"env"`
}

// headerToken is an HTTP header name (RFC 9110 token).
var headerToken = regexp.MustCompile("^[!#$%&'*+.^_`|~0-9A-Za-z-]+$")

// reservedHeaders are the headers a secret may not be written to: those
// that frame or route the request, and the proxy's own.
var reservedHeaders = []string{"Host", "Content-Length", "Transfer-Encoding", "Connection", "Upgrade", "Te", "Trailer",
	"Keep-Alive", "Expect", "Proxy-Authorization", "Proxy-Connection", "Content-Encoding", "Accept-Encoding"}

// envName is an environment variable's name.
var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// reservedEnv are the variables the executor sets in an egress run with
// secrets: a placeholder may not take their place.
var reservedEnv = []string{"HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "NO_PROXY", "no_proxy",
	"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "PATH", "HOME"}

// secretBindings reads data.sandgate.config.secrets, refusing a bundle
// with an entry the proxy could not use as written: a name that is not a
// secret name, a destination not in its normalised form, a header that
// frames the request, a format without exactly one "{value}", an env
// that is not a variable's name or is one the executor sets.
func (b *bundle) secretBindings() (map[string]sandgate.SecretBinding, error) {
	var data map[string]secretData
	if err := dataField(b.config(), "secrets", &data); err != nil {
		return nil, err
	}
	out := make(map[string]sandgate.SecretBinding, len(data))
	for name, d := range data {
		bind, err := d.binding(name)
		if err != nil {
			return nil, fmt.Errorf("data.sandgate.config.secrets.%s: %s", name, err)
		}
		out[name] = bind
	}
	return out, nil
}

func (d secretData) binding(name string) (sandgate.SecretBinding, error) {
	if err := sandgate.CheckSecretName("name", name); err != nil {
		return sandgate.SecretBinding{}, fmt.Errorf("%s", sandgate.ErrorMessageOf(err))
	}
	if len(d.Destinations) == 0 {
		return sandgate.SecretBinding{}, fmt.Errorf("destinations: at least one is required")
	}
	for _, dest := range d.Destinations {
		parsed, err := sandgate.ParseEgressDestination(dest)
		if err != nil {
			return sandgate.SecretBinding{}, fmt.Errorf("destinations: %s", err)
		}
		if parsed.String() != dest {
			return sandgate.SecretBinding{}, fmt.Errorf("destinations: %q is not in its normalised form %q", dest, parsed.String())
		}
	}
	header := textproto.CanonicalMIMEHeaderKey(d.Header)
	switch {
	case !headerToken.MatchString(d.Header):
		return sandgate.SecretBinding{}, fmt.Errorf("header: %q is not an HTTP header name", d.Header)
	case slices.Contains(reservedHeaders, header):
		return sandgate.SecretBinding{}, fmt.Errorf("header: %s frames or routes the request; a secret cannot be written to it", header)
	}
	format := d.Format
	if format == "" {
		format = sandgate.SecretFormatValue
	}
	if strings.Count(format, sandgate.SecretFormatValue) != 1 || strings.ContainsFunc(format, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return sandgate.SecretBinding{}, fmt.Errorf("format: %q must hold %s exactly once and no control character", format, sandgate.SecretFormatValue)
	}
	switch {
	case !envName.MatchString(d.Env):
		return sandgate.SecretBinding{}, fmt.Errorf("env: %q is not an environment variable's name", d.Env)
	case slices.Contains(reservedEnv, d.Env):
		return sandgate.SecretBinding{}, fmt.Errorf("env: %s is set by sandgate in an egress run", d.Env)
	}
	teams := slices.Clone(d.Teams)
	if teams == nil {
		teams = []string{}
	}
	sort.Strings(teams)
	return sandgate.SecretBinding{Name: name, Teams: teams, Destinations: slices.Clone(d.Destinations),
		Header: header, Format: format, Env: d.Env}, nil
}

// bindings are the bindings of the secrets names, in their order; a name
// without one (the policy denies it) has none.
func (p *policy) bindings(names []string) []sandgate.SecretBinding {
	var out []sandgate.SecretBinding
	for _, n := range names {
		if b, ok := p.secrets[n]; ok {
			out = append(out, b)
		}
	}
	return out
}
