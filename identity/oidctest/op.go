// Package oidctest runs a real OpenID provider in the test's process:
// zitadel's OP (github.com/zitadel/oidc/v3/pkg/op) over the in-memory
// storage of its example server, with users who carry team and roles
// claims, signing keys that rotate on demand and an algorithm that can be
// changed, and a helper that signs a user in through the authorization
// code flow with PKCE, as a browser would, to get their ID token.
package oidctest

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"fmt"
	"html/template"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/go-jose/go-jose/v4"
	"github.com/google/uuid"
	"github.com/zitadel/oidc/v3/example/server/storage"
	"github.com/zitadel/oidc/v3/pkg/oidc"
	"github.com/zitadel/oidc/v3/pkg/op"
	"golang.org/x/oauth2"
	"golang.org/x/text/language"
)

// The clients every provider knows. Both are public (PKCE, no secret)
// and accept any loopback redirect URI with the paths below.
const (
	// Client is sandgate's: its ID is the audience of its tokens.
	Client = "sandgate"
	// OtherClient is another application's: its tokens are not for
	// sandgate.
	OtherClient = "other-app"
)

// RedirectPaths are the loopback redirect URIs the clients accept, on any
// port.
var RedirectPaths = []string{"http://127.0.0.1/console/callback", "http://127.0.0.1/cb", "http://localhost/console/callback"}

// User is a person the provider signs in.
type User struct {
	Username, Password, Email string
	// Team and Roles are the claims the default principal rule maps.
	Team  string
	Roles []string
	// Claims are further claims of the ID token.
	Claims map[string]any
}

// Provider is a running OpenID provider.
type Provider struct {
	srv   *httptest.Server
	store *store
	// keyFetches counts the requests for the key set.
	keyFetches atomic.Int64
}

// New starts a provider on a loopback port with the users given; it stops
// when the test ends.
func New(t testing.TB, users ...User) *Provider {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	issuer := "http://" + srv.Listener.Addr().String() + "/"
	us := &userStore{users: map[string]*storage.User{}, extra: map[string]User{}}
	for _, u := range users {
		us.add(u)
	}
	clients := map[string]*storage.Client{
		Client:      storage.NativeClient(Client, RedirectPaths...),
		OtherClient: storage.NativeClient(OtherClient, RedirectPaths...),
	}
	st := &store{Storage: storage.NewStorageWithClients(us, clients), users: us}
	if err := st.Rotate(jose.RS256, false); err != nil {
		t.Fatal(err)
	}
	p := &Provider{srv: srv, store: st}
	router, err := newRouter(issuer, st)
	if err != nil {
		t.Fatal(err)
	}
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/keys" {
			p.keyFetches.Add(1)
		}
		router.ServeHTTP(w, r)
	})
	srv.Start()
	t.Cleanup(srv.Close)
	return p
}

// Issuer is the provider's issuer URL, as its tokens' iss claim spells it.
func (p *Provider) Issuer() string { return "http://" + p.srv.Listener.Addr().String() + "/" }

// KeyFetches is how many times the key set was fetched.
func (p *Provider) KeyFetches() int64 { return p.keyFetches.Load() }

// Rotate makes a new signing key of alg, which signs every token from now
// on; keepOld keeps the previous key in the key set (a rotation with
// overlap), else it is withdrawn at once.
func (p *Provider) Rotate(alg jose.SignatureAlgorithm, keepOld bool) error {
	return p.store.Rotate(alg, keepOld)
}

// KeyID is the ID of the key that signs now.
func (p *Provider) KeyID() string { return p.store.current().ID() }

// PrivateKey is the key that signs now, and its public half as the key
// set publishes it.
func (p *Provider) PrivateKey() (crypto.Signer, jose.JSONWebKey) {
	k := p.store.current()
	return k.key, jose.JSONWebKey{Key: k.key.Public(), KeyID: k.id, Algorithm: string(k.alg), Use: "sig"}
}

// Token signs user in to client through the authorization code flow with
// PKCE, as a browser would (the login form posted), and returns the ID
// token.
func (p *Provider) Token(t testing.TB, client, username string) string {
	t.Helper()
	tok, err := p.SignIn(context.Background(), client, username)
	if err != nil {
		t.Fatalf("sign %s in to %s: %v", username, client, err)
	}
	return tok
}

