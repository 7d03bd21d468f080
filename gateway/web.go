package gateway

import (
	"context"
	"log/slog"
	"regexp"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/admission"
)

// web is what the HTTP side shares: the configuration and parts, the
// gate, this node, and the helpers every kind of route uses. Each kind of
// route is a type of its own over it (runRoutes, sessionRoutes,
// logRoutes, artifactRoutes, policyRoutes, auditRoutes, proofRoutes,
// adminRoutes, opsRoutes), and so is the middleware (edge).
type web struct {
	cfg      Config
	d        Deps
	gate     *admission.Gate
	node     *node
	replays  *replays
	metrics  *Metrics
	gatherer prometheus.Gatherer
	log      *slog.Logger
	// mask hashes what the trail keeps of secrets and masked sign-ins.
	mask sandgate.Masker
	// stopping is closed when the gateway begins to stop: waiting
	// requests and log streams return.
	stopping   chan struct{}
	openAPIDoc []byte
	// links mints and checks the port links of previews.
	links *portLinks
}

// The kinds of route.
type (
	runRoutes      struct{ *web }
	logRoutes      struct{ *web }
	artifactRoutes struct{ *web }
	sessionRoutes  struct{ *web }
	policyRoutes   struct{ *web }
	auditRoutes    struct{ *web }
	proofRoutes    struct{ *web }
	adminRoutes    struct{ *web }
	opsRoutes      struct{ *web }
)

// Context keys of the values middleware leaves for handlers.
const (
	keyCorrelation = "sandgate.correlation_id"
	keyPrincipal   = "sandgate.principal"
	keyLogger      = "sandgate.logger"
	keySignIn      = "sandgate.sign_in"
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

// signIn is how the request's principal authenticated, as the trail
// keeps it.
func signIn(c echo.Context) sandgate.SignIn {
	v, _ := c.Get(keySignIn).(sandgate.SignIn)
	return v
}

// logger returns the request's logger, which carries its correlation ID
// and, once authenticated, its principal. It is made on first use: most
// requests log nothing but their request line, which observe writes with
// its own attributes.
func (s *web) logger(c echo.Context) *slog.Logger {
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

// waitRun waits up to d for a live run to finish and returns it as it is
// then.
func (s *web) waitRun(ctx context.Context, who admission.Caller, id string, d time.Duration) (*sandgate.Run, error) {
	if lr := s.node.runs.live.get(id); lr != nil {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-lr.done:
		case <-t.C:
		case <-ctx.Done():
		case <-s.stopping:
		}
	}
	return s.readRun(ctx, who, id, "")
}

// waited is run after waiting up to d for its end (a run already ended,
// or d of 0, at once). A run that cannot be read again (the store failed,
// the policy refuses the read) is answered as admitted, and why is
// logged: never silently.
func (s *web) waited(c echo.Context, run *sandgate.Run, d time.Duration) *sandgate.Run {
	if d <= 0 || run.State == sandgate.StateFinished {
		return run
	}
	r, err := s.waitRun(c.Request().Context(), caller(c), run.ID, d)
	if err != nil {
		s.log.Warn("the run waited for could not be read again; answering it as admitted",
			"run_id", run.ID, "correlation_id", correlationID(c), "err", err)
		return run
	}
	return r
}

// readRun is a run who may read (do action on, run.read when ""), through
// the gate.
func (s *web) readRun(ctx context.Context, who admission.Caller, id string, action sandgate.Action) (*sandgate.Run, error) {
	ans, err := s.gate.Admit(ctx, who, admission.ReadRun{Run: id, Action: action})
	return ans.Run, err
}
