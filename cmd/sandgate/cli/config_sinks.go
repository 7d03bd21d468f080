package cli

import "github.com/spf13/pflag"

// sinkConfig names the audit sinks (SIEM streams) the trail is delivered
// to.
type sinkConfig struct {
	SinksFile string // SANDGATE_SINKS_FILE; none without it
}

func readSinkConfig(getenv func(string) string) sinkConfig {
	var c sinkConfig
	e := envReader{getenv: getenv}
	e.str("SANDGATE_SINKS_FILE", &c.SinksFile)
	return c
}

func (c *sinkConfig) bindFlags(f *pflag.FlagSet) {
	f.StringVar(&c.SinksFile, "sinks-file", c.SinksFile, "audit sinks to stream the trail to: syslog (RFC 5424, TCP or TLS) or signed webhooks, OCSF or sandgate JSON; YAML or JSON (SANDGATE_SINKS_FILE; default: none)")
}

// Validate has nothing to check of a file name; the file is read and
// checked at start, before anything is registered.
func (c *sinkConfig) Validate() error { return nil }
