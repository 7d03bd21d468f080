package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/labstack/echo/v4"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// maxPageSize caps the limit of list endpoints.
const maxPageSize = 1000

// submitRun is POST /v1/runs.
func (s *Server) submitRun(c echo.Context) error {
	if err := checkQuery(c, "wait"); err != nil {
		return err
	}
	multipartRun := isMultipart(c.Request())
	if !multipartRun {
		if err := requireJSON(c); err != nil {
			return err
		}
	}
	wait, err := parseWait(c.QueryParam("wait"), s.cfg.MaxWait)
	if err != nil {
		return err
	}
	key := c.Request().Header.Get("Idempotency-Key")
	if key != "" && !validIdempotencyKey(key) {
		return sandgate.FieldError("Idempotency-Key", "must be 1 to 255 printable ASCII characters")
	}
	var (
		spec sandgate.RunSpec
		up   *upload
	)
	if multipartRun {
		spec, up, err = s.readMultipartRun(c)
	} else {
		spec, err = sandgate.DecodeRunSpec(c.Request().Body)
	}
	if err != nil {
		return err
	}
	if err := checkWorkspaceSpec(spec); err != nil {
		up.remove()
		return err
	}
	ctx := c.Request().Context()
	// submit owns the upload from here: it hands it to the run or
	// removes it.
	run, created, err := s.svc.submit(ctx, submission{
		Principal: principal(c), CorrelationID: correlationID(c), Spec: spec, IdempotencyKey: key, Workspace: up,
	})
	if err != nil {
		return err
	}
	if !created {
		c.Response().Header().Set("Idempotent-Replayed", "true")
	}
	if wait > 0 && run.State != sandgate.StateFinished {
		if r, err := s.waitRun(ctx, principal(c), run.ID, wait); err == nil {
			run = r
		}
	}
	c.Response().Header().Set("Location", "/v1/runs/"+run.ID)
	// 202 unless the client waited (or replayed) and the run has ended.
	status := http.StatusAccepted
	if run.State == sandgate.StateFinished && (wait > 0 || !created) {
		status = http.StatusOK
	}
	return renderRun(c, status, run)
}

// waitRun waits up to d for a live run to finish and returns it as it is
// then.
func (s *Server) waitRun(ctx context.Context, p sandgate.Principal, id string, d time.Duration) (*sandgate.Run, error) {
	if lr := s.svc.live.get(id); lr != nil {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-lr.done:
		case <-t.C:
		case <-ctx.Done():
		case <-s.stopping:
		}
	}
	return s.svc.get(ctx, p, id)
}

func parseWait(v string, maxWait time.Duration) (time.Duration, error) {
	if v == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		n, nerr := strconv.Atoi(v)
		if nerr != nil {
			return 0, sandgate.FieldError("wait", "must be a duration such as 30s; got %q", v)
		}
		d = time.Duration(n) * time.Second
	}
	if d < 0 {
		return 0, sandgate.FieldError("wait", "must not be negative")
	}
	return min(d, maxWait), nil
}

