package gateway

import (
	"context"
	"log/slog"
	"net/http"
	"runtime"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// edge is the middleware every request passes before its handler:
// correlation IDs, the request log and metrics, body limits,
// authentication and roles (and their refusals' audit), the per-source
// limits, and, in a cluster, the hop to the node that owns the object.
type edge struct {
	*web
	authFailures *limiters
	requests     *limiters
}

// limitRate applies the per-address request limit (Config.RateLimit) to
// a route that needs no token.
func (s edge) limitRate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		if s.requests != nil && !s.requests.allow(c.RealIP()) {
			return sandgate.Errorf(sandgate.CodeRateLimited, "too many requests from this address; retry later")
		}
		return next(c)
	}
}

// authedRoutes registers /v1 routes behind authentication.
type authedRoutes struct {
	e    *echo.Echo
	auth echo.MiddlewareFunc
	// forwarded checks the signature of a request another node of the
	// cluster forwarded.
	forwarded echo.MiddlewareFunc
}

func (a *authedRoutes) add(method, path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) {
	a.e.Add(method, "/v1"+path, h, append([]echo.MiddlewareFunc{a.forwarded, a.auth}, m...)...)
}

// GET registers a GET route.
func (a *authedRoutes) GET(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) {
	a.add(http.MethodGet, path, h, m...)
}

// POST registers a POST route.
func (a *authedRoutes) POST(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) {
	a.add(http.MethodPost, path, h, m...)
}

// PUT registers a PUT route.
func (a *authedRoutes) PUT(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) {
	a.add(http.MethodPut, path, h, m...)
}

// DELETE registers a DELETE route.
func (a *authedRoutes) DELETE(path string, h echo.HandlerFunc, m ...echo.MiddlewareFunc) {
	a.add(http.MethodDelete, path, h, m...)
}

// correlate takes a valid X-Correlation-ID or makes one, echoes it and
// gives the request a logger that carries it.
func (s edge) correlate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		id := c.Request().Header.Get("X-Correlation-ID")
		if !correlationPattern.MatchString(id) {
			id = newUUIDv7()
		}
		c.Set(keyCorrelation, id)
		h := c.Response().Header()
		h.Set("X-Correlation-ID", id)
		// The console shares the API's origin: no answer may be sniffed
		// into a type it was not sent as (a run's output into HTML).
		h.Set("X-Content-Type-Options", "nosniff")
		return next(c)
	}
}

// observe logs each request and measures its latency. It hands errors to
// the error handler itself so that the status it records is the one sent.
func (s edge) observe(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		start := time.Now()
		if err := next(c); err != nil {
			c.Error(err)
		}
		status := c.Response().Status
		route := c.Path()
		if route == "" || (strings.HasSuffix(route, "/*") && route != consoleRoute && route != artifactRoute) {
			route = "unmatched"
		}
		elapsed := time.Since(start)
		method := c.Request().Method
		s.metrics.observeRequest(method, route, status, elapsed)
		attrs := make([]slog.Attr, 0, 8)
		attrs = append(attrs, slog.String("correlation_id", correlationID(c)), slog.String("method", method),
			slog.String("route", route), slog.Int("status", status),
			slog.Int64("duration_ms", elapsed.Milliseconds()), slog.String("source", c.RealIP()))
		if p := principal(c); p.Name != "" {
			attrs = append(attrs, slog.String("principal", p.Name), slog.String("team", p.Team))
		}
		s.log.LogAttrs(c.Request().Context(), slog.LevelInfo, "request", attrs...)
		return nil
	}
}

// yield lets the goroutines that wait in the runtime's global run queue go
// first. While every P has work, the scheduler does not poll the network:
// sysmon does, every 10 ms, and queues the goroutines whose connections
// became readable on the global run queue, which a busy P serves once
// every 61 turns. A connection whose next request is already buffered
// never leaves its P, so the others (clients, and the audit writer waiting
// on Postgres) waited there for 14 ms at the median and up to 200 ms in a
// trace under wrk, while requests kept being answered. Yielding at the
// start of every request sends each through the same queue, in order: the
// same wakeups then waited 1.8 ms at the median and 32 ms at most. It sits
// inside observe, so the wait counts in the request's duration.
func yield(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		runtime.Gosched()
		return next(c)
	}
}

// limitBody refuses bodies over the limit: at once by Content-Length, and
// while reading otherwise.
func (s edge) limitBody(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		req := c.Request()
		limit := s.cfg.BodyLimit
		if req.Method == http.MethodPost && req.URL.Path == "/v1/runs" && isMultipart(req) {
			// A run with its workspace archive: the spec, the archive and
			// the parts' headers.
			limit = sandgate.MaxSpecBytes + s.cfg.MaxWorkspaceBytes + 64<<10
		}
		if req.Method == http.MethodPost && req.URL.Path == "/v1/policies/replay" {
			// A candidate bundle: every file of a policy directory.
			limit = api.MaxReplayBodyBytes
		}
		if req.Method == http.MethodPut && strings.HasPrefix(req.URL.Path, "/v1/sessions/") && strings.HasSuffix(req.URL.Path, "/files") {
			// A file or an archive into a session's workspace.
			limit = s.cfg.MaxWorkspaceBytes
		}
		if req.ContentLength > limit {
			return sandgate.Errorf(sandgate.CodeTooLarge, "body exceeds %d bytes", limit)
		}
		if req.Body != nil {
			// One byte more than the limit so that the decoder sees the
			// excess and answers TOO-LARGE itself.
			req.Body = http.MaxBytesReader(c.Response(), req.Body, limit+1)
		}
		return next(c)
	}
}

