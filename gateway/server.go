// Package gateway is sandgate's HTTP API on echo v4: authentication,
// correlation IDs, strict decoding, the run service that ties the policy
// decision, the audit trail and the executor together, Server-Sent Events
// for live output and Prometheus metrics. Its wire types are package
// gateway/api's; package gateway/client is the Go client.
//
// It meets the other parts only at the root package's interfaces.
package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// Server is the gateway: an HTTP handler and the runs it started.
type Server struct {
	cfg      Config
	d        Deps
	echo     *echo.Echo
	svc      *service
	metrics  *Metrics
	gatherer prometheus.Gatherer
	log      *slog.Logger

	authFailures *limiters
	requests     *limiters

	stopOnce sync.Once
	stopping chan struct{}

	openAPIDoc []byte
}

// New checks cfg and deps and builds the server. Runs start only once a
// request admits them; Shutdown (or Serve's return) ends them.
func New(cfg Config, deps Deps) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if err := deps.check(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if deps.Clock == nil {
		deps.Clock = time.Now
	}
	if deps.IDs == nil {
		deps.IDs = newUUIDv7
	}
	if deps.Logger == nil {
		deps.Logger = slog.New(slog.DiscardHandler)
	}
	deps.Logger = deps.Logger.With("node", cfg.Node)
	m := deps.Metrics
	if m == nil {
		var err error
		if m, err = NewMetrics(deps.Registry); err != nil {
			return nil, err
		}
	}
	if deps.Gatherer == nil {
		if g, ok := m.reg.(prometheus.Gatherer); ok {
			deps.Gatherer = g
		} else {
			deps.Gatherer = prometheus.DefaultGatherer
		}
	}
	var sec secrets = masker{key: cfg.MaskKey}
	if len(cfg.MaskKey) == 0 {
		r, ok := deps.Recorder.(Redactor)
		if !ok {
			return nil, errors.New("gateway: Config.MaskKey is required when the Recorder is not a Redactor")
		}
		sec = redactorSecrets{r: r}
	}
	runCtx, stopRuns := context.WithCancel(context.Background())
	s := &Server{
		cfg: cfg, d: deps, metrics: m, gatherer: deps.Gatherer, log: deps.Logger,
		authFailures: newLimiters(cfg.AuthFailureRate, cfg.AuthFailureBurst, deps.Clock),
		stopping:     make(chan struct{}),
		openAPIDoc:   api.OpenAPI(),
	}
	if cfg.RateLimit > 0 {
		s.requests = newLimiters(cfg.RateLimit, cfg.RateBurst, deps.Clock)
	}
	// The archives a previous process of this node left: their runs either
	// ran already (their workspace was made from them) or are lost.
	removeStaleUploads(cfg.UploadDir, deps.Logger)
	s.svc = &service{
		cfg: cfg, d: deps, now: deps.Clock, newID: deps.IDs, mask: sec,
		metrics: m, log: deps.Logger, live: newHub(), idem: newIdemCache(), teams: newTeamLoad(), sessions: newSessionHub(),
		runCtx: runCtx, stopRuns: stopRuns,
	}
	if deps.Cluster != nil {
		s.svc.cluster = newCluster(s.svc, deps.Cluster, deps.ClusterControl)
	}
	s.svc.callbacks = newCallbacks(callbackOptions{
		key: cfg.CallbackKey, attempts: cfg.CallbackAttempts, timeout: cfg.CallbackTimeout,
		backoff: cfg.CallbackBackoff, workers: cfg.CallbackWorkers, queue: cfg.CallbackQueue,
		lookup: cfg.callbackLookup, events: deps.Recorder, now: deps.Clock, node: cfg.Node,
		log:       deps.Logger.With("component", "callbacks"),
		delivered: func(result string) { m.callbacks.WithLabelValues(result).Inc() },
	})
	m.attach(deps, s.svc.live.count, s.svc.sessions.count)
	s.echo = s.routes()
	return s, nil
}

func newUUIDv7() string {
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
}

// Handler returns the HTTP handler of the whole API.
func (s *Server) Handler() http.Handler { return s.echo }