func validIdempotencyKey(k string) bool {
	if len(k) == 0 || len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// requireJSON refuses a body declared as anything but JSON.
func requireJSON(c echo.Context) error {
	ct := c.Request().Header.Get("Content-Type")
	if ct == "" {
		return nil
	}
	mt, _, err := mime.ParseMediaType(ct)
	if err != nil || (mt != "application/json" && !strings.HasSuffix(mt, "+json")) {
		return sandgate.FieldError("Content-Type", "must be application/json; got %q", ct)
	}
	return nil
}

// checkQuery refuses query parameters the endpoint does not know, and
// repeated ones.
func checkQuery(c echo.Context, allowed ...string) error {
	for k, vs := range c.QueryParams() {
		known := false
		for _, a := range allowed {
			if k == a {
				known = true
				break
			}
		}
		if !known {
			return sandgate.FieldError(k, "unknown query parameter")
		}
		if len(vs) > 1 {
			return sandgate.FieldError(k, "given more than once")
		}
	}
	return nil
}

// getRun is GET /v1/runs/{id}.
func (s *Server) getRun(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	run, err := s.svc.get(c.Request().Context(), principal(c), c.Param("id"))
	if err != nil {
		return err
	}
	return renderRun(c, http.StatusOK, run)
}

// listRuns is GET /v1/runs.
func (s *Server) listRuns(c echo.Context) error {
	f, err := parseRunFilter(c)
	if err != nil {
		return err
	}
	// With their output, the runs are listed without it and each is read
	// whole only as it is written out: a page holds one run's output at a
	// time, however many runs printed their limit.
	ctx, p := c.Request().Context(), principal(c)
	withOutput := f.WithOutput
	f.WithOutput = false
	runs, next, err := s.svc.list(ctx, p, f)
	if err != nil {
		return err
	}
	var load func(*sandgate.Run) (*sandgate.Run, error)
	if withOutput {
		load = func(r *sandgate.Run) (*sandgate.Run, error) { return s.svc.get(ctx, p, r.ID) }
	}
	return renderRuns(c, runs, next, load)
}

func parseRunFilter(c echo.Context) (sandgate.RunFilter, error) {
	if err := checkQuery(c, "state", "outcome", "session_id", "task_id", "since", "until", "limit", "cursor", "include"); err != nil {
		return sandgate.RunFilter{}, err
	}
	q := c.QueryParams()
	f := sandgate.RunFilter{
		State: sandgate.State(q.Get("state")), Outcome: sandgate.Outcome(q.Get("outcome")),
		SessionID: q.Get("session_id"), TaskID: q.Get("task_id"), Cursor: q.Get("cursor"),
	}
	switch q.Get("include") {
	case "":
	case "output":
		f.WithOutput = true
	default:
		return f, sandgate.FieldError("include", "must be output; got %q", q.Get("include"))
	}
	switch f.State {
	case "", sandgate.StatePending, sandgate.StateCreating, sandgate.StateRunning, sandgate.StateFinished:
	default:
		return f, sandgate.FieldError("state", "must be pending, creating, running or finished; got %q", f.State)
	}
	switch f.Outcome {
	case "", sandgate.OutcomeSucceeded, sandgate.OutcomeFailed, sandgate.OutcomeOOMKilled, sandgate.OutcomeTimedOut,
		sandgate.OutcomeCancelled, sandgate.OutcomeError, sandgate.OutcomeLost:
	default:
		return f, sandgate.FieldError("outcome", "must be one of succeeded, failed, oom_killed, timed_out, cancelled, error, lost; got %q", f.Outcome)
	}
	var err error
	if f.Since, f.Until, err = parseRange(q); err != nil {
		return f, err
	}
	if f.Limit, err = parseLimit(q.Get("limit")); err != nil {
		return f, err
	}
	return f, nil
}

func parseRange(q url.Values) (since, until time.Time, err error) {
	parse := func(field string) (time.Time, error) {
		v := q.Get(field)
		if v == "" {
			return time.Time{}, nil
		}
		t, err := time.Parse(time.RFC3339Nano, v)
		if err != nil {
			return time.Time{}, sandgate.FieldError(field, "must be an RFC 3339 time such as 2026-01-02T15:04:05Z; got %q", v)
		}
		return t, nil
	}
	if since, err = parse("since"); err != nil {
		return
	}
	if until, err = parse("until"); err != nil {
		return
	}
	if !since.IsZero() && !until.IsZero() && until.Before(since) {
		err = sandgate.FieldError("until", "must not be before since")
	}
	return
}

func parseLimit(v string) (int, error) {
	if v == "" {
		return 100, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > maxPageSize {
		return 0, sandgate.FieldError("limit", "must be an integer from 1 to %d; got %q", maxPageSize, v)
	}
	return n, nil
}

// cancelRun is DELETE /v1/runs/{id}.
func (s *Server) cancelRun(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	run, err := s.svc.cancel(c.Request().Context(), principal(c), c.Param("id"))
	if err != nil {
		return err
	}
	status := http.StatusAccepted
	if run.State == sandgate.StateFinished {
		status = http.StatusOK
	}
	return renderRun(c, status, run)
}

// review is POST /v1/admission/review.
func (s *Server) review(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	if err := requireJSON(c); err != nil {
		return err
	}
	spec, err := sandgate.DecodeRunSpec(c.Request().Body)
	if err != nil {
		return err
	}
	dec, err := s.svc.review(c.Request().Context(), principal(c), correlationID(c), spec)
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, decisionView(dec, true))
}

// policyStatus is GET /v1/policies.
func (s *Server) policyStatus(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, s.d.Policies.Status())
}

