package cli

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"

	"github.com/sandgate/sandgate/identity"
)

// identityConfig is how people and machines sign in besides the tokens
// file: OpenID Connect bearer tokens from trusted issuers, the console's
// sign-in through the first of them, and client certificates on an
// optional TLS listener.
type identityConfig struct {
	// OIDCIssuers are the trusted issuers (SANDGATE_OIDC_ISSUER,
	// comma-separated).
	OIDCIssuers []string
	// OIDCAudience must be in a bearer token's aud (SANDGATE_OIDC_AUDIENCE).
	OIDCAudience string
	// OIDCClockSkew is the skew allowed between the issuers' clocks and
	// this one (SANDGATE_OIDC_CLOCK_SKEW; default 1m, at most 5m).
	OIDCClockSkew time.Duration
	// OIDCKeysRefresh is the least time between two fetches of an
	// issuer's keys that tokens naming an unknown key trigger
	// (SANDGATE_OIDC_KEYS_REFRESH; default 10s).
	OIDCKeysRefresh time.Duration
	// OIDCClientID, OIDCClientSecretFile and OIDCRedirectURL make the
	// console sign people in through the first issuer
	// (SANDGATE_OIDC_CLIENT_ID, SANDGATE_OIDC_CLIENT_SECRET_FILE: none
	// for a public client, PKCE alone; SANDGATE_OIDC_REDIRECT_URL: this
	// gateway's /console/callback as the issuer knows it).
	OIDCClientID         string
	OIDCClientSecretFile string
	OIDCRedirectURL      string
	// TLSListen, TLSCertFile, TLSKeyFile and TLSClientCAFile make the TLS
	// listener (SANDGATE_TLS_LISTEN, SANDGATE_TLS_CERT_FILE,
	// SANDGATE_TLS_KEY_FILE, SANDGATE_TLS_CLIENT_CA_FILE: with a client
	// CA, a client certificate it signed signs its holder in).
	TLSListen       string
	TLSCertFile     string
	TLSKeyFile      string
	TLSClientCAFile string
	invalid         []string
}

func readIdentityConfig(getenv func(string) string) identityConfig {
	c := identityConfig{OIDCClockSkew: time.Minute}
	e := envReader{getenv: getenv}
	var issuers string
	e.str("SANDGATE_OIDC_ISSUER", &issuers)
	for _, iss := range strings.Split(issuers, ",") {
		if iss = strings.TrimSpace(iss); iss != "" {
			c.OIDCIssuers = append(c.OIDCIssuers, iss)
		}
	}
	e.str("SANDGATE_OIDC_AUDIENCE", &c.OIDCAudience)
	e.duration("SANDGATE_OIDC_CLOCK_SKEW", &c.OIDCClockSkew, false, "30s or 2m")
	e.duration("SANDGATE_OIDC_KEYS_REFRESH", &c.OIDCKeysRefresh, true, "10s or 1m")
	e.str("SANDGATE_OIDC_CLIENT_ID", &c.OIDCClientID)
	e.str("SANDGATE_OIDC_CLIENT_SECRET_FILE", &c.OIDCClientSecretFile)
	e.str("SANDGATE_OIDC_REDIRECT_URL", &c.OIDCRedirectURL)
	e.str("SANDGATE_TLS_LISTEN", &c.TLSListen)
	e.str("SANDGATE_TLS_CERT_FILE", &c.TLSCertFile)
	e.str("SANDGATE_TLS_KEY_FILE", &c.TLSKeyFile)
	e.str("SANDGATE_TLS_CLIENT_CA_FILE", &c.TLSClientCAFile)
	c.invalid = e.invalid
	return c
}

func (c *identityConfig) bindFlags(f *pflag.FlagSet) {
	f.StringSliceVar(&c.OIDCIssuers, "oidc-issuer", c.OIDCIssuers, "OpenID Connect issuers whose tokens sign people in, comma-separated (SANDGATE_OIDC_ISSUER)")
	f.StringVar(&c.OIDCAudience, "oidc-audience", c.OIDCAudience, "the audience a bearer token must name (SANDGATE_OIDC_AUDIENCE)")
	f.DurationVar(&c.OIDCClockSkew, "oidc-clock-skew", c.OIDCClockSkew, "clock skew allowed between the issuers and this gateway, at most 5m (SANDGATE_OIDC_CLOCK_SKEW)")
	f.DurationVar(&c.OIDCKeysRefresh, "oidc-keys-refresh", c.OIDCKeysRefresh, "least time between two fetches of an issuer's keys that an unknown key ID triggers (SANDGATE_OIDC_KEYS_REFRESH; default 10s)")
	f.StringVar(&c.OIDCClientID, "oidc-client-id", c.OIDCClientID, "the console's client ID at the first issuer: the console signs people in (SANDGATE_OIDC_CLIENT_ID)")
	f.StringVar(&c.OIDCClientSecretFile, "oidc-client-secret-file", c.OIDCClientSecretFile, "the console client's secret; none for a public client with PKCE alone (SANDGATE_OIDC_CLIENT_SECRET_FILE)")
	f.StringVar(&c.OIDCRedirectURL, "oidc-redirect-url", c.OIDCRedirectURL, "this gateway's /console/callback as the issuer knows it (SANDGATE_OIDC_REDIRECT_URL)")
	f.StringVar(&c.TLSListen, "tls-listen", c.TLSListen, "TLS listen address, beside SANDGATE_LISTEN (SANDGATE_TLS_LISTEN)")
	f.StringVar(&c.TLSCertFile, "tls-cert-file", c.TLSCertFile, "the TLS listener's certificate chain, PEM (SANDGATE_TLS_CERT_FILE)")
	f.StringVar(&c.TLSKeyFile, "tls-key-file", c.TLSKeyFile, "the TLS listener's private key, PEM (SANDGATE_TLS_KEY_FILE)")
	f.StringVar(&c.TLSClientCAFile, "tls-client-ca-file", c.TLSClientCAFile, "CA certificates whose client certificates sign their holders in, PEM (SANDGATE_TLS_CLIENT_CA_FILE)")
}

