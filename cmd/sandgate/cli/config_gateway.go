package cli

import (
	"fmt"
	"net"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"
)

// gatewayConfig is the HTTP API's: where it listens, who may call it,
// the console, how long a shutdown waits, and the key that signs
// completion callbacks.
type gatewayConfig struct {
	Listen     string // SANDGATE_LISTEN
	TokensFile string // SANDGATE_TOKENS_FILE
	Dev        bool   // SANDGATE_DEV: a development token when there is no tokens file
	// Console serves the web console under /console/ (SANDGATE_CONSOLE).
	Console       bool
	ShutdownGrace time.Duration
	// CallbackKeyFile holds the key that signs completion callbacks
	// (SANDGATE_CALLBACK_KEY_FILE; default callback.key next to the
	// spool); generated on first start.
	CallbackKeyFile string
	invalid         []string
}

// readGatewayConfig reads the gateway's settings; stateDir holds the keys
// generated on first start.
func readGatewayConfig(getenv func(string) string, stateDir string) gatewayConfig {
	c := gatewayConfig{Listen: "127.0.0.1:8080", Console: true, ShutdownGrace: 30 * time.Second}
	e := envReader{getenv: getenv}
	e.str("SANDGATE_LISTEN", &c.Listen)
	e.str("SANDGATE_TOKENS_FILE", &c.TokensFile)
	e.str("SANDGATE_CALLBACK_KEY_FILE", &c.CallbackKeyFile)
	e.boolean("SANDGATE_DEV", &c.Dev)
	e.boolean("SANDGATE_CONSOLE", &c.Console)
	if c.CallbackKeyFile == "" {
		c.CallbackKeyFile = filepath.Join(stateDir, "callback.key")
	}
	c.invalid = e.invalid
	return c
}

func (c *gatewayConfig) bindFlags(f *pflag.FlagSet) {
	f.StringVar(&c.Listen, "listen", c.Listen, "HTTP listen address (SANDGATE_LISTEN)")
	f.StringVar(&c.TokensFile, "tokens-file", c.TokensFile, "principals and token hashes, YAML or JSON (SANDGATE_TOKENS_FILE)")
	f.BoolVar(&c.Dev, "dev", c.Dev, "generate and print a development token when no tokens file is given (SANDGATE_DEV)")
	f.BoolVar(&c.Console, "console", c.Console, "serve the web console under /console/; --console=false serves the API alone (SANDGATE_CONSOLE)")
	f.StringVar(&c.CallbackKeyFile, "callback-key-file", c.CallbackKeyFile, "key that signs completion callbacks, hex; give it to the receivers; generated when absent (SANDGATE_CALLBACK_KEY_FILE; default: callback.key next to the spool directory)")
}

// Validate checks the listen address and that someone can sign in.
func (c *gatewayConfig) Validate() error {
	if err := invalidError(c.invalid); err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("SANDGATE_LISTEN %q: %w", c.Listen, err)
	}
	if c.TokensFile == "" && !c.Dev {
		return fmt.Errorf("SANDGATE_TOKENS_FILE is not set: give a tokens file, or set SANDGATE_DEV=1 for a development token")
	}
	return nil
}