// policyReload is POST /v1/policies/reload.
func (s *Server) policyReload(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	st, err := s.d.Policies.Reload(c.Request().Context())
	if err != nil {
		if sandgate.ErrorCodeOf(err) == sandgate.CodePolicyInvalid {
			return err
		}
		return unavailable(err, "the policy engine")
	}
	s.logger(c).Info("policy reloaded", "revision", st.Revision, "actor", principal(c).Name)
	return c.JSON(http.StatusOK, st)
}

// policyReplay is POST /v1/policies/replay: the candidate bundle's files
// in the body, the range in the query.
func (s *Server) policyReplay(c echo.Context) error {
	if err := checkQuery(c, "since", "until", "team", "limit", "examples", "drift"); err != nil {
		return err
	}
	if err := requireJSON(c); err != nil {
		return err
	}
	q := c.QueryParams()
	rq := replayQuery{team: q.Get("team"), limit: s.cfg.ReplayMaxDecisions, examples: defaultReplayExamples}
	var err error
	if rq.since, rq.until, err = parseRange(q); err != nil {
		return err
	}
	if !rq.since.IsZero() && !rq.until.IsZero() && !rq.until.After(rq.since) {
		return sandgate.FieldError("until", "must be after since")
	}
	if rq.limit, err = intParam(q.Get("limit"), "limit", 1, s.cfg.ReplayMaxDecisions, rq.limit); err != nil {
		return err
	}
	if rq.examples, err = intParam(q.Get("examples"), "examples", 0, maxReplayExamples, rq.examples); err != nil {
		return err
	}
	switch q.Get("drift") {
	case "", "false":
	case "true":
		rq.drift = true
	default:
		return sandgate.FieldError("drift", "must be true or false; got %q", shorten(q.Get("drift"), 32))
	}
	var body api.ReplayRequest
	if err := sandgate.DecodeStrict(c.Request().Body, &body, api.MaxReplayBodyBytes); err != nil {
		return err
	}
	rq.files = make(map[string][]byte, len(body.Files))
	for name, text := range body.Files {
		rq.files[name] = []byte(text)
	}
	rep, err := s.svc.replay(c.Request().Context(), principal(c), correlationID(c), rq)
	if err != nil {
		return err
	}
	s.logger(c).Info("policy replayed", "candidate_revision", rep.CandidateRevision, "replayed", rep.Replayed,
		"newly_denied", rep.NewlyDenied.Count, "newly_allowed", rep.NewlyAllowed.Count)
	return c.JSON(http.StatusOK, rep)
}

// intParam reads an integer query parameter from lo to hi, def when absent.
func intParam(v, field string, lo, hi, def int) (int, error) {
	if v == "" {
		return def, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return 0, sandgate.FieldError(field, "must be an integer from %d to %d; got %q", lo, hi, shorten(v, 32))
	}
	return n, nil
}

var auditQuery = []string{"correlation_id", "run_id", "decision_id", "type", "actor", "team", "outcome", "since", "until"}

func parseAuditFilter(c echo.Context, extra ...string) (sandgate.AuditFilter, error) {
	if err := checkQuery(c, append(append([]string{}, auditQuery...), extra...)...); err != nil {
		return sandgate.AuditFilter{}, err
	}
	q := c.QueryParams()
	f := sandgate.AuditFilter{
		CorrelationID: q.Get("correlation_id"), RunID: q.Get("run_id"), DecisionID: q.Get("decision_id"),
		Type: sandgate.EventType(q.Get("type")), Actor: q.Get("actor"), Team: q.Get("team"),
		Outcome: q.Get("outcome"), Cursor: q.Get("cursor"),
	}
	if f.Type != "" && !knownEventType(f.Type) {
		return f, sandgate.FieldError("type", "unknown event type %q", f.Type)
	}
	var err error
	if f.Since, f.Until, err = parseRange(q); err != nil {
		return f, err
	}
	return f, nil
}

