package gateway

import (
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/admission"
)

// maxPageSize caps the limit of list endpoints.
const maxPageSize = 1000

// submitRun is POST /v1/runs.
func (s runRoutes) submitRun(c echo.Context) error {
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
	body, err := requestBody(c)
	if err != nil {
		return err
	}
	ans, err := s.admit(c, admission.Run{IdempotencyKey: key, Body: body})
	if err != nil {
		return err
	}
	run, created := ans.Run, !ans.Replayed
	if !created {
		c.Response().Header().Set("Idempotent-Replayed", "true")
	}
	run = s.waited(c, run, wait)
	c.Response().Header().Set("Location", "/v1/runs/"+run.ID)
	// 202 unless the client waited (or replayed) and the run has ended.
	status := http.StatusAccepted
	if run.State == sandgate.StateFinished && (wait > 0 || !created) {
		status = http.StatusOK
	}
	return renderRunWaiting(c, status, run, ans.Approval)
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

// getRun is GET /v1/runs/{id}.
func (s runRoutes) getRun(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	ans, err := s.admit(c, admission.ReadRun{Run: c.Param("id")})
	if err != nil {
		return err
	}
	return renderRun(c, http.StatusOK, ans.Run)
}

// listRuns is GET /v1/runs.
func (s runRoutes) listRuns(c echo.Context) error {
	f, err := parseRunFilter(c)
	if err != nil {
		return err
	}
	// With their output, the runs are listed without it and each is read
	// whole only as it is written out: a page holds one run's output at a
	// time, however many runs printed their limit.
	ctx, p, who := c.Request().Context(), principal(c), caller(c)
	withOutput := f.WithOutput
	f.WithOutput = false
	if !allTeams(c) {
		f.Team = p.Team
	}
	runs, next, err := s.node.runs.list(ctx, f)
	if err != nil {
		return err
	}
	var load func(*sandgate.Run) (*sandgate.Run, error)
	if withOutput {
		load = func(r *sandgate.Run) (*sandgate.Run, error) { return s.readRun(ctx, who, r.ID, "") }
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

// cancelRun is DELETE /v1/runs/{id}.
func (s runRoutes) cancelRun(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	ans, err := s.admit(c, admission.Cancel{Run: c.Param("id")})
	if err != nil {
		return err
	}
	run := ans.Run
	status := http.StatusAccepted
	if run.State == sandgate.StateFinished {
		status = http.StatusOK
	}
	return renderRun(c, status, run)
}

// review is POST /v1/admission/review.
func (s runRoutes) review(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	if err := requireJSON(c); err != nil {
		return err
	}
	body, err := requestBody(c)
	if err != nil {
		return err
	}
	ans, err := s.admit(c, admission.Review{Body: body})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, decisionView(*ans.Decision, true))
}
