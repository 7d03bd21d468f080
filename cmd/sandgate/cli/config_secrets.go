package cli

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"

	"github.com/sandgate/sandgate/secrets"
)

// secretsConfig is where the key-encryption keys of the secrets runs use
// through the egress proxy are (docs/secrets.md).
type secretsConfig struct {
	// SecretsKeyFile holds the keys, one `ID HEX` a line, the first the
	// one that seals (SANDGATE_SECRETS_KEY_FILE); unset, the gateway
	// keeps no secrets. Never generated: losing it loses every secret.
	SecretsKeyFile string
}

func readSecretsConfig(getenv func(string) string) secretsConfig {
	var c secretsConfig
	e := envReader{getenv: getenv}
	e.str("SANDGATE_SECRETS_KEY_FILE", &c.SecretsKeyFile)
	return c
}

func (c *secretsConfig) bindFlags(f *pflag.FlagSet) {
	f.StringVar(&c.SecretsKeyFile, "secrets-key-file", c.SecretsKeyFile, "key-encryption keys of the secrets, one `ID HEX` a line, the first sealing; mode 0600; unset, no secrets (SANDGATE_SECRETS_KEY_FILE)")
}

// Validate checks the key file, when one is named, exists.
func (c *secretsConfig) Validate() error {
	if c.SecretsKeyFile == "" {
		return nil
	}
	if _, err := os.Stat(c.SecretsKeyFile); err != nil {
		return fmt.Errorf("SANDGATE_SECRETS_KEY_FILE: %w", err)
	}
	return nil
}

// keyring reads the key file; nil when none is named.
func (c *secretsConfig) keyring() (*secrets.Keyring, error) {
	if c.SecretsKeyFile == "" {
		return nil, nil
	}
	k, err := secrets.LoadKeyring(c.SecretsKeyFile)
	if err != nil {
		return nil, fmt.Errorf("SANDGATE_SECRETS_KEY_FILE: %w", err)
	}
	return k, nil
}
