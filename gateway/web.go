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
	// stopping is closed when the gateway begins to stop: waiting
	// requests and log streams return.
	stopping   chan struct{}
	openAPIDoc []byte
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

// signIn is how the request's principal authenticated.
func signIn(c echo.Context) string {
	v, _ := c.Get(keySignIn).(string)
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
func (s *web) waitRun(ctx context.Context, p sandgate.Principal, id string, d time.Duration) (*sandgate.Run, error) {
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
	return s.readRun(ctx, p, id)
}

// readRun is a run p may read, through the gate.
func (s *web) readRun(ctx context.Context, p sandgate.Principal, id string) (*sandgate.Run, error) {
	ans, err := s.gate.Admit(ctx, admission.Caller{Principal: p, SignIn: sandgate.SignInToken}, admission.ReadRun{Run: id})
	return ans.Run, err
}
