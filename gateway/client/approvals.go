package client

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// ApprovalListOptions filters GET /v1/approvals.
type ApprovalListOptions struct {
	Status sandgate.ApprovalStatus
	Limit  int
	Cursor string
}

// Approvals lists the approvals the policy lets the caller see, newest
// first.
func (c *Client) Approvals(ctx context.Context, o ApprovalListOptions) (api.ApprovalList, error) {
	q := url.Values{}
	if o.Status != "" {
		q.Set("status", string(o.Status))
	}
	if o.Cursor != "" {
		q.Set("cursor", o.Cursor)
	}
	if o.Limit > 0 {
		q.Set("limit", strconv.Itoa(o.Limit))
	}
	var list api.ApprovalList
	err := c.do(ctx, http.MethodGet, "/v1/approvals", q, nil, nil, &list)
	return list, err
}

// Approve grants approval id with comment: its request is decided again
// by the policy in force, as its requester, with the approval as input.
func (c *Client) Approve(ctx context.Context, id, comment string) (api.ApprovalOutcome, error) {
	return c.decideApproval(ctx, id, "approve", comment)
}

// DenyApproval refuses approval id with comment.
func (c *Client) DenyApproval(ctx context.Context, id, comment string) (api.ApprovalOutcome, error) {
	return c.decideApproval(ctx, id, "deny", comment)
}

func (c *Client) decideApproval(ctx context.Context, id, verb, comment string) (api.ApprovalOutcome, error) {
	body, err := json.Marshal(api.ApprovalDecision{Comment: comment})
	if err != nil {
		return api.ApprovalOutcome{}, fmt.Errorf("encode the comment: %w", err)
	}
	var out api.ApprovalOutcome
	err = c.do(ctx, http.MethodPost, "/v1/approvals/"+url.PathEscape(id)+"/"+verb, nil, nil, bytes.NewReader(body), &out)
	return out, err
}
