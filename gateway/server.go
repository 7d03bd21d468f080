// Package gateway is sandgate's HTTP API on echo v4: authentication,
// correlation IDs, the routes, which hand every operation on sandbox state
// to the one gate (package admission) with its body unread, what executes
// on this node (its runs and sessions, their live output as Server-Sent
// Events, their stored ends), the cluster, and Prometheus metrics. Its
// wire types are package gateway/api's; package gateway/client is the Go
// client.
//
// It meets the other parts at the root package's interfaces, and the
// gate at the narrow ones package admission declares, which it
// implements (gate.go).
package gateway

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/admission"
	"github.com/sandgate/sandgate/gateway/api"
)

// Server is the gateway: an HTTP handler (its middleware, edge, and its
// routes, each kind a type of its own: runRoutes, sessionRoutes, …), the
// gate every operation on sandbox state passes, and this node's runs and
// sessions (node).
type Server struct {
	*web
	echo     *echo.Echo
	edge     edge
	stopOnce sync.Once
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
	mask := sandgate.NewMasker(cfg.MaskKey)
	if len(cfg.MaskKey) == 0 {
		r, ok := deps.Recorder.(MaskerSource)
		if !ok {
			return nil, errors.New("gateway: Config.MaskKey is required when the Recorder has no Masker")
		}
		mask = r.Masker()
	}
	s := &Server{web: &web{
		cfg: cfg, d: deps, metrics: m, gatherer: deps.Gatherer, log: deps.Logger, mask: mask,
		stopping: make(chan struct{}), openAPIDoc: api.OpenAPI(), links: newPortLinks(cfg.ClusterSecret, deps.Clock),
	}}
	s.edge = edge{web: s.web, authFailures: newLimiters(cfg.AuthFailureRate, cfg.AuthFailureBurst, deps.Clock)}
	if cfg.RateLimit > 0 {
		s.edge.requests = newLimiters(cfg.RateLimit, cfg.RateBurst, deps.Clock)
	}
	// The uploads a previous process of this node left: their runs either
	// ran already (their workspace was made from them) or are lost.
	removeStaleUploads(cfg.UploadDir, deps.Logger)
	b := base{cfg: cfg, d: deps, now: deps.Clock, log: deps.Logger, metrics: m}
	n := &node{base: b, teams: admission.NewTeams()}
	n.sessions = newSessions(b, &n.draining)
	cb := newCallbacks(callbackOptions{
		key: cfg.CallbackKey, attempts: cfg.CallbackAttempts, timeout: cfg.CallbackTimeout,
		backoff: cfg.CallbackBackoff, workers: cfg.CallbackWorkers, queue: cfg.CallbackQueue,
		lookup: cfg.callbackLookup, events: deps.Recorder, now: deps.Clock, node: cfg.Node,
		log:       deps.Logger.With("component", "callbacks"),
		delivered: func(result string) { m.callbacks.WithLabelValues(result).Inc() },
	})
	n.runs = newRuns(b, n.sessions, cb)
	if deps.Cluster != nil {
		n.cluster = newCluster(n, deps.Cluster, deps.ClusterControl)
	}
	s.node = n
	var err error
	if s.gate, err = newGate(cfg, deps, mask, m, n.teams, executorSide{runs: n.runs, sessions: n.sessions}, n.fenced); err != nil {
		return nil, err
	}
	s.replays = &replays{base: b, gate: s.gate, mask: mask}
	m.attach(deps, n.runs.live.count, n.sessions.live.count, s.gate.Uploads)
	s.echo = s.routes()
	if deps.Approvals != nil {
		go s.expireApprovals(cfg.ApprovalSweep)
	}
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

// Serve answers HTTP on ln (and on each of more: the TLS listener) until
// ctx ends, then shuts down gracefully: it
// stops accepting, ends open log streams and waits, ends the runs as
// Config.CancelOnShutdown says, and returns. The caller then flushes the
// audit writer.
func (s *Server) Serve(ctx context.Context, ln net.Listener, more ...net.Listener) error {
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
	errc := make(chan error, 1+len(more))
	for _, l := range append([]net.Listener{ln}, more...) {
		go func() { errc <- hs.Serve(l) }()
		s.log.Info("gateway listening", "addr", l.Addr().String())
	}
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
		s.node.draining.Store(true)
		s.gate.Drain()
		close(s.stopping)
	})
}

