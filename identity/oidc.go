// Package identity verifies who is calling: OpenID Connect tokens from
// the issuers a site trusts (discovery, signing keys refreshed on
// rotation, only asymmetric algorithms, a bounded clock skew), client
// certificates made into claims, and the console's authorization code
// flow with PKCE. What a verified sign-in may do is the policy's
// (sandgate.Authorizer); this package only says whose it is. It is the
// only importer of go-oidc, go-jose and x/oauth2.
package identity

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/go-jose/go-jose/v4"

	"github.com/sandgate/sandgate"
)

// MaxClockSkew is the most clock skew a site may allow between its
// issuers and its gateways.
const MaxClockSkew = 5 * time.Minute

// DefaultMinRefresh is the least time between two fetches of an issuer's
// keys that tokens naming an unknown key trigger.
const DefaultMinRefresh = 10 * time.Second

// DefaultKeysMaxAge is how long fetched keys are used before they are
// fetched again: a key the issuer withdrew stops verifying by then.
const DefaultKeysMaxAge = 15 * time.Minute

// Config is what a Verifier trusts.
type Config struct {
	// Issuers are the issuer URLs whose tokens are accepted, exactly as
	// their tokens' iss claims spell them.
	Issuers []string
	// Audience must be among a bearer token's aud claim.
	Audience string
	// ClockSkew is how far the issuers' clocks may be from this one's:
	// a token is still accepted this long after it expires, and this
	// long before its nbf and iat. At most MaxClockSkew.
	ClockSkew time.Duration
	// MinRefresh and KeysMaxAge: see DefaultMinRefresh and
	// DefaultKeysMaxAge.
	MinRefresh time.Duration
	KeysMaxAge time.Duration
	// HTTPClient fetches discovery documents and keys; default a client
	// with a 10 s timeout.
	HTTPClient *http.Client
	Now        func() time.Time
	Logger     *slog.Logger
	// OnFetch, when set, is called for each key set fetched.
	OnFetch func(issuer string)
}

// Validate checks the issuers, the audience and the skew.
func (c Config) Validate() error {
	if len(c.Issuers) == 0 {
		return nil
	}
	for _, iss := range c.Issuers {
		if !strings.HasPrefix(iss, "https://") && !strings.HasPrefix(iss, "http://") {
			return fmt.Errorf("SANDGATE_OIDC_ISSUER: %q is not an http(s) URL", iss)
		}
	}
	if c.Audience == "" {
		return errors.New("SANDGATE_OIDC_AUDIENCE is required with SANDGATE_OIDC_ISSUER")
	}
	if c.ClockSkew < 0 || c.ClockSkew > MaxClockSkew {
		return fmt.Errorf("SANDGATE_OIDC_CLOCK_SKEW %v is not between 0 and %v", c.ClockSkew, MaxClockSkew)
	}
	return nil
}

// Token is a verified token: who issued it, whom it names, and its
// claims as JSON has them.
type Token struct {
	Issuer  string
	Subject string
	Email   string
	Expiry  time.Time
	Nonce   string
	Claims  map[string]any
}

// SignIn is how the token signed its holder in.
func (t Token) SignIn() sandgate.SignIn {
	return sandgate.SignIn{Method: sandgate.MethodOIDC, Issuer: t.Issuer, Subject: t.Subject, Email: t.Email}
}

// Identity is the token as the principal rule maps it.
func (t Token) Identity() sandgate.Identity {
	return sandgate.Identity{Method: sandgate.MethodOIDC, Issuer: t.Issuer, Claims: t.Claims}
}

// Verifier verifies the tokens of a site's issuers. It is safe for
// concurrent use and reaches an issuer only when a token of that issuer
// first needs it.
type Verifier struct {
	cfg     Config
	issuers map[string]*issuer
}

// issuer is one trusted issuer: its discovery, made once it succeeds,
// and its keys.
type issuer struct {
	url string
	v   *Verifier

	mu       sync.Mutex
	verifier *oidc.IDTokenVerifier
	endpoint oidcEndpoint
	tried    time.Time
	lastErr  error
}

// oidcEndpoint is what discovery says beyond the keys.
type oidcEndpoint struct {
	AuthURL  string `json:"authorization_endpoint"`
	TokenURL string `json:"token_endpoint"`
	JWKSURL  string `json:"jwks_uri"`
}

// NewVerifier checks cfg and returns a verifier; it fetches nothing yet.
func NewVerifier(cfg Config) (*Verifier, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: fetchTimeout}
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MinRefresh == 0 {
		cfg.MinRefresh = DefaultMinRefresh
	}
	if cfg.KeysMaxAge == 0 {
		cfg.KeysMaxAge = DefaultKeysMaxAge
	}
	v := &Verifier{cfg: cfg, issuers: map[string]*issuer{}}
	for _, iss := range cfg.Issuers {
		v.issuers[iss] = &issuer{url: iss, v: v}
	}
	return v, nil
}

// Enabled reports whether any issuer is trusted.
func (v *Verifier) Enabled() bool { return v != nil && len(v.issuers) > 0 }

// VerifyToken checks a bearer token for the site's audience and returns
// its sign-in: the gateway's TokenVerifier.
func (v *Verifier) VerifyToken(ctx context.Context, raw string) (sandgate.Identity, sandgate.SignIn, error) {
	t, err := v.Verify(ctx, raw)
	if err != nil {
		return sandgate.Identity{}, sandgate.SignIn{}, err
	}
	return t.Identity(), t.SignIn(), nil
}

