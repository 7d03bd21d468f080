package identity_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-jose/go-jose/v4"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/identity"
	"github.com/sandgate/sandgate/identity/oidctest"
)

var alice = oidctest.User{Username: "alice", Password: "pw-alice", Email: "alice@example.com", Team: "payments", Roles: []string{"submitter"}}

// clock is a settable clock for the verifier.
type clock struct {
	mu sync.Mutex
	at time.Time
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.at.IsZero() {
		return time.Now()
	}
	return c.at
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	c.at = t
	c.mu.Unlock()
}

func newVerifier(t *testing.T, cfg identity.Config) *identity.Verifier {
	t.Helper()
	if cfg.Audience == "" {
		cfg.Audience = oidctest.Client
	}
	v, err := identity.NewVerifier(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func wantRefused(t *testing.T, err error, reason string) {
	t.Helper()
	if sandgate.ErrorCodeOf(err) != sandgate.CodeUnauthenticated || !strings.Contains(sandgate.ErrorMessageOf(err), reason) {
		t.Fatalf("err = %v, want UNAUTHENTICATED naming %q", err, reason)
	}
}

func TestVerifyARealProvidersToken(t *testing.T) {
	op := oidctest.New(t, alice)
	v := newVerifier(t, identity.Config{Issuers: []string{op.Issuer()}})
	tok, err := v.Verify(context.Background(), op.Token(t, oidctest.Client, "alice"))
	if err != nil {
		t.Fatal(err)
	}
	if tok.Issuer != op.Issuer() || tok.Email != "alice@example.com" || tok.Subject == "" || tok.Claims["team"] != "payments" {
		t.Errorf("token = %+v", tok)
	}
	if s := tok.SignIn(); s.Method != sandgate.MethodOIDC || s.Issuer != op.Issuer() || s.Email != "alice@example.com" {
		t.Errorf("sign-in = %+v", s)
	}
}

// TestKeyRotation: the provider rotates its key, withdrawing the old one;
// the next token names a key the gateway does not hold, which triggers
// one refresh, and verifies; a token of the withdrawn key no longer does.
func TestKeyRotation(t *testing.T) {
	op := oidctest.New(t, alice)
	clk := &clock{}
	v := newVerifier(t, identity.Config{Issuers: []string{op.Issuer()}, MinRefresh: time.Minute, Now: clk.now})
	ctx := context.Background()
	old := op.Token(t, oidctest.Client, "alice")
	if _, err := v.Verify(ctx, old); err != nil {
		t.Fatal(err)
	}
	for _, alg := range []jose.SignatureAlgorithm{jose.ES256, jose.EdDSA, jose.RS256} {
		if err := op.Rotate(alg, false); err != nil {
			t.Fatal(err)
		}
		clk.set(clk.now().Add(2 * time.Minute))
		before := op.KeyFetches()
		if _, err := v.Verify(ctx, op.Token(t, oidctest.Client, "alice")); err != nil {
			t.Fatalf("%s: a token of the new key: %v", alg, err)
		}
		if got := op.KeyFetches() - before; got != 1 {
			t.Errorf("%s: %d key set fetches, want 1", alg, got)
		}
	}
	_, err := v.Verify(ctx, old)
	wantRefused(t, err, "no signing key")
}

// TestUnknownKeyRefreshIsRateLimited: tokens naming keys the issuer does
// not have (forged, or a flood) trigger at most one fetch per MinRefresh.
func TestUnknownKeyRefreshIsRateLimited(t *testing.T) {
	op := oidctest.New(t, alice)
	clk := &clock{}
	v := newVerifier(t, identity.Config{Issuers: []string{op.Issuer()}, MinRefresh: 30 * time.Minute, Now: clk.now})
	ctx := context.Background()
	if _, err := v.Verify(ctx, op.Token(t, oidctest.Client, "alice")); err != nil {
		t.Fatal(err)
	}
	if err := op.Rotate(jose.RS256, false); err != nil {
		t.Fatal(err)
	}
	fresh := op.Token(t, oidctest.Client, "alice")
	before := op.KeyFetches()
	var wg sync.WaitGroup
	for range 50 {
		wg.Go(func() {
			_, err := v.Verify(ctx, fresh)
			wantRefused(t, err, "no signing key")
		})
	}
	wg.Wait()
	if got := op.KeyFetches() - before; got != 0 {
		t.Errorf("%d fetches within MinRefresh of the last, want 0", got)
	}
	// Once MinRefresh has passed, the next unknown key fetches once.
	clk.set(clk.now().Add(31 * time.Minute))
	if _, err := v.Verify(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if got := op.KeyFetches() - before; got != 1 {
		t.Errorf("%d fetches after MinRefresh, want 1", got)
	}
}

func TestExpiredTokenWithinAndBeyondTheSkew(t *testing.T) {
	op := oidctest.New(t, alice)
	clk := &clock{}
	v := newVerifier(t, identity.Config{Issuers: []string{op.Issuer()}, ClockSkew: time.Minute, Now: clk.now})
	raw := op.Token(t, oidctest.Client, "alice")
	tok, err := v.Verify(context.Background(), raw)
	if err != nil {
		t.Fatal(err)
	}
	clk.set(tok.Expiry.Add(30 * time.Second))
	if _, err := v.Verify(context.Background(), raw); err != nil {
		t.Errorf("30 s after expiry, within a minute's skew: %v", err)
	}
	clk.set(tok.Expiry.Add(61 * time.Second))
	_, err = v.Verify(context.Background(), raw)
	wantRefused(t, err, "expired")
}

func TestWrongAudienceAndIssuer(t *testing.T) {
	op := oidctest.New(t, alice)
	other := oidctest.New(t, alice)
	v := newVerifier(t, identity.Config{Issuers: []string{op.Issuer()}})
	ctx := context.Background()
	_, err := v.Verify(ctx, op.Token(t, oidctest.OtherClient, "alice"))
	wantRefused(t, err, "audience")
	_, err = v.Verify(ctx, other.Token(t, oidctest.Client, "alice"))
	wantRefused(t, err, "not one sandgate trusts")
	// A token that names the trusted issuer but is signed by another
	// provider's key.
	key, _ := other.PrivateKey()
	forged := sign(t, jose.SigningKey{Algorithm: jose.RS256, Key: key}, other.KeyID(), claimsFor(op.Issuer()))
	_, err = v.Verify(ctx, forged)
	wantRefused(t, err, "no signing key")
}

func TestAlgorithms(t *testing.T) {
	op := oidctest.New(t, alice)
	v := newVerifier(t, identity.Config{Issuers: []string{op.Issuer()}, MinRefresh: time.Nanosecond})
	ctx := context.Background()
	// The provider itself signs with an algorithm sandgate does not take.
	for _, alg := range []jose.SignatureAlgorithm{jose.PS256, jose.RS512, jose.ES384} {
		if err := op.Rotate(alg, false); err != nil {
			t.Fatal(err)
		}
		_, err := v.Verify(ctx, op.Token(t, oidctest.Client, "alice"))
		wantRefused(t, err, "signed with RS256, ES256, EdDSA")
	}
	if err := op.Rotate(jose.RS256, false); err != nil {
		t.Fatal(err)
	}
	if _, err := v.Verify(ctx, op.Token(t, oidctest.Client, "alice")); err != nil {
		t.Fatal(err)
	}
	// alg none: no signature at all.
	unsigned := b64(`{"alg":"none","typ":"JWT"}`) + "." + b64(mustJSON(t, claimsFor(op.Issuer()))) + "."
	_, err := v.Verify(ctx, unsigned)
	wantRefused(t, err, "signed with")
	// HMAC keyed with the issuer's public key, as published.
	_, pub := op.PrivateKey()
	der, err := x509.MarshalPKIXPublicKey(pub.Key)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range [][]byte{der, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: der}), mustJSON(t, pub)} {
		head := b64(fmt.Sprintf(`{"alg":"HS256","typ":"JWT","kid":%q}`, op.KeyID()))
		body := b64(mustJSON(t, claimsFor(op.Issuer())))
		m := hmac.New(sha256.New, secret)
		m.Write([]byte(head + "." + body))
		_, err := v.Verify(ctx, head+"."+body+"."+base64.RawURLEncoding.EncodeToString(m.Sum(nil)))
		wantRefused(t, err, "signed with")
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []identity.Config{
		{Issuers: []string{"ftp://x"}, Audience: "a"},
		{Issuers: []string{"https://x"}},
		{Issuers: []string{"https://x"}, Audience: "a", ClockSkew: time.Hour},
	} {
		if err := c.Validate(); err == nil {
			t.Errorf("%+v: no error", c)
		}
	}
}

func claimsFor(iss string) map[string]any {
	now := time.Now().Unix()
	return map[string]any{"iss": iss, "sub": "u-alice", "aud": []string{oidctest.Client}, "exp": now + 600, "iat": now,
		"email": "alice@example.com", "team": "payments", "roles": []string{"admin"}}
}

func sign(t *testing.T, key jose.SigningKey, kid string, claims map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(key, (&jose.SignerOptions{}).WithHeader("kid", kid).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	jws, err := s.Sign(mustJSON(t, claims))
	if err != nil {
		t.Fatal(err)
	}
	out, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func b64[T string | []byte](s T) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }
