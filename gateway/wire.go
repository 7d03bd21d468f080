package gateway

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sandgate/sandgate"
)

// The wire types below are the API's JSON. They are kept apart from the
// domain types so that the domain can change without changing the API.

// RunView is a run as the API answers it.
type RunView struct {
	ID             string              `json:"id"`
	CorrelationID  string              `json:"correlation_id"`
	DecisionID     string              `json:"decision_id"`
	PolicyRevision string              `json:"policy_revision,omitempty"`
	Principal      string              `json:"principal"`
	Team           string              `json:"team"`
	Node           string              `json:"node,omitempty"`
	State          sandgate.State      `json:"state"`
	Outcome        *sandgate.Outcome   `json:"outcome"`
	ExitCode       *int                `json:"exit_code"`
	OOMKilled      bool                `json:"oom_killed"`
	Error          *sandgate.ErrorInfo `json:"error"`
	ContainerID    string              `json:"container_id,omitempty"`
	CreatedAt      time.Time           `json:"created_at"`
	StartedAt      *time.Time          `json:"started_at"`
	FinishedAt     *time.Time          `json:"finished_at"`
	DurationMS     int64               `json:"duration_ms"`
	Stdout         OutputView          `json:"stdout"`
	Stderr         OutputView          `json:"stderr"`
	Spec           sandgate.RunSpec    `json:"spec"`
	Warnings       []string            `json:"warnings"`
}

// OutputView is one captured output stream.
type OutputView struct {
	Data      string `json:"data"`
	Encoding  string `json:"encoding"`
	Bytes     int64  `json:"bytes"`
	Truncated bool   `json:"truncated"`
	SHA256    string `json:"sha256,omitempty"`
}

// Decode returns the captured bytes.
func (o OutputView) Decode() ([]byte, error) {
	if o.Encoding == "base64" {
		return base64.StdEncoding.DecodeString(o.Data)
	}
	return []byte(o.Data), nil
}

// Finished reports whether the run has ended.
func (r RunView) Finished() bool { return r.State == sandgate.StateFinished }

func runView(r *sandgate.Run) RunView {
	v := RunView{
		ID: r.ID, CorrelationID: r.CorrelationID, DecisionID: r.DecisionID,
		PolicyRevision: r.PolicyRevision, Principal: r.Principal, Team: r.Team, Node: r.Node,
		State: r.State, ExitCode: r.ExitCode, OOMKilled: r.OOMKilled, Error: r.Error,
		ContainerID: r.ContainerID, CreatedAt: r.CreatedAt, StartedAt: r.StartedAt,
		FinishedAt: r.FinishedAt, DurationMS: r.DurationMS,
		Stdout: outputView(r.Stdout), Stderr: outputView(r.Stderr),
		Spec: r.Spec, Warnings: r.Warnings,
	}
	if r.Outcome != "" {
		o := r.Outcome
		v.Outcome = &o
	}
	if v.Warnings == nil {
		v.Warnings = []string{}
	}
	return v
}

func outputView(o sandgate.Output) OutputView {
	enc := o.Encoding
	if enc == "" {
		enc = "utf-8"
	}
	return OutputView{Data: o.Data, Encoding: enc, Bytes: o.Bytes, Truncated: o.Truncated, SHA256: o.SHA256}
}

// RunList is a page of runs.
type RunList struct {
	Runs       []RunView `json:"runs"`
	NextCursor *string   `json:"next_cursor"`
}

// DecisionView is a policy decision as the API answers it: the body of
// POST /v1/admission/review and the details of a policy denial.
type DecisionView struct {
	Allow          bool                 `json:"allow"`
	Violations     []sandgate.Violation `json:"violations"`
	Warnings       []sandgate.Violation `json:"warnings"`
	Mutations      []sandgate.Mutation  `json:"mutations"`
	PolicyRevision string               `json:"policy_revision"`
	DecisionID     string               `json:"decision_id"`
	Spec           *sandgate.RunSpec    `json:"spec,omitempty"`
}

func decisionView(d sandgate.Decision, withSpec bool) DecisionView {
	v := DecisionView{
		Allow: d.Allow, Violations: d.Violations, Warnings: d.Warnings, Mutations: d.Mutations,
		PolicyRevision: d.PolicyRevision, DecisionID: d.DecisionID,
	}
	if v.Violations == nil {
		v.Violations = []sandgate.Violation{}
	}
	if v.Warnings == nil {
		v.Warnings = []sandgate.Violation{}
	}
	if v.Mutations == nil {
		v.Mutations = []sandgate.Mutation{}
	}
	if withSpec {
		s := d.Spec.RunSpec
		v.Spec = &s
	}
	return v
}