// Serve answers HTTP on ln until ctx ends, then shuts down gracefully: it
// stops accepting, ends open log streams and waits, ends the runs as
// Config.CancelOnShutdown says, and returns. The caller then flushes the
// audit writer.
func (s *Server) Serve(ctx context.Context, ln net.Listener) error {
	hs := &http.Server{
		// A write that waits writeStall for the client is cut off
		// (writedeadline.go).
		Handler:           withWriteDeadlines(s.echo, writeStall),
		ReadHeaderTimeout: 10 * time.Second,
		// Bodies are at most 1 MiB: a client trickling one is cut off.
		// No WriteTimeout: log streams last as long as their runs.
		ReadTimeout: time.Minute,
		IdleTimeout: 2 * time.Minute,
		ErrorLog:    slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BaseContext: func(net.Listener) context.Context { return context.WithoutCancel(ctx) },
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	s.log.Info("gateway listening", "addr", ln.Addr().String())
	var serveErr error
	select {
	case serveErr = <-errc:
	case <-ctx.Done():
	}
	grace := s.cfg.ShutdownGrace + cancelWait
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
	defer cancel()
	s.beginStop()
	if err := hs.Shutdown(sctx); err != nil {
		s.log.Warn("http shutdown", "error", err)
		_ = hs.Close()
	}
	err := s.Shutdown(sctx)
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return errors.Join(serveErr, err)
	}
	return err
}

// beginStop marks the server as stopping: /readyz answers 503, new runs
// are refused, waiting requests and log streams return.
func (s *Server) beginStop() {
	s.stopOnce.Do(func() {
		s.svc.draining.Store(true)
		close(s.stopping)
	})
}

// Shutdown refuses new runs and ends the running ones (cancelled at once
// with CancelOnShutdown, else given ShutdownGrace to finish), waiting until
// each has stored its result or ctx ends. Serve calls it; tests that use
// Handler call it themselves.
func (s *Server) Shutdown(ctx context.Context) error {
	s.beginStop()
	if s.svc.cluster != nil {
		s.svc.cluster.halt()
	}
	err := s.svc.shutdown(ctx)
	if s.svc.cluster != nil {
		s.svc.cluster.leave(ctx)
	}
	// Callbacks of the runs that just ended are delivered while the drain
	// lasts; the rest are recorded as failed.
	s.svc.callbacks.shutdown(ctx, s.cfg.CallbackDrain)
	s.log.Info("gateway stopped", "error", err)
	return err
}

// Context keys of the values middleware leaves for handlers.
const (
	keyCorrelation = "sandgate.correlation_id"
	keyPrincipal   = "sandgate.principal"
	keyLogger      = "sandgate.logger"
)

var correlationPattern = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// correlationID returns the request's correlation ID.
func correlationID(c echo.Context) string {
	if v, ok := c.Get(keyCorrelation).(string); ok {
		return v
	}
	return ""
}

// principal returns the authenticated caller.
func principal(c echo.Context) sandgate.Principal {
	p, _ := c.Get(keyPrincipal).(sandgate.Principal)
	return p
}

// logger returns the request's logger, which carries its correlation ID
// and, once authenticated, its principal. It is made on first use: most
// requests log nothing but their request line, which observe writes with
// its own attributes.
func (s *Server) logger(c echo.Context) *slog.Logger {
	if l, ok := c.Get(keyLogger).(*slog.Logger); ok {
		return l
	}
	id := correlationID(c)
	if id == "" {
		return s.log
	}
	l := s.log.With("correlation_id", id)
	if p := principal(c); p.Name != "" {
		l = l.With("principal", p.Name)
	}
	c.Set(keyLogger, l)
	return l
}

