package gateway

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"strings"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/admission"
)

// Port links: a browser cannot send a bearer header with a page it
// navigates to, and the console's session cookie is not sent from a
// preview's sandboxed (opaque) origin. So the console asks for a link to
// a session's port (POST /v1/sessions/{id}/previews, admitted like a
// connection to the port and recorded), and the gateway answers a path
// that carries its own short-lived credential:
//
//	/v1/sessions/{id}/previews/{link}/…
//
// link is base64url(claims) "." base64url(HMAC-SHA256(key, claims)):
// the session, the port, the principal who asked and its sign-in, and
// the expiry. The preview's relative URLs keep the link; it works for
// that session's port alone, until it expires, and every request through
// it is admitted again as its principal (so a session that has closed,
// or a principal the policy no longer lets in, is refused). docs/agents.md
// ("Port previews in a browser") gives the threats.

// linkClaims is what a port link signs.
type linkClaims struct {
	Session   string             `json:"s"`
	Port      int                `json:"p"`
	Principal sandgate.Principal `json:"w"`
	SignIn    sandgate.SignIn    `json:"i"`
	Expires   int64              `json:"e"`
}

// The bounds of a link's life, and of its length at decode.
const (
	defaultLinkTTL = 10 * time.Minute
	maxLinkTTL     = time.Hour
	maxLinkLen     = 4096
)

// portLinks mints and checks port links with one key: the cluster
// secret's (derived, so that any node checks a link another made), else
// a random one of this process.
type portLinks struct {
	key []byte
	now func() time.Time
}

func newPortLinks(clusterSecret []byte, now func() time.Time) *portLinks {
	key := make([]byte, 32)
	if len(clusterSecret) > 0 {
		m := hmac.New(sha256.New, clusterSecret)
		m.Write([]byte("sandgate port link v1"))
		key = m.Sum(nil)
	} else if _, err := rand.Read(key); err != nil {
		panic("crypto/rand: " + err.Error())
	}
	return &portLinks{key: key, now: now}
}

func (l *portLinks) sign(payload string) string {
	m := hmac.New(sha256.New, l.key)
	m.Write([]byte(payload))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// mint returns the link for claims.
func (l *portLinks) mint(cl linkClaims) (string, error) {
	raw, err := json.Marshal(cl)
	if err != nil {
		return "", err
	}
	payload := base64.RawURLEncoding.EncodeToString(raw)
	return payload + "." + l.sign(payload), nil
}

// open checks a link for session and returns its claims: UNAUTHENTICATED
// when it is malformed, its signature is not the gateway's, it is for
// another session or it has expired.
func (l *portLinks) open(link, session string) (linkClaims, error) {
	var cl linkClaims
	payload, sig, ok := strings.Cut(link, ".")
	if !ok || len(link) > maxLinkLen || !hmac.Equal([]byte(sig), []byte(l.sign(payload))) {
		return cl, sandgate.Errorf(sandgate.CodeUnauthenticated, "this preview link is not one the gateway made; open the preview from the console again")
	}
	raw, err := base64.RawURLEncoding.DecodeString(payload)
	if err != nil || json.Unmarshal(raw, &cl) != nil {
		return cl, sandgate.Errorf(sandgate.CodeUnauthenticated, "this preview link is malformed")
	}
	if cl.Session != session {
		return cl, sandgate.Errorf(sandgate.CodeUnauthenticated, "this preview link is for another session")
	}
	if !l.now().Before(time.Unix(cl.Expires, 0)) {
		return cl, sandgate.Errorf(sandgate.CodeUnauthenticated, "this preview link expired at %s; open the preview from the console again",
			time.Unix(cl.Expires, 0).UTC().Format(time.RFC3339))
	}
	return cl, nil
}

// linkSignIn signs in a request through a port link: the link's
// principal, as it was when the link was made.
func (s edge) linkSignIn(c echo.Context, link string) (sandgate.Principal, sandgate.SignIn, *signInFailure, bool) {
	cl, err := s.links.open(link, c.Param("id"))
	if err != nil {
		return sandgate.Principal{}, sandgate.SignIn{}, &signInFailure{"unauthenticated", "port link: " + sandgate.ErrorMessageOf(err), err}, true
	}
	c.Set(keyLink, cl)
	return cl.Principal, cl.SignIn, nil, true
}

// keyLink holds a request's port link claims.
const keyLink = "sandgate.link"

// recordedPath is the request's path as the trail keeps it: a port link
// in it is a credential, and is left out.
func recordedPath(c echo.Context) string {
	p := c.Request().URL.Path
	if link := linkOf(c); link != "" {
		p = strings.Replace(p, link, "-", 1)
	}
	return shorten(p, 256)
}

// previewRequest is POST /v1/sessions/{id}/previews's body.
type previewRequest struct {
	Port       int `json:"port"`
	TTLSeconds int `json:"ttl_seconds,omitempty"`
}

// previewLink is its answer: the path to open, and until when.
type previewLink struct {
	URL       string    `json:"url"`
	Port      int       `json:"port"`
	ExpiresAt time.Time `json:"expires_at"`
}

// mintPreview is POST /v1/sessions/{id}/previews: a link to the port, if
// the gate admits a connection to it by this principal now.
func (s streamRoutes) mintPreview(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	var req previewRequest
	if err := readStrictJSON(c, 1024, &req); err != nil {
		return err
	}
	if req.Port < 1 || req.Port > 65535 {
		return sandgate.FieldError("port", "must be a port number from 1 to 65535")
	}
	ttl := defaultLinkTTL
	if req.TTLSeconds != 0 {
		ttl = time.Duration(req.TTLSeconds) * time.Second
		if ttl < time.Minute || ttl > maxLinkTTL {
			return sandgate.FieldError("ttl_seconds", "must be from 60 to %d", int(maxLinkTTL/time.Second))
		}
	}
	expires := s.links.now().Add(ttl).Truncate(time.Second)
	id := c.Param("id")
	if _, err := s.admit(c, admission.PortLink{Session: id, Port: req.Port, Expires: expires}); err != nil {
		return err
	}
	link, err := s.links.mint(linkClaims{Session: id, Port: req.Port, Principal: principal(c), SignIn: signIn(c), Expires: expires.Unix()})
	if err != nil {
		return err
	}
	c.Response().Header().Set("Cache-Control", "no-store")
	return c.JSON(http.StatusCreated, previewLink{URL: "/v1/sessions/" + id + "/previews/" + link + "/", Port: req.Port, ExpiresAt: expires.UTC()})
}

// preview is ANY /v1/sessions/{id}/previews/{link}/…: the port the link
// names, as a connection of the link's principal (port).
func (s streamRoutes) preview(c echo.Context) error {
	cl, _ := c.Get(keyLink).(linkClaims)
	if cl.Port == 0 {
		return sandgate.Errorf(sandgate.CodeUnauthenticated, "a preview needs its link")
	}
	// Its answers must not hand the link on to a page they link to.
	c.Response().Header().Set("Referrer-Policy", "no-referrer")
	return s.proxyPort(c, cl.Port, "/v1/sessions/"+c.Param("id")+"/previews/"+c.Param("link"))
}

// previewRoute is where a port link is served.
const previewRoute = "/sessions/:id/previews/:link/*"

// linkOf is the link of a request on previewRoute, "" elsewhere.
func linkOf(c echo.Context) string {
	if !strings.HasSuffix(c.Path(), "/previews/:link/*") {
		return ""
	}
	return c.Param("link")
}
