package gateway

import (
	"context"
	"crypto/x509"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate"
)

// The ways in: a bearer token (an OpenID Connect token of a trusted
// issuer, or a token of the tokens file), a client certificate on the
// TLS listener, the console's session cookie, or on a preview's path its
// port link (port_links.go). A sign-in other than a
// tokens-file token is a principal only once the policy's principal rule
// maps it (Deps.Authorizer.MapPrincipal).

// TokenVerifier verifies OpenID Connect bearer tokens (package
// identity's Verifier).
type TokenVerifier interface {
	// Enabled reports whether any issuer is trusted.
	Enabled() bool
	// VerifyToken checks a bearer token and returns what it signs in:
	// UNAUTHENTICATED with the reason when it does not verify.
	VerifyToken(ctx context.Context, raw string) (sandgate.Identity, sandgate.SignIn, error)
}

// ConsoleLogin is the console's sign-in through the first issuer, with
// the authorization code flow and PKCE (package identity's Login).
type ConsoleLogin interface {
	// Begin returns where to send the browser and the state it keeps
	// (the cookie's value) until the callback.
	Begin(ctx context.Context) (redirect, state string, err error)
	// Finish checks the callback's state against the one kept, exchanges
	// the code and verifies the ID token: the session it returns is the
	// session cookie's value, valid until expires.
	Finish(ctx context.Context, code, returnedState, kept string) (session string, expires time.Time, err error)
	// Issuer is the issuer's URL, which the console names on its
	// sign-in button.
	Issuer() string
	// Session verifies a session cookie's value.
	Session(ctx context.Context, session string) (sandgate.Identity, sandgate.SignIn, error)
}

// SignInMasks is implemented by an Authorizer that says which fields of
// a sign-in the trail keeps as keyed hashes (the policy's mask_sign_in).
type SignInMasks interface {
	MaskSignIn() []string
}

// The console's cookies. __Host- makes the browser keep them for this
// origin alone (Secure, Path=/, no Domain).
const (
	sessionCookie = "__Host-sandgate-session"
	loginCookie   = "__Host-sandgate-login"
	// csrfHeader must come with every request that changes something and
	// is signed in by the session cookie: another site's page can send
	// the cookie with a form, but not a header of its own.
	csrfHeader = "X-Sandgate-CSRF"
)

// signInFailure is a refused sign-in: the reason audited and the error
// answered.
type signInFailure struct {
	reason, detail string
	err            error
}

// signIn finds who the request signs in as: a bearer token, else a
// client certificate, else the console's session. ok is false when the
// request carries none of them.
func (s edge) signIn(c echo.Context) (sandgate.Principal, sandgate.SignIn, *signInFailure, bool) {
	req := c.Request()
	ctx := req.Context()
	// A preview's link is its only credential (port_links.go).
	if link := linkOf(c); link != "" {
		return s.linkSignIn(c, link)
	}
	if h := req.Header.Get("Authorization"); h != "" {
		token, ok := bearerToken(h)
		if !ok {
			return sandgate.Principal{}, sandgate.SignIn{}, nil, false
		}
		if s.d.Tokens != nil && s.d.Tokens.Enabled() && looksLikeJWT(token) {
			id, in, err := s.d.Tokens.VerifyToken(ctx, token)
			if err != nil {
				return sandgate.Principal{}, sandgate.SignIn{}, &signInFailure{"unauthenticated", sandgate.ErrorMessageOf(err), err}, true
			}
			return s.mapped(ctx, id, in)
		}
		if p, ok := s.d.Principals.Authenticate(token); ok {
			return p, sandgate.SignInToken, nil, true
		}
		return sandgate.Principal{}, sandgate.SignIn{}, &signInFailure{"unauthenticated", "unknown token",
			sandgate.Errorf(sandgate.CodeUnauthenticated, "the bearer token is not valid")}, true
	}
	if cert := clientCertificate(req); cert != nil {
		id, in := certificateIdentity(cert)
		return s.mapped(ctx, id, in)
	}
	if ck, err := req.Cookie(sessionCookie); err == nil && s.d.Login != nil {
		if f := checkCSRF(req); f != nil {
			return sandgate.Principal{}, sandgate.SignIn{}, f, true
		}
		id, in, err := s.d.Login.Session(ctx, ck.Value)
		if err != nil {
			ended := sandgate.Errorf(sandgate.CodeUnauthenticated, "the console session has ended (%s); sign in again", sandgate.ErrorMessageOf(err))
			// The console tells a person whose session ended from one
			// who never signed in by this detail, not by the message.
			ended.Details = map[string]any{"sign_in": "session_ended"}
			return sandgate.Principal{}, sandgate.SignIn{}, &signInFailure{"unauthenticated", "console session: " + sandgate.ErrorMessageOf(err), ended}, true
		}
		return s.mapped(ctx, id, in)
	}
	return sandgate.Principal{}, sandgate.SignIn{}, nil, false
}