// refuseNUL answers INVALID-REQUEST, naming the parameter, for a query
// parameter that holds a NUL character or invalid UTF-8: no filter value
// can hold one, and Postgres would refuse it as a database error. JSON
// bodies are checked by their decoder.
func refuseNUL(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		for name, values := range c.QueryParams() {
			for _, v := range append([]string{name}, values...) {
				if strings.IndexByte(v, 0) >= 0 || !utf8.ValidString(v) {
					return sandgate.FieldError(shorten(strings.ToValidUTF8(strings.ReplaceAll(name, "\x00", `\u0000`), "?"), 128),
						"query parameter must not contain a NUL character or invalid UTF-8")
				}
			}
		}
		return next(c)
	}
}

// authenticate finds who the request signs in as (signin.go: a bearer
// token, a client certificate, the console's session). A valid sign-in
// always authenticates, whatever else came from its address: failures are
// limited per source address for requests that sign in as no one (a flood
// of bad tokens, from behind the same proxy as everyone, must not lock out
// the principals who hold good ones), and per principal for a principal's
// own refusals.
func (s edge) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		src := c.RealIP()
		// A request another node forwarded was counted against its source
		// there; here it would count against that node.
		if s.requests != nil && !forwarded(c) && !s.requests.allow(src) {
			return sandgate.Errorf(sandgate.CodeRateLimited, "too many requests from this address; retry later")
		}
		p, in, failed, present := s.signIn(c)
		if (!present || failed != nil) && s.authFailures.exhausted(src) {
			s.metrics.authDenied.WithLabelValues("rate_limited").Inc()
			return sandgate.Errorf(sandgate.CodeRateLimited, "too many failed attempts from this address; retry later")
		}
		if !present {
			return s.deny(c, sandgate.Principal{}, "unauthenticated", "missing or malformed bearer token",
				sandgate.Errorf(sandgate.CodeUnauthenticated, "a bearer token is required (Authorization: Bearer <token>)"))
		}
		if failed != nil {
			return s.deny(c, sandgate.Principal{}, failed.reason, failed.detail, failed.err)
		}
		if s.authFailures.exhausted(principalKey(p)) {
			s.metrics.authDenied.WithLabelValues("rate_limited").Inc()
			return sandgate.Errorf(sandgate.CodeRateLimited, "too many refused requests by %s; retry later", p.Name)
		}
		c.Set(keyPrincipal, p)
		c.Set(keySignIn, in)
		if l, ok := c.Get(keyLogger).(*slog.Logger); ok {
			c.Set(keyLogger, l.With("principal", p.Name))
		}
		return next(c)
	}
}

// principalKey is the key of a principal's own failures in the limiter,
// which no address can spell.
func principalKey(p sandgate.Principal) string { return "principal\x00" + p.Name }

func bearerToken(h string) (string, bool) {
	scheme, token, ok := strings.Cut(strings.TrimSpace(h), " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	if token == "" || len(token) > 4096 {
		return "", false
	}
	return token, true
}

// authAuditWait is how long a refused request waits for room in the audit
// backlog for its auth.denied event. A trail that is only busy makes room
// within milliseconds; one that cannot take events (Postgres away and the
// spool full) would otherwise let a flood of bad tokens from many
// addresses grow the queue without bound, since no event is ever dropped.
const authAuditWait = 2 * time.Second

// deny audits a refused request (auth.denied), spends one of the source's
// failure tokens and returns err. When the trail cannot take the event in
// time the request is answered AUDIT-UNAVAILABLE instead: it is refused
// either way, and a refusal that is not recorded is not one that was
// decided on.
func (s edge) deny(c echo.Context, p sandgate.Principal, reason, detail string, err error) error {
	src := c.RealIP()
	// An authenticated principal's refusals count against it alone; the
	// rest against the address they came from.
	if p.Name != "" {
		s.authFailures.spend(principalKey(p))
	} else {
		s.authFailures.spend(src)
	}
	s.metrics.authDenied.WithLabelValues(reason).Inc()
	ctx, cancel := context.WithTimeout(c.Request().Context(), authAuditWait)
	qerr := s.d.Recorder.Queue(ctx, sandgate.NewAuthDenied(sandgate.PrincipalSubject(p, correlationID(c), s.cfg.Node).By(signIn(c)), s.d.Clock(), reason,
		map[string]any{"method": c.Request().Method, "path": recordedPath(c), "source": src, "reason": detail}))
	cancel()
	if qerr != nil {
		s.logger(c).Error("request refused; the audit trail cannot take its auth.denied event", "reason", reason,
			"detail", detail, "source", src, "error", qerr)
		return sandgate.WrapError(sandgate.CodeAuditUnavailable, qerr, "the audit trail cannot record this request now; retry later")
	}
	s.logger(c).Warn("request denied", "reason", reason, "detail", detail, "source", src)
	return err
}

// shorten cuts s to at most n bytes, so that hostile input cannot bloat an
// audit event.
func shorten(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}
