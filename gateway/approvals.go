package gateway

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/admission"
	"github.com/sandgate/sandgate/gateway/api"
)

// approvalRoutes are the approvals: a list, one, and its grant or denial
// through the gate (admission/approve.go).
type approvalRoutes struct{ *web }

// listApprovals is GET /v1/approvals: the principal's team's, or every
// team's when the policy lets it decide or read them all.
func (s approvalRoutes) listApprovals(c echo.Context) error {
	if err := checkQuery(c, "status", "limit", "cursor"); err != nil {
		return err
	}
	if s.d.Approvals == nil {
		return c.JSON(http.StatusOK, api.ApprovalList{Approvals: []sandgate.Approval{}})
	}
	f := sandgate.ApprovalFilter{Status: sandgate.ApprovalStatus(c.QueryParam("status")), Cursor: c.QueryParam("cursor")}
	if f.Status != "" && !slices.Contains(sandgate.ApprovalStatuses, f.Status) {
		return sandgate.FieldError("status", "unknown status %q (pending, granted, denied, expired)", f.Status)
	}
	var err error
	if f.Limit, err = parseLimit(c.QueryParam("limit")); err != nil {
		return err
	}
	if !allTeams(c) {
		f.Team = principal(c).Team
	}
	list, next, err := s.d.Approvals.ListApprovals(c.Request().Context(), f)
	if err != nil {
		return unavailable(err, "the approval store")
	}
	return c.JSON(http.StatusOK, api.ApprovalList{Approvals: list, NextCursor: cursorPtr(next)})
}

// getApproval is GET /v1/approvals/{id}.
func (s approvalRoutes) getApproval(c echo.Context) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	ans, err := s.admit(c, admission.ReadApproval{ID: c.Param("id")})
	if err != nil {
		return err
	}
	return c.JSON(http.StatusOK, ans.Approval)
}

// approve is POST /v1/approvals/{id}/approve.
func (s approvalRoutes) approve(c echo.Context) error { return s.decide(c, true) }

// deny is POST /v1/approvals/{id}/deny.
func (s approvalRoutes) deny(c echo.Context) error { return s.decide(c, false) }

// decide grants or denies the approval with the body's comment, and
// answers the approval with its run or session as they now stand: a
// granted run that the policy in force refused ends rejected, with the
// reason in its error.
func (s approvalRoutes) decide(c echo.Context, grant bool) error {
	if err := checkQuery(c); err != nil {
		return err
	}
	if c.Request().ContentLength != 0 {
		if err := requireJSON(c); err != nil {
			return err
		}
	}
	body, err := requestBody(c)
	if err != nil {
		return err
	}
	ans, err := s.admit(c, admission.DecideApproval{ID: c.Param("id"), Grant: grant, Body: body})
	if err != nil {
		return err
	}
	out := api.ApprovalOutcome{Approval: *ans.Approval}
	if ans.Run != nil {
		v := runView(ans.Run)
		out.Run = &v
	}
	out.Session = ans.Session
	return c.JSON(http.StatusOK, out)
}

// approvalOwner is the node that holds an approval's request (its secret
// values), when the caller may read the approval and it is pending: a
// decision is forwarded there.
func approvalOwner(ctx context.Context, s *web, who admission.Caller, id string) (string, bool) {
	return s.gate.ApprovalOwner(ctx, who, id)
}

// expireApprovals expires the approvals whose time ran out, every
// interval, until the gateway stops.
func (s *Server) expireApprovals(interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-s.stopping:
			return
		case <-t.C:
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			if n, err := s.gate.ExpireApprovals(ctx); err != nil {
				s.log.Warn("expire approvals", "error", err)
			} else if n > 0 {
				s.log.Info("approvals expired", "count", n)
			}
			cancel()
		}
	}
}