// SignIn is Token without a test.
func (p *Provider) SignIn(ctx context.Context, client, username string) (string, error) {
	u, ok := p.store.users.byUsername(username)
	if !ok {
		return "", fmt.Errorf("no user %q", username)
	}
	redirect := "http://127.0.0.1/cb"
	oc := &oauth2.Config{ClientID: client, RedirectURL: redirect, Scopes: []string{"openid", "email", "profile"},
		Endpoint: oauth2.Endpoint{AuthURL: p.Issuer() + "auth", TokenURL: p.Issuer() + "oauth/token", AuthStyle: oauth2.AuthStyleInParams}}
	verifier := oauth2.GenerateVerifier()
	jar, _ := cookiejar.New(nil)
	hc := &http.Client{Jar: jar, CheckRedirect: func(r *http.Request, _ []*http.Request) error {
		if strings.HasPrefix(r.URL.String(), redirect) {
			return http.ErrUseLastResponse
		}
		return nil
	}}
	resp, err := hc.Get(oc.AuthCodeURL("state", oauth2.S256ChallengeOption(verifier), oauth2.SetAuthURLParam("nonce", "n")))
	if err != nil {
		return "", err
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	id := resp.Request.URL.Query().Get("authRequestID")
	if id == "" {
		return "", fmt.Errorf("no login page: %s %s", resp.Status, body)
	}
	resp, err = hc.PostForm(p.Issuer()+"login/username", url.Values{"username": {u.Username}, "password": {u.Password}, "id": {id}})
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	loc, err := resp.Location()
	if err != nil {
		return "", fmt.Errorf("the login did not redirect back (%s): %w", resp.Status, err)
	}
	code := loc.Query().Get("code")
	if code == "" {
		return "", fmt.Errorf("no code in %s", loc)
	}
	tok, err := oc.Exchange(context.WithValue(ctx, oauth2.HTTPClient, hc), code, oauth2.VerifierOption(verifier))
	if err != nil {
		return "", err
	}
	raw, _ := tok.Extra("id_token").(string)
	if raw == "" {
		return "", fmt.Errorf("no id_token")
	}
	return raw, nil
}

// newRouter is the example server's routes (the OP and its login form)
// without its request log.
func newRouter(issuer string, st *store) (http.Handler, error) {
	key := sha256.Sum256([]byte(issuer))
	provider, err := op.NewProvider(&op.Config{
		CryptoKey: key, DefaultLogoutRedirectURI: "/logged-out", CodeMethodS256: true, AuthMethodPost: true,
		SupportedUILocales: []language.Tag{language.English},
	}, st, op.StaticIssuer(issuer), op.WithAllowInsecure(), op.WithCustomAuthEndpoint(op.NewEndpoint("auth")))
	if err != nil {
		return nil, err
	}
	callback := op.AuthCallbackURL(provider)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /login/username", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_ = loginPage.Execute(w, r.URL.Query().Get("authRequestID"))
	})
	mux.Handle("POST /login/username", op.NewIssuerInterceptor(provider.IssuerFromRequest).HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.FormValue("id")
		if err := st.CheckUsernamePassword(r.FormValue("username"), r.FormValue("password"), id); err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		http.Redirect(w, r, callback(r.Context(), id), http.StatusFound)
	}))
	mux.Handle("/", provider)
	return mux, nil
}

// loginPage is the provider's sign-in form.
var loginPage = template.Must(template.New("login").Parse(`<!doctype html>
<html><head><title>Test provider: sign in</title></head><body>
<form method="post" action="/login/username">
<input type="hidden" name="id" value="{{.}}">
<label>Username <input id="username" name="username"></label>
<label>Password <input id="password" name="password" type="password"></label>
<button id="submit" type="submit">Sign in</button>
</form></body></html>`))

// store is the example's in-memory storage with keys that rotate and
// claims from the users.
type store struct {
	*storage.Storage
	users *userStore

	mu   sync.Mutex
	keys []*signingKey // the last signs
}

type signingKey struct {
	id  string
	alg jose.SignatureAlgorithm
	key crypto.Signer
}