// details returns the decision as error details.
func (v DecisionView) details() map[string]any {
	return map[string]any{
		"allow":           v.Allow,
		"violations":      v.Violations,
		"warnings":        v.Warnings,
		"mutations":       v.Mutations,
		"policy_revision": v.PolicyRevision,
		"decision_id":     v.DecisionID,
	}
}

// DecisionFromDetails reads a denial's details back into a DecisionView.
func DecisionFromDetails(details map[string]any) (DecisionView, error) {
	raw, err := json.Marshal(details)
	if err != nil {
		return DecisionView{}, err
	}
	var v DecisionView
	if err := json.Unmarshal(raw, &v); err != nil {
		return DecisionView{}, fmt.Errorf("decode decision: %w", err)
	}
	return v, nil
}

// The SSE event names of GET /v1/runs/{id}/logs.
const (
	EventStdout = "stdout"
	EventStderr = "stderr"
	EventState  = "state"
	EventExit   = "exit"
)

// ChunkData is the data of a stdout or stderr event.
type ChunkData struct {
	Data     string `json:"data"`
	Encoding string `json:"encoding"`
}

// Bytes returns the chunk's bytes.
func (c ChunkData) Bytes() ([]byte, error) {
	return OutputView{Data: c.Data, Encoding: c.Encoding}.Decode()
}

// StateData is the data of a state event.
type StateData struct {
	State       sandgate.State `json:"state"`
	ContainerID string         `json:"container_id,omitempty"`
	At          time.Time      `json:"at"`
}

// ExitData is the data of the exit event, the last of a stream.
type ExitData struct {
	State      sandgate.State      `json:"state"`
	Outcome    sandgate.Outcome    `json:"outcome"`
	ExitCode   *int                `json:"exit_code"`
	OOMKilled  bool                `json:"oom_killed"`
	Error      *sandgate.ErrorInfo `json:"error"`
	DurationMS int64               `json:"duration_ms"`
	Stdout     StreamTotals        `json:"stdout"`
	Stderr     StreamTotals        `json:"stderr"`
}

// StreamTotals says how much a stream produced.
type StreamTotals struct {
	Bytes     int64 `json:"bytes"`
	Truncated bool  `json:"truncated"`
}

func exitData(r *sandgate.Run) ExitData {
	return ExitData{
		State: sandgate.StateFinished, Outcome: r.Outcome, ExitCode: r.ExitCode, OOMKilled: r.OOMKilled,
		Error: r.Error, DurationMS: r.DurationMS,
		Stdout: StreamTotals{Bytes: r.Stdout.Bytes, Truncated: r.Stdout.Truncated},
		Stderr: StreamTotals{Bytes: r.Stderr.Bytes, Truncated: r.Stderr.Truncated},
	}
}

// ConfigView is GET /v1/config: what clients may ask for.
type ConfigView struct {
	Version        string            `json:"version"`
	Node           string            `json:"node"`
	AirGapped      bool              `json:"air_gapped"`
	MountRoots     []string          `json:"mount_roots"`
	Defaults       sandgate.Defaults `json:"defaults"`
	Maxima         Limits            `json:"maxima"`
	AllowedImages  []string          `json:"allowed_images"`
	MaxWaitSeconds int64             `json:"max_wait_seconds"`
	BodyLimitBytes int64             `json:"body_limit_bytes"`
	PolicyRevision string            `json:"policy_revision"`
}

// AuditEventList is a page of audit events.
type AuditEventList struct {
	Events     []sandgate.AuditRecord `json:"events"`
	NextCursor *string                `json:"next_cursor"`
}

// VolumeList is GET /v1/volumes.
type VolumeList struct {
	Volumes []sandgate.CacheVolume `json:"volumes"`
}

// SandboxList is GET /v1/sandboxes.
type SandboxList struct {
	Sandboxes []sandgate.Sandbox `json:"sandboxes"`
}

// CleanupResult is POST /v1/sandboxes/cleanup.
type CleanupResult struct {
	Removed []sandgate.Sandbox `json:"removed"`
	Count   int                `json:"count"`
}

// Readiness is GET /readyz's details.
type Readiness struct {
	Ready   bool         `json:"ready"`
	Checks  []ReadyCheck `json:"checks"`
	Reasons []string     `json:"reasons"`
}

// ReadyCheck is one readiness check.
type ReadyCheck struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

func cursorPtr(c string) *string {
	if c == "" {
		return nil
	}
	return &c
}
