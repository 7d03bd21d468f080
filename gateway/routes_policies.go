package gateway

import (
	"net/http"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// policyStatus is GET /v1/policies.
func (s policyRoutes) policyStatus(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	return c.JSON(http.StatusOK, s.d.Policies.Status())
}

// policyReload is POST /v1/policies/reload.
func (s policyRoutes) policyReload(c echo.Context) error {
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
func (s policyRoutes) policyReplay(c echo.Context) error {
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
	rep, err := s.replays.replay(c.Request().Context(), principal(c), correlationID(c), rq)
	if err != nil {
		return err
	}
	s.logger(c).Info("policy replayed", "candidate_revision", rep.CandidateRevision, "replayed", rep.Replayed,
		"newly_denied", rep.NewlyDenied.Count, "newly_allowed", rep.NewlyAllowed.Count)
	return c.JSON(http.StatusOK, rep)
}