func (s *Server) routes() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	e.HTTPErrorHandler = s.handleError
	e.JSONSerializer = jsonSerializer{}
	if s.cfg.TrustProxyHeaders {
		e.IPExtractor = echo.ExtractIPFromXFFHeader()
	} else {
		e.IPExtractor = echo.ExtractIPDirect()
	}
	e.Use(s.correlate, s.observe, yield, s.recoverPanics, s.limitBody, refuseNUL)

	e.GET("/healthz", s.healthz)
	e.GET("/readyz", s.readyz)
	e.GET("/metrics", s.metricsHandler())

	// Authentication is per route, not group middleware: echo would
	// otherwise answer a wrong method on a known path with 404, not 405.
	v1 := &authedRoutes{e: e, auth: s.authenticate, forwarded: s.acceptForwarded}
	sub := []sandgate.Role{sandgate.RoleSubmitter}
	readers := []sandgate.Role{sandgate.RoleSubmitter, sandgate.RoleAdmin, sandgate.RoleAuditor}
	cancellers := []sandgate.Role{sandgate.RoleSubmitter, sandgate.RoleAdmin}
	policyReaders := []sandgate.Role{sandgate.RoleSecurity, sandgate.RoleAdmin, sandgate.RoleAuditor}
	policyWriters := []sandgate.Role{sandgate.RoleSecurity, sandgate.RoleAdmin}
	auditors := []sandgate.Role{sandgate.RoleAuditor, sandgate.RoleAdmin}
	admins := []sandgate.Role{sandgate.RoleAdmin}

	v1.POST("/runs", s.submitRun, s.require(sub...), s.toCapacity)
	v1.GET("/runs", s.listRuns, s.require(readers...))
	v1.GET("/runs/:id", s.getRun, s.require(readers...))
	v1.GET("/runs/:id/logs", s.runLogs, s.require(readers...), s.toOwner(runOwner))
	v1.GET("/runs/:id/artifacts", s.listArtifacts, s.require(readers...))
	v1.GET(strings.TrimPrefix(artifactRoute, "/v1"), s.getArtifact, s.require(readers...))
	v1.GET("/runs/:id/artifacts.tar", s.artifactsTar, s.require(readers...))
	v1.GET("/runs/:id/receipt", s.runReceipt, s.require(readers...))
	v1.DELETE("/runs/:id", s.cancelRun, s.require(cancellers...), s.toOwner(runOwner))
	v1.POST("/admission/review", s.review)
	v1.GET("/policies", s.policyStatus, s.require(policyReaders...))
	v1.POST("/policies/reload", s.policyReload, s.require(policyWriters...))
	v1.POST("/policies/replay", s.policyReplay, s.require(policyWriters...))
	v1.GET("/audit/events", s.auditEvents, s.require(auditors...))
	v1.GET("/audit/export", s.auditExport, s.require(auditors...))
	v1.GET("/audit/verify", s.auditVerify, s.require(auditors...))
	v1.GET("/audit/checkpoint", s.auditCheckpoint, s.require(auditors...))
	v1.POST("/audit/checkpoint/cosignature", s.auditCosign, s.require(sandgate.RoleAuditor))
	v1.POST("/audit/witness/alarm", s.auditWitnessAlarm, s.require(sandgate.RoleAuditor))
	v1.GET("/audit/proof/inclusion", s.auditInclusion, s.require(auditors...))
	v1.GET("/audit/proof/consistency", s.auditConsistency, s.require(auditors...))
	v1.GET("/sandboxes", s.sandboxes, s.require(admins...))
	v1.POST("/sandboxes/cleanup", s.sandboxCleanup, s.require(admins...))
	v1.GET("/volumes", s.volumes, s.require(admins...))
	v1.DELETE("/volumes/:team/:name", s.removeVolume, s.require(admins...))
	v1.POST("/sessions", s.createSession, s.require(sub...))
	v1.GET("/sessions", s.listSessions, s.require(readers...))
	v1.GET("/sessions/:id", s.getSession, s.require(readers...))
	v1.DELETE("/sessions/:id", s.deleteSession, s.require(cancellers...), s.toOwner(sessionOwner))
	v1.POST("/sessions/:id/runs", s.execInSession, s.require(sub...), s.toOwner(sessionOwner))
	v1.PUT("/sessions/:id/files", s.putSessionFiles, s.require(sub...), s.toOwner(sessionOwner))
	v1.GET("/sessions/:id/files", s.getSessionFiles, s.require(readers...), s.toOwner(sessionOwner))
	v1.GET("/nodes", s.listNodes, s.require(admins...))
	v1.GET("/config", s.config)
	v1.GET("/whoami", s.whoami)
	v1.GET("/openapi.json", s.openAPI)
	s.mountConsole(e)
	return e
}

// consoleRoute is where Deps.Console is mounted. The console's pages and
// files are not API routes: the OpenAPI document does not list them.
const consoleRoute = "/console/*"

