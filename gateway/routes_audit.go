package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

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
func (s auditRoutes) auditEvents(c echo.Context) error {
	f, err := parseAuditFilter(c, "limit", "cursor", "order")
	if err != nil {
		return err
	}
	switch c.QueryParam("order") {
	case "", "oldest":
	case "newest":
		f.Newest = true
	default:
		return sandgate.FieldError("order", "must be oldest or newest, not %q", c.QueryParam("order"))
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
func (s auditRoutes) auditExport(c echo.Context) error {
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
	err = s.exportAudit(c.Request().Context(), principal(c), correlationID(c), f, format, w, begin)
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

// exportAudit commits an audit.exported event, then streams the export.
func (s auditRoutes) exportAudit(ctx context.Context, p sandgate.Principal, corr string, f sandgate.AuditFilter, format sandgate.ExportFormat, w io.Writer, begin func()) error {
	err := s.d.Recorder.Record(ctx, sandgate.NewAuditExported(sandgate.PrincipalSubject(p, corr, s.cfg.Node), s.d.Clock(),
		map[string]any{"format": string(format), "filter": auditFilterPayload(f)}))
	if err != nil {
		return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "the audit trail cannot record the export now; retry later")
	}
	begin()
	return s.d.Audit.Export(ctx, f, format, w)
}

func auditFilterPayload(f sandgate.AuditFilter) map[string]any {
	m := map[string]any{}
	add := func(k, v string) {
		if v != "" {
			m[k] = v
		}
	}
	add("correlation_id", f.CorrelationID)
	add("run_id", f.RunID)
	add("decision_id", f.DecisionID)
	add("type", string(f.Type))
	add("actor", f.Actor)
	add("team", f.Team)
	add("outcome", f.Outcome)
	if !f.Since.IsZero() {
		m["since"] = f.Since.UTC().Format(time.RFC3339Nano)
	}
	if !f.Until.IsZero() {
		m["until"] = f.Until.UTC().Format(time.RFC3339Nano)
	}
	return m
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
func (s auditRoutes) auditVerify(c echo.Context) error {
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