// Validate checks the issuers, the console client and the TLS files
// named together.
func (c *identityConfig) Validate() error {
	if err := invalidError(c.invalid); err != nil {
		return err
	}
	if err := c.verifierConfig().Validate(); err != nil {
		return err
	}
	if c.OIDCClientID != "" {
		if len(c.OIDCIssuers) == 0 {
			return errors.New("SANDGATE_OIDC_CLIENT_ID needs SANDGATE_OIDC_ISSUER")
		}
		if err := (identity.LoginConfig{ClientID: c.OIDCClientID, RedirectURL: c.OIDCRedirectURL}).Validate(); err != nil {
			return err
		}
	}
	tlsSet := c.TLSListen != "" || c.TLSCertFile != "" || c.TLSKeyFile != "" || c.TLSClientCAFile != ""
	if tlsSet && (c.TLSListen == "" || c.TLSCertFile == "" || c.TLSKeyFile == "") {
		return errors.New("the TLS listener needs SANDGATE_TLS_LISTEN, SANDGATE_TLS_CERT_FILE and SANDGATE_TLS_KEY_FILE together (SANDGATE_TLS_CLIENT_CA_FILE is optional)")
	}
	if c.TLSListen != "" {
		if _, _, err := net.SplitHostPort(c.TLSListen); err != nil {
			return fmt.Errorf("SANDGATE_TLS_LISTEN %q: %w", c.TLSListen, err)
		}
	}
	return nil
}

func (c *identityConfig) verifierConfig() identity.Config {
	return identity.Config{Issuers: c.OIDCIssuers, Audience: c.OIDCAudience, ClockSkew: c.OIDCClockSkew, MinRefresh: c.OIDCKeysRefresh}
}

// signIns builds the token verifier and the console's sign-in; nil for
// what is not configured.
func (c *identityConfig) signIns(logger *slog.Logger) (*identity.Verifier, *identity.Login, error) {
	if len(c.OIDCIssuers) == 0 {
		return nil, nil, nil
	}
	cfg := c.verifierConfig()
	cfg.Logger = logger.With("component", "oidc")
	v, err := identity.NewVerifier(cfg)
	if err != nil {
		return nil, nil, err
	}
	if c.OIDCClientID == "" {
		return v, nil, nil
	}
	var secret string
	if c.OIDCClientSecretFile != "" {
		raw, err := os.ReadFile(c.OIDCClientSecretFile)
		if err != nil {
			return nil, nil, fmt.Errorf("SANDGATE_OIDC_CLIENT_SECRET_FILE: %w", err)
		}
		secret = strings.TrimSpace(string(raw))
	}
	login, err := identity.NewLogin(v, identity.LoginConfig{ClientID: c.OIDCClientID, ClientSecret: secret, RedirectURL: c.OIDCRedirectURL})
	if err != nil {
		return nil, nil, err
	}
	return v, login, nil
}

// tlsListener binds the TLS listener, with the certificate (which
// reloadCertificate replaces on SIGHUP) and, when a client CA is given,
// client certificates verified against it when offered: a browser
// without one still signs in otherwise. nil when none is configured.
func (c *identityConfig) tlsListener() (net.Listener, *certificate, error) {
	if c.TLSListen == "" {
		return nil, nil, nil
	}
	cert := &certificate{certFile: c.TLSCertFile, keyFile: c.TLSKeyFile}
	if err := cert.reload(); err != nil {
		return nil, nil, err
	}
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: func(*tls.ClientHelloInfo) (*tls.Certificate, error) { return cert.current.Load(), nil },
	}
	if c.TLSClientCAFile != "" {
		pem, err := os.ReadFile(c.TLSClientCAFile)
		if err != nil {
			return nil, nil, fmt.Errorf("SANDGATE_TLS_CLIENT_CA_FILE: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, nil, fmt.Errorf("SANDGATE_TLS_CLIENT_CA_FILE %s holds no PEM certificate", c.TLSClientCAFile)
		}
		cfg.ClientCAs, cfg.ClientAuth = pool, tls.VerifyClientCertIfGiven
	}
	ln, err := net.Listen("tcp", c.TLSListen)
	if err != nil {
		return nil, nil, fmt.Errorf("listen on %s (SANDGATE_TLS_LISTEN): %w", c.TLSListen, err)
	}
	return tls.NewListener(ln, cfg), cert, nil
}

// certificate is the TLS listener's certificate, read again on SIGHUP.
type certificate struct {
	certFile, keyFile string
	current           atomic.Pointer[tls.Certificate]
}

// reload reads the certificate and key; on failure the one in use stays.
func (c *certificate) reload() error {
	kp, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		return fmt.Errorf("SANDGATE_TLS_CERT_FILE and SANDGATE_TLS_KEY_FILE: %w", err)
	}
	c.current.Store(&kp)
	return nil
}
