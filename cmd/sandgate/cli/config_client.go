package cli

import (
	"fmt"
	"net/url"

	"github.com/spf13/pflag"
)

// clientConfig is what the client commands (run, runs, session, volume,
// policy replay, audit witness) need of a gateway: where it is and the
// bearer token to show it. The token is read from the environment only,
// never from a flag (where ps would show it), and never printed.
type clientConfig struct {
	URL     string // SANDGATE_URL
	Token   string // SANDGATE_TOKEN
	invalid []string
}

func readClientConfig(getenv func(string) string) clientConfig {
	c := clientConfig{URL: "http://127.0.0.1:8080"}
	e := envReader{getenv: getenv}
	e.str("SANDGATE_URL", &c.URL)
	e.str("SANDGATE_TOKEN", &c.Token)
	c.invalid = e.invalid
	return c
}

func (c *clientConfig) bindFlags(f *pflag.FlagSet) {
	f.StringVar(&c.URL, "url", c.URL, "the gateway's URL (SANDGATE_URL)")
}

// Validate checks that the gateway's URL is an http(s) URL with a host.
func (c *clientConfig) Validate() error {
	if err := invalidError(c.invalid); err != nil {
		return err
	}
	if u, err := url.Parse(c.URL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("SANDGATE_URL (or --url) %q must be http(s)://host:port", c.URL)
	}
	return nil
}