func knownEventType(t sandgate.EventType) bool { return t.Known() }

// auditEvents is GET /v1/audit/events.
func (s *Server) auditEvents(c echo.Context) error {
	f, err := parseAuditFilter(c, "limit", "cursor")
	if err != nil {
		return err
	}
	if f.Limit, err = parseLimit(c.QueryParam("limit")); err != nil {
		return err
	}
	events, next, err := s.d.Audit.Query(c.Request().Context(), f)
	if err != nil {
		return unavailable(err, "the audit trail")
	}
	if events == nil {
		events = []sandgate.AuditRecord{}
	}
	return c.JSON(http.StatusOK, api.AuditEventList{Events: events, NextCursor: cursorPtr(next)})
}

// auditExport is GET /v1/audit/export: the events streamed as JSONL or CSV.
func (s *Server) auditExport(c echo.Context) error {
	f, err := parseAuditFilter(c, "format")
	if err != nil {
		return err
	}
	format := sandgate.ExportFormat(c.QueryParam("format"))
	contentType := ""
	switch format {
	case "", sandgate.ExportJSONL:
		format, contentType = sandgate.ExportJSONL, "application/x-ndjson"
	case sandgate.ExportCSV:
		contentType = "text/csv; charset=utf-8"
	default:
		return sandgate.FieldError("format", "must be jsonl or csv; got %q", format)
	}
	w := &flushWriter{c: c}
	begin := func() {
		h := c.Response().Header()
		h.Set("Content-Type", contentType)
		h.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="sandgate-audit.%s"`, format))
		h.Set("Cache-Control", "no-store")
		c.Response().WriteHeader(http.StatusOK)
	}
	err = s.svc.exportAudit(c.Request().Context(), principal(c), correlationID(c), f, format, w, begin)
	if err != nil {
		if c.Response().Committed {
			// The status is sent; ending the body early tells the client
			// the export is incomplete.
			s.logger(c).Error("audit export failed midway", "error", err)
			panic(http.ErrAbortHandler)
		}
		return unavailable(err, "the audit trail")
	}
	return nil
}

// flushWriter writes to the response and flushes every write, so that a
// long export streams instead of piling up.
type flushWriter struct {
	c  echo.Context
	mu sync.Mutex
}

// Write writes p and flushes it to the client.
func (w *flushWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	n, err := w.c.Response().Write(p)
	if err == nil {
		w.c.Response().Flush()
	}
	return n, err
}

// auditVerify is GET /v1/audit/verify.
func (s *Server) auditVerify(c echo.Context) error {
	if err := checkQuery(c, "chain_id", "from_seq", "to_seq", "since", "until"); err != nil {
		return err
	}
	q := c.QueryParams()
	r := sandgate.VerifyRange{ChainID: q.Get("chain_id")}
	for _, p := range []struct {
		field string
		dst   *int64
	}{{"from_seq", &r.FromSeq}, {"to_seq", &r.ToSeq}} {
		if v := q.Get(p.field); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil || n < 0 {
				return sandgate.FieldError(p.field, "must be a non-negative integer; got %q", v)
			}
			*p.dst = n
		}
	}
	if r.ToSeq > 0 && r.ToSeq < r.FromSeq {
		return sandgate.FieldError("to_seq", "must not be below from_seq")
	}
	var err error
	if r.Since, r.Until, err = parseRange(q); err != nil {
		return err
	}
	rep, err := s.d.Audit.Verify(c.Request().Context(), r)
	if err != nil {
		return unavailable(err, "the audit trail")
	}
	if rep.Problems == nil {
		rep.Problems = []sandgate.VerifyProblem{}
	}
	return c.JSON(http.StatusOK, rep)
}

// sandboxes is GET /v1/sandboxes.
func (s *Server) sandboxes(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	list, err := s.d.Sandboxes.Sandboxes(c.Request().Context())
	if err != nil {
		return dockerUnavailable(err)
	}
	if list == nil {
		list = []sandgate.Sandbox{}
	}
	return c.JSON(http.StatusOK, api.SandboxList{Sandboxes: list})
}

// sandboxCleanup is POST /v1/sandboxes/cleanup.
func (s *Server) sandboxCleanup(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	removed, err := s.d.Sandboxes.CleanupOrphans(c.Request().Context())
	if err != nil {
		return dockerUnavailable(err)
	}
	if removed == nil {
		removed = []sandgate.Sandbox{}
	}
	s.logger(c).Info("orphans cleaned up", "count", len(removed), "actor", principal(c).Name)
	return c.JSON(http.StatusOK, api.CleanupResult{Removed: removed, Count: len(removed)})
}

// volumes is GET /v1/volumes: every team's cache volumes.
func (s *Server) volumes(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	if s.d.Volumes == nil {
		return sandgate.Errorf(sandgate.CodeNotFound, "this gateway keeps no cache volumes")
	}
	list, err := s.d.Volumes.CacheVolumes(c.Request().Context())
	if err != nil {
		return err
	}
	if list == nil {
		list = []sandgate.CacheVolume{}
	}
	return c.JSON(http.StatusOK, api.VolumeList{Volumes: list})
}

// removeVolume is DELETE /v1/volumes/{team}/{name}: an admin empties a
// team's cache volume (one past its quota, or poisoned) by removing it;
// the team's next run that names it starts from an empty one.
func (s *Server) removeVolume(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	if s.d.Volumes == nil {
		return sandgate.Errorf(sandgate.CodeNotFound, "this gateway keeps no cache volumes")
	}
	team, name := c.Param("team"), c.Param("name")
	p := principal(c)
	if err := s.d.Volumes.RemoveCacheVolume(c.Request().Context(), team, name); err != nil {
		return err
	}
	s.d.Recorder.Emit(sandgate.Event{
		Type: sandgate.EventVolumeRemoved, Time: s.d.Clock(), Outcome: "removed", CorrelationID: correlationID(c),
		Actor: p.Name, Team: team, Node: s.cfg.Node, Payload: map[string]any{"volume": name},
	})
	s.logger(c).Info("cache volume removed", "team", team, "volume", name, "actor", p.Name)
	return c.NoContent(http.StatusNoContent)
}

func dockerUnavailable(err error) error {
	var se *sandgate.Error
	if errors.As(err, &se) {
		return err
	}
	return sandgate.WrapError(sandgate.CodeDockerUnavailable, err, "the Docker daemon is unavailable")
}

// config is GET /v1/config.
func (s *Server) config(c echo.Context) error {
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
		PolicyRevision: s.d.Policies.Status().Revision,
	})
}

// builtImages are the images sandgate built on this node's daemon, and
// why there are none when the daemon does not answer in time: the rest
// of the configuration is still worth answering.
func (s *Server) builtImages(ctx context.Context) ([]sandgate.BuiltImage, string) {
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
func (s *Server) whoami(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	p := principal(c)
	roles := p.Roles
	if roles == nil {
		roles = []sandgate.Role{}
	}
	return c.JSON(http.StatusOK, api.PrincipalView{Name: p.Name, Team: p.Team, Roles: roles})
}

// policyLimits returns the maxima and allowed images of the policy in
// force when the Admitter reports them, else the configured copy.
func (s *Server) policyLimits() (api.Limits, []string) {
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
func (s *Server) openAPI(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	return c.Blob(http.StatusOK, echo.MIMEApplicationJSON, s.openAPIDoc)
}

// healthz is GET /healthz: the process answers.
func (s *Server) healthz(c echo.Context) error {
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
func (s *Server) readyz(c echo.Context) error {
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
		if s.svc.draining.Load() {
			return fmt.Errorf("shutting down")
		}
		return s.svc.fenced()
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

func (s *Server) metricsHandler() echo.HandlerFunc {
	h := promhttp.HandlerFor(s.gatherer, promhttp.HandlerOpts{})
	return echo.WrapHandler(h)
}
