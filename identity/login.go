package identity

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"time"

	"golang.org/x/oauth2"

	"github.com/sandgate/sandgate"
)

// LoginConfig is the console's sign-in: the gateway as an OpenID Connect
// client of the first issuer, with the authorization code flow and PKCE.
type LoginConfig struct {
	ClientID string
	// ClientSecret is empty for a public client (PKCE alone).
	ClientSecret string
	// RedirectURL is the gateway's callback, as registered with the
	// issuer: https://sandgate.example.com/console/callback.
	RedirectURL string
	// Scopes default to openid, email and profile.
	Scopes []string
}

// Validate checks the client and its callback.
func (c LoginConfig) Validate() error {
	if c.ClientID == "" {
		return nil
	}
	u, err := url.Parse(c.RedirectURL)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return fmt.Errorf("SANDGATE_OIDC_REDIRECT_URL %q is not an http(s) URL (the console's /console/callback as the issuer knows it)", c.RedirectURL)
	}
	return nil
}

// LoginTTL is how long a sign-in may take, from the redirect to the
// issuer to the callback.
const LoginTTL = 10 * time.Minute

// Login signs people in to the console.
type Login struct {
	v   *Verifier
	iss *issuer
	cfg LoginConfig
}

// NewLogin returns the console's sign-in through v's first issuer.
func NewLogin(v *Verifier, cfg LoginConfig) (*Login, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if !v.Enabled() || cfg.ClientID == "" {
		return nil, errors.New("console sign-in needs SANDGATE_OIDC_ISSUER and SANDGATE_OIDC_CLIENT_ID")
	}
	if len(cfg.Scopes) == 0 {
		cfg.Scopes = []string{"openid", "email", "profile"}
	}
	return &Login{v: v, iss: v.issuers[v.cfg.Issuers[0]], cfg: cfg}, nil
}

// LoginState is what the browser keeps between the redirect and the
// callback: the state the callback must echo, the nonce the ID token must
// carry, and the PKCE verifier.
type LoginState struct {
	State    string    `json:"s"`
	Nonce    string    `json:"n"`
	Verifier string    `json:"v"`
	Expires  time.Time `json:"e"`
}

func (l *Login) oauth(ctx context.Context) (*oauth2.Config, error) {
	if _, err := l.iss.discover(ctx); err != nil {
		return nil, err
	}
	return &oauth2.Config{
		ClientID: l.cfg.ClientID, ClientSecret: l.cfg.ClientSecret, RedirectURL: l.cfg.RedirectURL, Scopes: l.cfg.Scopes,
		Endpoint: oauth2.Endpoint{AuthURL: l.iss.endpoint.AuthURL, TokenURL: l.iss.endpoint.TokenURL},
	}, nil
}

// Begin returns where to send the browser, and the state it keeps until
// the callback, encoded for a cookie: the gateway's ConsoleLogin.
func (l *Login) Begin(ctx context.Context) (string, string, error) {
	u, st, err := l.begin(ctx)
	if err != nil {
		return "", "", err
	}
	raw, err := json.Marshal(st)
	if err != nil {
		return "", "", err
	}
	return u, base64.RawURLEncoding.EncodeToString(raw), nil
}

// Finish checks that the callback's state is the one the browser kept,
// then finishes the sign-in: the gateway's ConsoleLogin. The session is
// the raw ID token.
func (l *Login) Finish(ctx context.Context, code, returnedState, kept string) (string, time.Time, error) {
	raw, err := base64.RawURLEncoding.DecodeString(kept)
	var st LoginState
	if err != nil || json.Unmarshal(raw, &st) != nil || st.State == "" {
		return "", time.Time{}, refused("the sign-in's state is missing or malformed; sign in again")
	}
	if subtle.ConstantTimeCompare([]byte(returnedState), []byte(st.State)) != 1 {
		return "", time.Time{}, refused("the callback's state is not the sign-in's; sign in again")
	}
	session, t, err := l.finish(ctx, code, st)
	if err != nil {
		return "", time.Time{}, err
	}
	return session, t.Expiry, nil
}

// Issuer is the URL of the issuer people sign in with: the console names
// it on its sign-in button.
func (l *Login) Issuer() string { return l.iss.url }

// Session verifies a console session's ID token and returns its sign-in:
// the gateway's ConsoleLogin.
func (l *Login) Session(ctx context.Context, raw string) (sandgate.Identity, sandgate.SignIn, error) {
	t, err := l.sessionToken(ctx, raw)
	if err != nil {
		return sandgate.Identity{}, sandgate.SignIn{}, err
	}
	return t.Identity(), t.SignIn(), nil
}

// begin returns where to send the browser, and the state to keep.
func (l *Login) begin(ctx context.Context) (string, LoginState, error) {
	oc, err := l.oauth(ctx)
	if err != nil {
		return "", LoginState{}, sandgate.WrapError(sandgate.CodeUnavailable, err, "the identity provider cannot be reached")
	}
	st := LoginState{State: random(), Nonce: random(), Verifier: oauth2.GenerateVerifier(), Expires: l.v.cfg.Now().Add(LoginTTL)}
	u := oc.AuthCodeURL(st.State, oauth2.S256ChallengeOption(st.Verifier), oauth2.SetAuthURLParam("nonce", st.Nonce))
	return u, st, nil
}

// finish exchanges the callback's code with the PKCE verifier and checks
// the ID token it gets: for this client, with the nonce of st. It returns
// the raw ID token, which the console's session cookie holds, and the
// token. Its errors are UNAUTHENTICATED.
func (l *Login) finish(ctx context.Context, code string, st LoginState) (string, Token, error) {
	if l.v.cfg.Now().After(st.Expires) {
		return "", Token{}, refused("the sign-in took longer than %v; sign in again", LoginTTL)
	}
	oc, err := l.oauth(ctx)
	if err != nil {
		return "", Token{}, sandgate.WrapError(sandgate.CodeUnavailable, err, "the identity provider cannot be reached")
	}
	tok, err := oc.Exchange(contextWithClient(ctx, l.v), code, oauth2.VerifierOption(st.Verifier))
	if err != nil {
		return "", Token{}, refused("the identity provider refused the code: %v", err)
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return "", Token{}, refused("the identity provider sent no ID token")
	}
	t, err := l.sessionToken(ctx, raw)
	if err != nil {
		return "", Token{}, err
	}
	if subtle.ConstantTimeCompare([]byte(t.Nonce), []byte(st.Nonce)) != 1 {
		return "", Token{}, refused("the ID token's nonce is not the sign-in's")
	}
	return raw, t, nil
}

// sessionToken verifies the ID token a console session holds.
func (l *Login) sessionToken(ctx context.Context, raw string) (Token, error) {
	t, err := l.v.VerifyFor(ctx, raw, l.cfg.ClientID)
	if err != nil {
		return Token{}, err
	}
	if t.Issuer != l.iss.url {
		return Token{}, refused("the session's token is not from the console's issuer")
	}
	return t, nil
}

func contextWithClient(ctx context.Context, v *Verifier) context.Context {
	return context.WithValue(ctx, oauth2.HTTPClient, v.cfg.HTTPClient)
}

// random is 32 random bytes, base64url.
func random() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return base64.RawURLEncoding.EncodeToString(b[:])
}