// Verify checks a bearer token for the site's audience.
func (v *Verifier) Verify(ctx context.Context, raw string) (Token, error) {
	return v.VerifyFor(ctx, raw, v.cfg.Audience)
}

// VerifyFor checks raw: signed with an allowed algorithm by a key of a
// trusted issuer (the one its iss claim names), for audience, within its
// times give or take the clock skew. Its errors are UNAUTHENTICATED, with
// the reason.
func (v *Verifier) VerifyFor(ctx context.Context, raw, audience string) (Token, error) {
	if !v.Enabled() {
		return Token{}, refused("no OpenID Connect issuer is configured")
	}
	jws, err := jose.ParseSignedCompact(raw, Algorithms)
	if err != nil {
		return Token{}, refused("the token is not a JWT signed with %s: %v", strings.Join(algNames(), ", "), err)
	}
	var peek struct {
		Issuer string `json:"iss"`
	}
	if err := json.Unmarshal(jws.UnsafePayloadWithoutVerification(), &peek); err != nil {
		return Token{}, refused("the token's claims are not JSON")
	}
	iss, ok := v.issuers[peek.Issuer]
	if !ok {
		return Token{}, refused("the token's issuer %q is not one sandgate trusts", shorten(peek.Issuer, 200))
	}
	verifier, err := iss.discover(ctx)
	if err != nil {
		return Token{}, refused("the issuer %s cannot be reached: %v", iss.url, err)
	}
	idt, err := verifier.Verify(ctx, raw)
	if err != nil {
		var expired *oidc.TokenExpiredError
		if errors.As(err, &expired) {
			return Token{}, refused("the token expired at %s", expired.Expiry.UTC().Format(time.RFC3339))
		}
		return Token{}, refused("the token is not valid: %v", err)
	}
	if !slices.Contains(idt.Audience, audience) {
		return Token{}, refused("the token's audience %q does not include %q", idt.Audience, audience)
	}
	var claims map[string]any
	if err := idt.Claims(&claims); err != nil {
		return Token{}, refused("the token's claims cannot be read: %v", err)
	}
	if err := v.checkTimes(claims); err != nil {
		return Token{}, err
	}
	t := Token{Issuer: idt.Issuer, Subject: idt.Subject, Expiry: idt.Expiry, Nonce: idt.Nonce, Claims: claims}
	t.Email, _ = claims["email"].(string)
	return t, nil
}

// checkTimes refuses a token issued, or valid only from, further in the
// future than the skew allows (go-oidc allows five minutes for nbf and
// does not look at iat).
func (v *Verifier) checkTimes(claims map[string]any) error {
	limit := v.cfg.Now().Add(v.cfg.ClockSkew)
	for _, name := range []string{"nbf", "iat"} {
		n, ok := claims[name].(float64)
		if !ok {
			continue
		}
		if at := time.Unix(int64(n), 0); at.After(limit) {
			return refused("the token's %s %s is in the future", name, at.UTC().Format(time.RFC3339))
		}
	}
	return nil
}

// discover returns the issuer's token verifier, running discovery once
// it succeeds; a failed discovery is tried again at most every
// MinRefresh.
func (i *issuer) discover(ctx context.Context) (*oidc.IDTokenVerifier, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.verifier != nil {
		return i.verifier, nil
	}
	cfg := i.v.cfg
	now := cfg.Now()
	if !i.tried.IsZero() && now.Sub(i.tried) < cfg.MinRefresh {
		return nil, i.lastErr
	}
	i.tried = now
	dctx, cancel := context.WithTimeout(oidc.ClientContext(ctx, cfg.HTTPClient), fetchTimeout)
	defer cancel()
	p, err := oidc.NewProvider(dctx, i.url)
	if err == nil {
		err = p.Claims(&i.endpoint)
	}
	if err == nil && i.endpoint.JWKSURL == "" {
		err = errors.New("its discovery document names no jwks_uri")
	}
	if err != nil {
		i.lastErr = fmt.Errorf("discovery: %w", err)
		cfg.Logger.Warn("OpenID Connect discovery failed", "issuer", i.url, "err", err)
		return nil, i.lastErr
	}
	keys := &keySet{url: i.endpoint.JWKSURL, client: cfg.HTTPClient, now: cfg.Now, minRefresh: cfg.MinRefresh, maxAge: cfg.KeysMaxAge}
	if cfg.OnFetch != nil {
		keys.fetches = func() { cfg.OnFetch(i.url) }
	}
	skew := cfg.ClockSkew
	i.verifier = oidc.NewVerifier(i.url, keys, &oidc.Config{
		// The audience is checked by VerifyFor: bearer tokens and the
		// console's ID tokens have different ones.
		SkipClientIDCheck:    true,
		SupportedSigningAlgs: algNames(),
		Now:                  func() time.Time { return cfg.Now().Add(-skew) },
	})
	return i.verifier, nil
}

func algNames() []string {
	out := make([]string, len(Algorithms))
	for i, a := range Algorithms {
		out[i] = string(a)
	}
	return out
}

// refused is the UNAUTHENTICATED error of a token that does not verify.
func refused(format string, args ...any) error {
	return &sandgate.Error{Code: sandgate.CodeUnauthenticated, Message: fmt.Sprintf(format, args...)}
}

func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
