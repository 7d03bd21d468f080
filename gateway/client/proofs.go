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

// Checkpoint returns a chain's newest checkpoint note ("" for the
// gateway's own chain), with its cosignatures (auditor, admin).
func (c *Client) Checkpoint(ctx context.Context, chain string) (api.CheckpointView, error) {
	q := url.Values{}
	if chain != "" {
		q.Set("chain", chain)
	}
	var cp api.CheckpointView
	err := c.do(ctx, http.MethodGet, "/v1/audit/checkpoint", q, http.Header{"Accept": {"application/json"}}, nil, &cp)
	return cp, err
}

// InclusionProof returns the proof that an event is in its chain's tree
// of treeSize leaves (0: the newest checkpoint's) (auditor, admin).
func (c *Client) InclusionProof(ctx context.Context, eventID string, treeSize int64) (api.InclusionProofView, error) {
	q := url.Values{"event_id": {eventID}}
	if treeSize > 0 {
		q.Set("tree_size", strconv.FormatInt(treeSize, 10))
	}
	var p api.InclusionProofView
	err := c.do(ctx, http.MethodGet, "/v1/audit/proof/inclusion", q, nil, nil, &p)
	return p, err
}

// ConsistencyProof returns the proof that a chain's tree of from leaves is
// a prefix of its tree of to leaves (0: the newest checkpoint's) (auditor,
// admin).
func (c *Client) ConsistencyProof(ctx context.Context, chain string, from, to int64) (api.ConsistencyProofView, error) {
	q := url.Values{"from": {strconv.FormatInt(from, 10)}}
	if chain != "" {
		q.Set("chain", chain)
	}
	if to > 0 {
		q.Set("to", strconv.FormatInt(to, 10))
	}
	var p api.ConsistencyProofView
	err := c.do(ctx, http.MethodGet, "/v1/audit/proof/consistency", q, nil, nil, &p)
	return p, err
}

// Receipt returns a run's receipt, the document `sandgate audit receipt`
// writes (submitter of the run's team, auditor, admin). Check it with
// audit.VerifyReceipt or `sandgate audit verify-receipt`.
func (c *Client) Receipt(ctx context.Context, runID string) (sandgate.Receipt, error) {
	var r sandgate.Receipt
	err := c.do(ctx, http.MethodGet, "/v1/runs/"+url.PathEscape(runID)+"/receipt", nil, nil, nil, &r)
	return r, err
}

// Cosign posts a witness's cosignature of a checkpoint note and returns
// the checkpoint with the cosignatures the gateway keeps (auditor).
func (c *Client) Cosign(ctx context.Context, req api.CosignatureRequest) (api.CheckpointView, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return api.CheckpointView{}, fmt.Errorf("encode cosignature: %w", err)
	}
	var cp api.CheckpointView
	err = c.do(ctx, http.MethodPost, "/v1/audit/checkpoint/cosignature", nil, nil, bytes.NewReader(body), &cp)
	return cp, err
}

// WitnessAlarm posts an alarm a witness raised, signed with its key, and
// returns it as the trail recorded it (auditor).
func (c *Client) WitnessAlarm(ctx context.Context, req api.WitnessAlarmRequest) (api.WitnessAlarmView, error) {
	body, err := json.Marshal(req)
	if err != nil {
		return api.WitnessAlarmView{}, fmt.Errorf("encode alarm: %w", err)
	}
	var v api.WitnessAlarmView
	err = c.do(ctx, http.MethodPost, "/v1/audit/witness/alarm", nil, nil, bytes.NewReader(body), &v)
	return v, err
}
