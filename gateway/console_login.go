package gateway

import (
	"net/http"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate"
)

// The console's sign-in through the OpenID provider (Deps.Login): the
// gateway is the client, with the authorization code flow and PKCE.
//
//	GET  /console/auth.json  {"sso": true|false, "issuer": URL}: whether
//	                         to offer it, and whose button it is
//	GET  /console/login      to the provider, the flow's state in a
//	                         __Host- cookie (SameSite=Lax: the provider's
//	                         redirect back is a cross-site navigation)
//	GET  /console/callback   the code exchanged, the ID token checked; the
//	                         session is a __Host- HttpOnly SameSite=Strict
//	                         cookie holding it, until it expires
//	POST /console/logout     the session cookie cleared
//
// A request signed in by the session cookie must carry X-Sandgate-CSRF
// when it changes something, and must not come from another site
// (signin.go's checkCSRF).
type loginRoutes struct{ edge }

func (s *Server) mountLogin(e *echo.Echo) {
	l := loginRoutes{s.edge}
	e.GET("/console/auth.json", l.offered, s.edge.limitRate)
	e.GET("/console/login", l.begin, s.edge.limitRate)
	e.GET("/console/callback", l.callback, s.edge.limitRate)
	e.POST("/console/logout", l.logout, s.edge.limitRate)
}

// consoleAuth is /console/auth.json: whether the console offers signing
// in with the provider, and the provider's issuer URL for its button.
type consoleAuth struct {
	SSO    bool   `json:"sso"`
	Issuer string `json:"issuer,omitempty"`
}

// offered says whether the console offers signing in with the provider.
func (l loginRoutes) offered(c echo.Context) error {
	c.Response().Header().Set("Cache-Control", "no-store")
	a := consoleAuth{SSO: l.d.Login != nil}
	if a.SSO {
		a.Issuer = l.d.Login.Issuer()
	}
	return c.JSON(http.StatusOK, a)
}

func (l loginRoutes) begin(c echo.Context) error {
	if l.d.Login == nil {
		return sandgate.Errorf(sandgate.CodeNotFound, "this gateway has no console sign-in (SANDGATE_OIDC_CLIENT_ID)")
	}
	redirect, state, err := l.d.Login.Begin(c.Request().Context())
	if err != nil {
		return err
	}
	c.SetCookie(&http.Cookie{Name: loginCookie, Value: state, Path: "/", MaxAge: 600, Secure: true, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.Redirect(http.StatusFound, redirect)
}

func (l loginRoutes) callback(c echo.Context) error {
	if l.d.Login == nil {
		return sandgate.Errorf(sandgate.CodeNotFound, "this gateway has no console sign-in (SANDGATE_OIDC_CLIENT_ID)")
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	// The flow's state is spent, whatever happens next.
	c.SetCookie(&http.Cookie{Name: loginCookie, Value: "", Path: "/", MaxAge: -1, Secure: true, HttpOnly: true, SameSite: http.SameSiteLaxMode})
	q := c.Request().URL.Query()
	if e := q.Get("error"); e != "" {
		return l.deny(c, sandgate.Principal{}, "unauthenticated", "console sign-in: the provider answered "+shorten(e, 64),
			sandgate.Errorf(sandgate.CodeUnauthenticated, "the identity provider did not sign you in: %s", shorten(e+" "+q.Get("error_description"), 256)))
	}
	kept, err := c.Cookie(loginCookie)
	if err != nil {
		return l.deny(c, sandgate.Principal{}, "unauthenticated", "console sign-in without its state cookie",
			sandgate.Errorf(sandgate.CodeUnauthenticated, "this sign-in was not begun here, or took too long: sign in again"))
	}
	session, expires, err := l.d.Login.Finish(c.Request().Context(), q.Get("code"), q.Get("state"), kept.Value)
	if err != nil {
		return l.deny(c, sandgate.Principal{}, "unauthenticated", "console sign-in: "+sandgate.ErrorMessageOf(err), err)
	}
	// The session is a principal only if the policy maps it: checked
	// now, so that a person the policy does not know is told at once.
	id, in, err := l.d.Login.Session(c.Request().Context(), session)
	if err != nil {
		return l.deny(c, sandgate.Principal{}, "unauthenticated", "console sign-in: "+sandgate.ErrorMessageOf(err), err)
	}
	if _, _, f, _ := l.mapped(c.Request().Context(), id, in); f != nil {
		return l.deny(c, sandgate.Principal{}, f.reason, f.detail, f.err)
	}
	c.SetCookie(&http.Cookie{Name: sessionCookie, Value: session, Path: "/", Expires: expires, MaxAge: int(time.Until(expires).Seconds()),
		Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	return c.Redirect(http.StatusFound, "/console/")
}

func (l loginRoutes) logout(c echo.Context) error {
	if f := checkCSRF(c.Request()); f != nil {
		return f.err
	}
	c.SetCookie(&http.Cookie{Name: sessionCookie, Value: "", Path: "/", MaxAge: -1, Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	return c.NoContent(http.StatusNoContent)
}