// mapped is the principal the policy maps a verified sign-in to, and the
// sign-in as the trail keeps it.
func (s edge) mapped(ctx context.Context, id sandgate.Identity, in sandgate.SignIn) (sandgate.Principal, sandgate.SignIn, *signInFailure, bool) {
	p, err := s.d.Authorizer.MapPrincipal(ctx, id)
	if err != nil {
		if sandgate.ErrorCodeOf(err) != sandgate.CodeForbidden {
			err = sandgate.WrapError(sandgate.CodeForbidden, err, "the sign-in could not be mapped to a principal")
		}
		return sandgate.Principal{}, sandgate.SignIn{}, &signInFailure{"unmapped", sandgate.ErrorMessageOf(err), err}, true
	}
	return p, s.trailForm(in), nil, true
}

// trailForm is in as the trail keeps it: the fields the policy's
// mask_sign_in names as keyed hashes.
func (s edge) trailForm(in sandgate.SignIn) sandgate.SignIn {
	if m, ok := s.d.Authorizer.(SignInMasks); ok {
		if paths := m.MaskSignIn(); len(paths) > 0 {
			return in.Masked(s.mask, paths)
		}
	}
	return in
}

// checkCSRF refuses a request signed in by the session cookie that
// changes something without the console's header, or that a browser says
// came from another site.
func checkCSRF(req *http.Request) *signInFailure {
	site := req.Header.Get("Sec-Fetch-Site")
	if site != "" && site != "same-origin" && site != "none" {
		return &signInFailure{"forbidden", "cross-site request with the console's session",
			sandgate.Errorf(sandgate.CodeForbidden, "a request from another site may not use the console's session")}
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead, http.MethodOptions:
		return nil
	}
	if req.Header.Get(csrfHeader) == "" {
		return &signInFailure{"forbidden", "console session without " + csrfHeader,
			sandgate.Errorf(sandgate.CodeForbidden, "a request signed in by the console's session must carry the %s header", csrfHeader)}
	}
	return nil
}

// clientCertificate is the client certificate the TLS listener verified
// against its client CA; nil on the plain listener or without one.
func clientCertificate(req *http.Request) *x509.Certificate {
	if req.TLS == nil || len(req.TLS.VerifiedChains) == 0 || len(req.TLS.VerifiedChains[0]) == 0 {
		return nil
	}
	return req.TLS.VerifiedChains[0][0]
}

// looksLikeJWT reports whether token has the form of a signed JWT: three
// base64url parts, the first two not empty. Tokens of the tokens file do
// not.
func looksLikeJWT(token string) bool {
	parts := strings.Split(token, ".")
	if len(parts) != 3 || parts[0] == "" || parts[1] == "" {
		return false
	}
	for _, p := range parts {
		if strings.IndexFunc(p, func(r rune) bool {
			return !(r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_')
		}) >= 0 {
			return false
		}
	}
	return true
}

// certificateIdentity is a verified client certificate as the principal
// rule maps it: claims in the shape a token's have (sub the common name,
// else the subject's distinguished name; email the first email address;
// team the first organization; roles the organizational units), and the
// certificate's details beside them.
func certificateIdentity(cert *x509.Certificate) (sandgate.Identity, sandgate.SignIn) {
	info := &sandgate.CertificateInfo{
		Subject: cert.Subject.String(), CommonName: cert.Subject.CommonName,
		Organization: orEmpty(cert.Subject.Organization), OrganizationalUnit: orEmpty(cert.Subject.OrganizationalUnit),
		Issuer: cert.Issuer.String(), Serial: cert.SerialNumber.String(),
		DNSNames: orEmpty(cert.DNSNames), EmailAddresses: orEmpty(cert.EmailAddresses), URIs: []string{},
	}
	for _, u := range cert.URIs {
		info.URIs = append(info.URIs, u.String())
	}
	sub := cert.Subject.CommonName
	if sub == "" {
		sub = info.Subject
	}
	claims := map[string]any{"sub": sub, "cn": cert.Subject.CommonName}
	email := ""
	if len(cert.EmailAddresses) > 0 {
		email = cert.EmailAddresses[0]
		claims["email"] = email
	}
	if len(cert.Subject.Organization) > 0 {
		claims["team"] = cert.Subject.Organization[0]
	}
	roles := make([]any, 0, len(cert.Subject.OrganizationalUnit))
	for _, ou := range cert.Subject.OrganizationalUnit {
		roles = append(roles, ou)
	}
	claims["roles"] = roles
	return sandgate.Identity{Method: sandgate.MethodMTLS, Issuer: info.Issuer, Claims: claims, Certificate: info},
		sandgate.SignIn{Method: sandgate.MethodMTLS, Issuer: info.Issuer, Subject: info.Subject, Email: email}
}

func orEmpty(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
