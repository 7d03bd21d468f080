package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// auditQuery is the query of GET /v1/audit/events and /export for f.
func auditQuery(f sandgate.AuditFilter) url.Values {
	q := url.Values{}
	set := func(k, v string) {
		if v != "" {
			q.Set(k, v)
		}
	}
	set("correlation_id", f.CorrelationID)
	set("run_id", f.RunID)
	set("decision_id", f.DecisionID)
	set("type", string(f.Type))
	set("actor", f.Actor)
	set("team", f.Team)
	set("outcome", f.Outcome)
	if !f.Since.IsZero() {
		q.Set("since", f.Since.UTC().Format(time.RFC3339Nano))
	}
	if !f.Until.IsZero() {
		q.Set("until", f.Until.UTC().Format(time.RFC3339Nano))
	}
	return q
}

// AuditEvents returns one page of the trail's events that f matches, with
// the caller's token and role (auditor, admin): f.Limit events at most
// (the gateway's default when 0), from f.Cursor on, newest first with
// f.Newest.
func (c *Client) AuditEvents(ctx context.Context, f sandgate.AuditFilter) (api.AuditEventList, error) {
	q := auditQuery(f)
	if f.Limit > 0 {
		q.Set("limit", strconv.Itoa(f.Limit))
	}
	if f.Cursor != "" {
		q.Set("cursor", f.Cursor)
	}
	if f.Newest {
		q.Set("order", "newest")
	}
	var page api.AuditEventList
	err := c.do(ctx, http.MethodGet, "/v1/audit/events", q, nil, nil, &page)
	return page, err
}

// AuditExport streams the events f matches to w as JSON Lines or CSV
// (auditor, admin); the gateway records the export as audit.exported. An
// export cut short by the gateway is an error, never a short file taken
// for a whole one.
func (c *Client) AuditExport(ctx context.Context, f sandgate.AuditFilter, format sandgate.ExportFormat, w io.Writer) error {
	q := auditQuery(f)
	if format != "" {
		q.Set("format", string(format))
	}
	resp, err := c.send(ctx, http.MethodGet, "/v1/audit/export", q, nil, nil)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 400 {
		return decodeError(resp)
	}
	if _, err := io.Copy(w, resp.Body); err != nil {
		return fmt.Errorf("GET /v1/audit/export: the export ended early: %w", err)
	}
	return nil
}

// AuditVerify asks the gateway to check the trail's chains and checkpoint
// signatures (auditor, admin).
func (c *Client) AuditVerify(ctx context.Context) (api.VerifyReport, error) {
	var rep api.VerifyReport
	err := c.do(ctx, http.MethodGet, "/v1/audit/verify", nil, nil, nil, &rep)
	return rep, err
}