// Shutdown refuses new runs and ends the running ones (cancelled at once
// with CancelOnShutdown, else given ShutdownGrace to finish), waiting until
// each has stored its result or ctx ends. Serve calls it; tests that use
// Handler call it themselves.
func (s *Server) Shutdown(ctx context.Context) error {
	s.beginStop()
	if s.node.cluster != nil {
		s.node.cluster.halt()
	}
	err := s.node.shutdown(ctx)
	if s.node.cluster != nil {
		s.node.cluster.leave(ctx)
	}
	// Callbacks of the runs that just ended are delivered while the drain
	// lasts; the rest are recorded as failed.
	s.node.runs.callbacks.shutdown(ctx, s.cfg.CallbackDrain)
	s.log.Info("gateway stopped", "error", err)
	return err
}

func (s *Server) routes() *echo.Echo {
	e := echo.New()
	e.HideBanner, e.HidePort = true, true
	ed := s.edge
	e.HTTPErrorHandler = ed.handleError
	e.JSONSerializer = jsonSerializer{}
	if s.cfg.TrustProxyHeaders {
		e.IPExtractor = echo.ExtractIPFromXFFHeader()
	} else {
		e.IPExtractor = echo.ExtractIPDirect()
	}
	e.Use(ed.correlate, ed.observe, yield, ed.recoverPanics, ed.limitBody, refuseNUL)

	ops := opsRoutes{s.web}
	e.GET("/healthz", ops.healthz)
	e.GET("/readyz", ops.readyz)
	e.GET("/metrics", ops.metricsHandler())

	// Authentication is per route, not group middleware: echo would
	// otherwise answer a wrong method on a known path with 404, not 405.
	v1 := &authedRoutes{e: e, auth: ed.authenticate, forwarded: ed.acceptForwarded}
	// Each route asks the policy one question (authz.go). The routes on
	// a run or a session, and those that make one, ask it through the
	// gate, which knows the object; the others ask it here: may, for an
	// object of no team; mayList, for a list of the principal's team's
	// objects (or every team's, when the policy says so).
	may := func(action sandgate.Action, kind string) echo.MiddlewareFunc {
		return ed.authorize(action, kind, false)
	}
	mayList := func(action sandgate.Action, kind string) echo.MiddlewareFunc { return ed.authorize(action, kind, true) }
	toRunOwner, toSessionOwner := ed.toOwner(runOwner), ed.toOwner(sessionOwner)

	runs, logs, arts := runRoutes{s.web}, logRoutes{s.web}, artifactRoutes{s.web}
	v1.POST("/runs", runs.submitRun, ed.toCapacity)
	v1.GET("/runs", runs.listRuns, mayList("run.list", "run"))
	v1.GET("/runs/:id", runs.getRun)
	v1.GET("/runs/:id/logs", logs.runLogs, toRunOwner)
	v1.GET("/runs/:id/artifacts", arts.listArtifacts)
	v1.GET(strings.TrimPrefix(artifactRoute, "/v1"), arts.getArtifact)
	v1.GET("/runs/:id/artifacts.tar", arts.artifactsTar)
	v1.DELETE("/runs/:id", runs.cancelRun, toRunOwner)
	v1.POST("/admission/review", runs.review)

	pol := policyRoutes{s.web}
	v1.GET("/policies", pol.policyStatus, may("policy.read", "policy"))
	v1.POST("/policies/reload", pol.policyReload, may("policy.reload", "policy"))
	v1.POST("/policies/replay", pol.policyReplay, may("policy.replay", "policy"))

	aud, proofs := auditRoutes{s.web}, proofRoutes{s.web}
	v1.GET("/audit/events", aud.auditEvents, may("audit.read", "audit"))
	v1.GET("/audit/export", aud.auditExport, may("audit.export", "audit"))
	v1.GET("/audit/verify", aud.auditVerify, may("audit.read", "audit"))
	v1.GET("/audit/checkpoint", proofs.auditCheckpoint, may("audit.read", "audit"))
	v1.POST("/audit/checkpoint/cosignature", proofs.auditCosign, may("audit.witness", "audit"))
	v1.POST("/audit/witness/alarm", proofs.auditWitnessAlarm, may("audit.witness", "audit"))
	v1.GET("/audit/proof/inclusion", proofs.auditInclusion, may("audit.read", "audit"))
	v1.GET("/audit/proof/consistency", proofs.auditConsistency, may("audit.read", "audit"))
	v1.GET("/runs/:id/receipt", proofs.runReceipt)

	adm := adminRoutes{s.web}
	v1.GET("/sandboxes", adm.sandboxes, may("sandbox.list", "sandbox"))
	v1.POST("/sandboxes/cleanup", adm.sandboxCleanup, may("sandbox.cleanup", "sandbox"))
	v1.GET("/volumes", adm.volumes, may("volume.list", "volume"))
	v1.DELETE("/volumes/:team/:name", adm.removeVolume, may("volume.remove", "volume"))
	v1.GET("/nodes", adm.listNodes, may("node.list", "node"))
	v1.GET("/images/:ref/packages", imageRoutes{s.web}.imagePackages, may("image.packages", "image"))

	sec := secretRoutes{s.web}
	v1.PUT("/secrets/:name", sec.putSecret, may("secret.set", "secret"))
	v1.GET("/secrets", sec.listSecrets, may("secret.list", "secret"))
	v1.DELETE("/secrets/:name", sec.deleteSecret, may("secret.delete", "secret"))

	ses := sessionRoutes{s.web}
	v1.POST("/sessions", ses.createSession)
	v1.GET("/sessions", ses.listSessions, mayList("session.list", "session"))
	v1.GET("/sessions/:id", ses.getSession)
	v1.DELETE("/sessions/:id", ses.deleteSession, toSessionOwner)
	v1.POST("/sessions/:id/runs", ses.execInSession, toSessionOwner)
	v1.PUT("/sessions/:id/files", ses.putSessionFiles, toSessionOwner)
	v1.GET("/sessions/:id/files", ses.getSessionFiles, toSessionOwner)
	str := streamRoutes{s.web}
	// The gate asks again with the session itself; asked first here, a
	// role that may never open one is refused before the request's form
	// is read.
	v1.GET("/sessions/:id/terminal", str.terminal, mayList("session.terminal", "session"), toSessionOwner)
	for _, m := range portMethods {
		v1.add(m, portRoute, str.port, mayList("session.port", "session"), toSessionOwner)
		v1.add(m, previewRoute, str.preview, mayList("session.port", "session"), toSessionOwner)
	}
	v1.POST("/sessions/:id/previews", str.mintPreview, mayList("session.port", "session"), toSessionOwner)
	s.mountMCP(v1)

	apr := approvalRoutes{s.web}
	toApprovalOwner := ed.toOwner(approvalOwner)
	v1.GET("/approvals", apr.listApprovals, mayList("approval.list", "approval"))
	v1.GET("/approvals/:id", apr.getApproval)
	v1.POST("/approvals/:id/approve", apr.approve, toApprovalOwner)
	v1.POST("/approvals/:id/deny", apr.deny, toApprovalOwner)

	v1.GET("/config", ops.config, may("config.read", "config"))
	v1.GET("/whoami", ops.whoami, may("whoami", "principal"))
	v1.GET("/openapi.json", ops.openAPI, may("openapi.read", "openapi"))
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
	s.mountLogin(e)
	files := echo.WrapHandler(http.StripPrefix("/console", s.d.Console))
	toConsole := func(c echo.Context) error { return c.Redirect(http.StatusFound, "/console/") }
	e.GET("/", toConsole, s.edge.limitRate)
	e.GET("/console", toConsole, s.edge.limitRate)
	e.GET(consoleRoute, files, s.edge.limitRate)
	e.HEAD(consoleRoute, files, s.edge.limitRate)
}