func (k *signingKey) SignatureAlgorithm() jose.SignatureAlgorithm { return k.alg }
func (k *signingKey) Key() any                                    { return k.key }
func (k *signingKey) ID() string                                  { return k.id }

type publicKey struct{ *signingKey }

func (k publicKey) Algorithm() jose.SignatureAlgorithm { return k.alg }
func (k publicKey) Use() string                        { return "sig" }
func (k publicKey) Key() any                           { return k.key.Public() }

// Rotate adds a key of alg that signs from now on.
func (s *store) Rotate(alg jose.SignatureAlgorithm, keepOld bool) error {
	var key crypto.Signer
	var err error
	switch alg {
	case jose.RS256, jose.RS384, jose.RS512, jose.PS256:
		key, err = rsa.GenerateKey(rand.Reader, 2048)
	case jose.ES256:
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case jose.ES384:
		key, err = ecdsa.GenerateKey(elliptic.P384(), rand.Reader)
	case jose.EdDSA:
		_, key, err = ed25519.GenerateKey(rand.Reader)
	default:
		return fmt.Errorf("no key for %s", alg)
	}
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	k := &signingKey{id: uuid.NewString(), alg: alg, key: key}
	if !keepOld {
		s.keys = nil
	}
	s.keys = append(s.keys, k)
	return nil
}

func (s *store) current() *signingKey {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.keys[len(s.keys)-1]
}

// SigningKey implements op.Storage.
func (s *store) SigningKey(context.Context) (op.SigningKey, error) { return s.current(), nil }

// SignatureAlgorithms implements op.Storage.
func (s *store) SignatureAlgorithms(context.Context) ([]jose.SignatureAlgorithm, error) {
	return []jose.SignatureAlgorithm{s.current().alg}, nil
}

// KeySet implements op.Storage.
func (s *store) KeySet(context.Context) ([]op.Key, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]op.Key, len(s.keys))
	for i, k := range s.keys {
		out[i] = publicKey{k}
	}
	return out, nil
}

// SetUserinfoFromRequest puts the user's email, team, roles and other
// claims into every ID token.
func (s *store) SetUserinfoFromRequest(_ context.Context, info *oidc.UserInfo, req op.IDTokenRequest, _ []string) error {
	u, ok := s.users.byID(req.GetSubject())
	if !ok {
		return fmt.Errorf("no user %q", req.GetSubject())
	}
	info.Subject = req.GetSubject()
	if u.Email != "" {
		info.Email = u.Email
		info.EmailVerified = true
	}
	if u.Team != "" {
		info.AppendClaims("team", u.Team)
	}
	if u.Roles != nil {
		info.AppendClaims("roles", u.Roles)
	}
	for k, v := range u.Claims {
		info.AppendClaims(k, v)
	}
	return nil
}

// userStore is the example's UserStore over the test's users.
type userStore struct {
	mu    sync.Mutex
	users map[string]*storage.User
	extra map[string]User
}

func (u *userStore) add(x User) {
	u.mu.Lock()
	defer u.mu.Unlock()
	id := "u-" + x.Username
	u.users[id] = &storage.User{ID: id, Username: x.Username, Password: x.Password, Email: x.Email, EmailVerified: true,
		FirstName: x.Username, LastName: "Test", PreferredLanguage: language.English}
	u.extra[id] = x
}

func (u *userStore) byUsername(name string) (User, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for id, x := range u.users {
		if x.Username == name {
			return u.extra[id], true
		}
	}
	return User{}, false
}

func (u *userStore) byID(id string) (User, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	x, ok := u.extra[id]
	return x, ok
}

func (u *userStore) GetUserByID(id string) *storage.User {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.users[id]
}

func (u *userStore) GetUserByUsername(name string) *storage.User {
	u.mu.Lock()
	defer u.mu.Unlock()
	for _, x := range u.users {
		if x.Username == name {
			return x
		}
	}
	return nil
}

func (u *userStore) ExampleClientID() string { return storage.ServiceUserID }

// Listener is the provider's listener address, for tests that must
// reach it (it listens on loopback only).
func (p *Provider) Listener() net.Addr { return p.srv.Listener.Addr() }

// AddUser adds a user.
func (p *Provider) AddUser(u User) { p.store.users.add(u) }
