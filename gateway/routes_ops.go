package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// config is GET /v1/config.
func (s opsRoutes) config(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	roots := s.cfg.MountRoots
	if roots == nil {
		roots = []string{}
	}
	maxima, images := s.policyLimits()
	built, builtErr := s.builtImages(c.Request().Context())
	return c.JSON(http.StatusOK, api.ConfigView{
		Version: sandgate.Version, Node: s.cfg.Node, AirGapped: s.cfg.AirGapped, MountRoots: roots,
		Defaults: s.d.Admitter.Defaults(), Maxima: maxima, AllowedImages: images,
		Images: built, ImagesError: builtErr,
		MaxWaitSeconds: int64(s.cfg.MaxWait.Seconds()), BodyLimitBytes: s.cfg.BodyLimit,
		PolicyRevision: s.d.Policies.Status().Revision, Capacity: s.cfg.capacity(),
	})
}

// builtImages are the images sandgate built on this node's daemon, and
// why there are none when the daemon does not answer in time: the rest
// of the configuration is still worth answering.
func (s opsRoutes) builtImages(ctx context.Context) ([]sandgate.BuiltImage, string) {
	if s.d.Images == nil {
		return []sandgate.BuiltImage{}, ""
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	list, err := s.d.Images.BuiltImages(ctx)
	if err != nil {
		s.log.Warn("list built images", "err", err)
		return []sandgate.BuiltImage{}, "the Docker daemon did not list the images (" + string(sandgate.ErrorCodeOf(err)) + ")"
	}
	return list, ""
}

// whoami is GET /v1/whoami: the principal the request authenticated as.
func (s opsRoutes) whoami(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	p := principal(c)
	roles := p.Roles
	if roles == nil {
		roles = []sandgate.Role{}
	}
	v := api.PrincipalView{Name: p.Name, Team: p.Team, Roles: roles}
	if in := signIn(c); in.Method != "" {
		v.SignIn = &in
	}
	if p.Team != "" {
		l := s.cfg.capacity().Effective(s.d.Admitter.TeamLimits(p.Team))
		v.TeamLimits = &l
	}
	return c.JSON(http.StatusOK, v)
}

// policyLimits returns the maxima and allowed images of the policy in
// force when the Admitter reports them, else the configured copy.
func (s opsRoutes) policyLimits() (api.Limits, []string) {
	maxima, images := s.cfg.Limits, s.cfg.AllowedImages
	if r, ok := s.d.Admitter.(PolicyConfigReporter); ok {
		pc := r.PolicyConfig()
		var fromPolicy struct {
			Maxima        *api.Limits `json:"maxima"`
			AllowedImages *[]string   `json:"allowed_images"`
		}
		if raw, err := json.Marshal(pc); err == nil && json.Unmarshal(raw, &fromPolicy) == nil {
			if fromPolicy.Maxima != nil {
				maxima = *fromPolicy.Maxima
			}
			if fromPolicy.AllowedImages != nil {
				images = *fromPolicy.AllowedImages
			}
		}
	}
	if images == nil {
		images = []string{}
	}
	return maxima, images
}

// openAPI is GET /v1/openapi.json: the API's OpenAPI document.
func (s opsRoutes) openAPI(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, s.openAPIDoc)
}

// healthz is GET /healthz: the process answers.
func (s opsRoutes) healthz(c echo.Context) error {
	return c.JSON(http.StatusOK, api.Health{Status: "ok", Node: s.cfg.Node})
}

// readyTimeout bounds each readiness check.
const readyTimeout = 2 * time.Second

// DatabaseReporter is implemented by an audit trail that can say which
// Postgres server takes its writes (audit.Store): with a multi-host DSN,
// readiness then shows where a failover stands.
type DatabaseReporter interface {
	// DatabaseStatus names the server that takes writes now, or returns
	// AUDIT-UNAVAILABLE naming every server and why none does.
	DatabaseStatus(ctx context.Context) (string, error)
}

// readyz is GET /readyz: Docker answers, the audit trail can commit, a
// policy is loaded, and the gateway is not stopping.
func (s opsRoutes) readyz(c echo.Context) error {
	ctx, cancel := context.WithTimeout(c.Request().Context(), readyTimeout)
	defer cancel()
	checks := []api.ReadyCheck{{Name: "docker"}, {Name: "audit"}, {Name: "policy"}, {Name: "gateway"}}
	db, hasDB := s.d.Audit.(DatabaseReporter)
	if hasDB {
		checks = append(checks, api.ReadyCheck{Name: "database"})
	}
	var wg sync.WaitGroup
	run := func(i int, f func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := f(); err != nil {
				checks[i].Error = sandgate.ErrorMessageOf(err)
				if checks[i].Error == "internal error" {
					checks[i].Error = err.Error()
				}
				return
			}
			checks[i].OK = true
		}()
	}
	run(0, func() error { return s.d.Executor.Ping(ctx) })
	run(1, func() error { return s.d.Audit.Ready(ctx) })
	run(2, func() error {
		st := s.d.Policies.Status()
		if st.Revision == "" {
			if st.LastError != "" {
				return fmt.Errorf("no policy loaded: %s", st.LastError)
			}
			return fmt.Errorf("no policy loaded")
		}
		return nil
	})
	run(3, func() error {
		if s.node.draining.Load() {
			return fmt.Errorf("shutting down")
		}
		return s.node.fenced()
	})
	if hasDB {
		run(4, func() (err error) {
			checks[4].Detail, err = db.DatabaseStatus(ctx)
			return err
		})
	}
	wg.Wait()
	rd := api.Readiness{Ready: true, Checks: checks, Reasons: []string{}}
	for _, ch := range checks {
		if !ch.OK {
			rd.Ready = false
			rd.Reasons = append(rd.Reasons, ch.Name+": "+ch.Error)
		}
	}
	// A refused policy reload is a warning: the policy in force still
	// decides, and the operator needs to know why the new one did not.
	if st := s.d.Policies.Status(); st.Revision != "" && st.LastError != "" {
		rd.Warnings = append(rd.Warnings, fmt.Sprintf("policy: a reload was refused and revision %s stays in force: %s", st.Revision, st.LastError))
	}
	// An audit sink behind or failing is a warning, never unreadiness:
	// admissions do not depend on it, and the trail in Postgres is whole.
	if s.d.Sinks != nil {
		for _, st := range s.d.Sinks.SinkStatus() {
			if st.Warning != "" {
				rd.Warnings = append(rd.Warnings, st.Warning)
			}
		}
	}
	if !rd.Ready {
		details := map[string]any{"ready": false, "checks": rd.Checks, "reasons": rd.Reasons}
		if len(rd.Warnings) > 0 {
			details["warnings"] = rd.Warnings
		}
		return &sandgate.Error{Code: sandgate.CodeUnavailable,
			Message: "not ready: " + strings.Join(rd.Reasons, "; "), Details: details}
	}
	return c.JSON(http.StatusOK, rd)
}

func (s opsRoutes) metricsHandler() echo.HandlerFunc {
	h := promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{})
	return echo.WrapHandler(h)
}