// mountConsole serves Deps.Console under /console/, and redirects / and
// /console to it. The files need no token (they hold no data; the sign-in
// page is one of them), but they are limited per source address like
// every /v1 request, and every answer carries the console's own security
// headers (see package console). What the pages show comes from the API,
// under its authentication and roles.
func (s *Server) mountConsole(e *echo.Echo) {
	if s.d.Console == nil {
		return
	}
	files := echo.WrapHandler(http.StripPrefix("/console", s.d.Console))
	toConsole := func(c echo.Context) error { return c.Redirect(http.StatusFound, "/console/") }
	e.GET("/", toConsole, s.limitRate)
	e.GET("/console", toConsole, s.limitRate)
	e.GET(consoleRoute, files, s.limitRate)
	e.HEAD(consoleRoute, files, s.limitRate)
}

// limitRate applies the per-address request limit (Config.RateLimit) to
// a route that needs no token.
func (s *Server) limitRate(next echo.HandlerFunc) echo.HandlerFunc {
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
func (s *Server) correlate(next echo.HandlerFunc) echo.HandlerFunc {
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
func (s *Server) observe(next echo.HandlerFunc) echo.HandlerFunc {
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
func (s *Server) limitBody(next echo.HandlerFunc) echo.HandlerFunc {
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

// authenticate checks the bearer token. A valid token always
// authenticates, whatever else came from its address: failures are
// limited per source address for requests without a valid token (a flood
// of bad tokens, from behind the same proxy as everyone, must not lock out
// the principals who hold good ones), and per principal for a principal's
// own refusals.
func (s *Server) authenticate(next echo.HandlerFunc) echo.HandlerFunc {
	return func(c echo.Context) error {
		src := c.RealIP()
		// A request another node forwarded was counted against its source
		// there; here it would count against that node.
		if s.requests != nil && !forwarded(c) && !s.requests.allow(src) {
			return sandgate.Errorf(sandgate.CodeRateLimited, "too many requests from this address; retry later")
		}
		token, hasToken := bearerToken(c.Request().Header.Get("Authorization"))
		p, valid := sandgate.Principal{}, false
		if hasToken {
			p, valid = s.d.Principals.Authenticate(token)
		}
		if !valid {
			if s.authFailures.exhausted(src) {
				s.metrics.authDenied.WithLabelValues("rate_limited").Inc()
				return sandgate.Errorf(sandgate.CodeRateLimited, "too many failed attempts from this address; retry later")
			}
			if !hasToken {
				return s.deny(c, sandgate.Principal{}, "unauthenticated", "missing or malformed bearer token",
					sandgate.Errorf(sandgate.CodeUnauthenticated, "a bearer token is required (Authorization: Bearer <token>)"))
			}
			return s.deny(c, sandgate.Principal{}, "unauthenticated", "unknown token",
				sandgate.Errorf(sandgate.CodeUnauthenticated, "the bearer token is not valid"))
		}
		if s.authFailures.exhausted(principalKey(p)) {
			s.metrics.authDenied.WithLabelValues("rate_limited").Inc()
			return sandgate.Errorf(sandgate.CodeRateLimited, "too many refused requests by %s; retry later", p.Name)
		}
		c.Set(keyPrincipal, p)
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

// require lets the request through when the principal holds one of roles.
func (s *Server) require(roles ...sandgate.Role) echo.MiddlewareFunc {
	names := make([]string, len(roles))
	for i, r := range roles {
		names[i] = string(r)
	}
	need := strings.Join(names, " or ")
	return func(next echo.HandlerFunc) echo.HandlerFunc {
		return func(c echo.Context) error {
			p := principal(c)
			if !p.Has(roles...) {
				return s.deny(c, p, "forbidden", "role "+need+" required",
					&sandgate.Error{Code: sandgate.CodeForbidden, Message: "this needs the role " + need,
						Details: map[string]any{"required_roles": names}})
			}
			return next(c)
		}
	}
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
func (s *Server) deny(c echo.Context, p sandgate.Principal, reason, detail string, err error) error {
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
	qerr := s.d.Recorder.Queue(ctx, sandgate.Event{
		Type: sandgate.EventAuthDenied, Time: s.d.Clock(), Outcome: reason,
		CorrelationID: correlationID(c), Actor: p.Name, Team: p.Team, Node: s.cfg.Node,
		Payload: map[string]any{
			"method": c.Request().Method, "path": shorten(c.Request().URL.Path, 256), "source": src, "reason": detail,
		},
	})
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
