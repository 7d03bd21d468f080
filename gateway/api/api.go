// Package api holds the wire types of sandgate's HTTP API: the JSON
// bodies the gateway answers with, the events of a run's log stream, the
// error shape and the status each error code is answered with. The server
// (package gateway) writes them and the Go client (package
// gateway/client) reads them; the OpenAPI document served at
// GET /v1/openapi.json describes the same shapes.
//
// It depends on the root package and the standard library only, so that
// a program that talks to a gateway does not link the server.
package api

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sandgate/sandgate"
)

// RunView is a run as the API answers it: POST /v1/runs, GET and DELETE
// /v1/runs/{id}, and each element of a RunList.
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
	// Usage is what the run's container used: null until the run has
	// finished, and for a run whose command never ran.
	Usage *sandgate.Usage `json:"usage"`
	// Artifacts summarises the run's collected artifacts, when its spec
	// asked for any.
	Artifacts *sandgate.ArtifactSummary `json:"artifacts,omitempty"`
	// Egress is what a run with network egress did through the proxy.
	Egress *sandgate.EgressSummary `json:"egress,omitempty"`
	// SignIn is how the run's principal signed in, as the trail keeps it.
	SignIn *sandgate.SignIn `json:"sign_in,omitempty"`
	// ApprovalID is the approval the run waited for, if it did.
	ApprovalID string `json:"approval_id,omitempty"`
	// Approval is the approval the run waits for, in the answer to the
	// request that made it (202, state pending_approval).
	Approval *sandgate.Approval `json:"approval,omitempty"`
}

// ArtifactList is GET /v1/runs/{id}/artifacts: the run's collected files
// in path order.
type ArtifactList struct {
	Artifacts []sandgate.Artifact `json:"artifacts"`
}

// Finished reports whether the run has ended.
func (r RunView) Finished() bool { return r.State == sandgate.StateFinished }

// OutputView is one captured output stream of a run.
type OutputView struct {
	Data      string `json:"data"`
	Encoding  string `json:"encoding"`
	Bytes     int64  `json:"bytes"`
	Truncated bool   `json:"truncated"`
	SHA256    string `json:"sha256,omitempty"`
}

// Decode returns the captured bytes.
func (o OutputView) Decode() ([]byte, error) {
	if o.Encoding == sandgate.EncodingBase64 {
		return base64.StdEncoding.DecodeString(o.Data)
	}
	return []byte(o.Data), nil
}

// RunList is a page of runs: GET /v1/runs.
type RunList struct {
	Runs       []RunView `json:"runs"`
	NextCursor *string   `json:"next_cursor"`
}

// DecisionView is a policy decision as the API answers it: the body of
// POST /v1/admission/review (with the normalised Spec) and the details of
// a policy denial (without it).
type DecisionView struct {
	Allow      bool                 `json:"allow"`
	Violations []sandgate.Violation `json:"violations"`
	Warnings   []sandgate.Violation `json:"warnings"`
	Mutations  []sandgate.Mutation  `json:"mutations"`
	// Approvals are the require_approval findings no approval covers: a
	// request with these alone waits for someone to approve it.
	Approvals      []sandgate.Violation `json:"approvals,omitempty"`
	PolicyRevision string               `json:"policy_revision"`
	DecisionID     string               `json:"decision_id"`
	Spec           *sandgate.RunSpec    `json:"spec,omitempty"`
}

// DecisionFromDetails reads a denial's details (the Details of a
// SANDGATE-POLICY-DENIED error) back into a DecisionView.
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

// PolicyStatus is GET /v1/policies and the answer of POST
// /v1/policies/reload: the policy in force.
type PolicyStatus = sandgate.PolicyStatus

// ConfigView is GET /v1/config: what clients may ask for.
type ConfigView struct {
	Version       string            `json:"version"`
	Node          string            `json:"node"`
	AirGapped     bool              `json:"air_gapped"`
	MountRoots    []string          `json:"mount_roots"`
	Defaults      sandgate.Defaults `json:"defaults"`
	Maxima        Limits            `json:"maxima"`
	AllowedImages []string          `json:"allowed_images"`
	// Images are the images sandgate built that this node's daemon holds
	// (the sandbox image, the language images), with their IDs: what a
	// policy's image_digests pins them to.
	Images []sandgate.BuiltImage `json:"images"`
	// ImagesError says why Images is empty when the daemon did not answer.
	ImagesError    string `json:"images_error,omitempty"`
	MaxWaitSeconds int64  `json:"max_wait_seconds"`
	BodyLimitBytes int64  `json:"body_limit_bytes"`
	PolicyRevision string `json:"policy_revision"`
	// Capacity is this node's run slots, session budget and team share.
	Capacity sandgate.Capacity `json:"capacity"`
}

// PrincipalView is GET /v1/whoami: the caller as the gateway
// authenticated it. Team is empty for a principal without one.
type PrincipalView struct {
	Name  string          `json:"name"`
	Team  string          `json:"team"`
	Roles []sandgate.Role `json:"roles"`
	// SignIn is how the principal signed in, as the trail keeps it.
	SignIn *sandgate.SignIn `json:"sign_in,omitempty"`
	// TeamLimits are its team's limits as this node enforces them: the
	// policy's team_limits bounded by the team's share of the node
	// (sandgate.Capacity.Effective). Absent for a principal without a team.
	TeamLimits *sandgate.TeamLimits `json:"team_limits,omitempty"`
}

// Limits are the maxima in force, as GET /v1/config reports them; the
// fields are those of the policy bundle's data (sandgate.config.maxima).
type Limits struct {
	MemoryMB         int64   `json:"memory_mb,omitempty"`
	CPUs             float64 `json:"cpus,omitempty"`
	Pids             int64   `json:"pids,omitempty"`
	TmpfsMB          int64   `json:"tmpfs_mb,omitempty"`
	Nofile           int64   `json:"nofile,omitempty"`
	TimeoutSeconds   int     `json:"timeout_seconds,omitempty"`
	OutputLimitBytes int64   `json:"output_limit_bytes,omitempty"`
	WorkspaceMB      int64   `json:"workspace_mb,omitempty"`
	ArtifactLimit    int64   `json:"artifact_limit_bytes,omitempty"`
}

// AuditEventList is a page of audit events: GET /v1/audit/events. Each
// line of GET /v1/audit/export?format=jsonl is one of its Events.
type AuditEventList struct {
	Events     []sandgate.AuditRecord `json:"events"`
	NextCursor *string                `json:"next_cursor"`
}

// VerifyReport is GET /v1/audit/verify.
type VerifyReport = sandgate.VerifyReport

// ImagePackagesView is GET /v1/images/{ref}/packages: the image's ID and
// the Debian packages it carries, or why it carries no list.
type ImagePackagesView = sandgate.ImagePackages

// SecretPut is the body of PUT /v1/secrets/{name}. Value is a pointer so
// that a body without it is told apart from an empty one.
type SecretPut struct {
	Value *string `json:"value"`
}

// SecretInfo is a stored secret as the API shows it: never its value.
type SecretInfo = sandgate.SecretInfo

// SecretList is GET /v1/secrets.
type SecretList struct {
	Secrets []sandgate.SecretInfo `json:"secrets"`
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

// Health is GET /healthz.
type Health struct {
	Status string `json:"status"`
	// Node names the node that answered.
	Node string `json:"node,omitempty"`
}

// Readiness is GET /readyz when ready, and the details of its 503 answer
// when not.
type Readiness struct {
	Ready   bool         `json:"ready"`
	Checks  []ReadyCheck `json:"checks"`
	Reasons []string     `json:"reasons"`
	// Warnings need an operator's attention but do not make the gateway
	// unready: an audit sink that is failing or falling behind.
	Warnings []string `json:"warnings,omitempty"`
}

// ReadyCheck is one readiness check.
type ReadyCheck struct {
	Name  string `json:"name"`
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
	// Detail says what a passing check found (the database check: the
	// server that takes writes, of those the DSN names).
	Detail string `json:"detail,omitempty"`
}

// SessionRequest is the body of POST /v1/sessions.
type SessionRequest = sandgate.SessionSpec

// SessionView is a session as the API answers it: POST /v1/sessions, GET
// and DELETE /v1/sessions/{id}, and each element of a SessionList.
type SessionView = sandgate.Session

// SessionWaiting is the answer to POST /v1/sessions for a session the
// policy answered require_approval: stored pending_approval, with the
// approval it waits for.
type SessionWaiting struct {
	SessionView
	Approval *sandgate.Approval `json:"approval"`
}

// SessionList is GET /v1/sessions.
type SessionList struct {
	Sessions []SessionView `json:"sessions"`
}

// ExecRequest is the body of POST /v1/sessions/{id}/runs: a command in
// the session, answered with the RunView of its run.
type ExecRequest = sandgate.ExecSpec

// FileResult is PUT /v1/sessions/{id}/files: what was written.
type FileResult = sandgate.FileDigest

// NodeList is GET /v1/nodes: the nodes of the cluster.
type NodeList struct {
	Nodes []NodeView `json:"nodes"`
}

// NodeView is one node of the cluster as the registry knows it.
type NodeView struct {
	Name string `json:"name"`
	// State is alive, lapsed (its heartbeat is late; a survivor is about
	// to take it over) or gone (it left, or was taken over).
	State          string     `json:"state"`
	AdvertiseURL   string     `json:"advertise_url"`
	DockerHost     string     `json:"docker_host"`
	DockerHealthy  bool       `json:"docker_healthy"`
	DockerError    string     `json:"docker_error,omitempty"`
	Running        int        `json:"running"`
	Capacity       int        `json:"capacity"`
	KeyID          string     `json:"key_id"`
	PublicKey      string     `json:"public_key"`
	KeyRegistered  bool       `json:"key_registered"`
	Version        string     `json:"version"`
	StartedAt      time.Time  `json:"started_at"`
	HeartbeatAt    time.Time  `json:"heartbeat_at"`
	HeartbeatAgeMS int64      `json:"heartbeat_age_ms"`
	TakenOverBy    string     `json:"taken_over_by,omitempty"`
	TakenOverAt    *time.Time `json:"taken_over_at,omitempty"`
	// HeldEvents are the audit events the node holds in its spool
	// because the database refused them as fenced, as it last reported.
	HeldEvents int64 `json:"held_events,omitempty"`
	// Fenced, for the node that answered, says why it starts no new
	// work (it was taken over); empty when it is not fenced.
	Fenced string `json:"fenced,omitempty"`
	// Self is true for the node that answered.
	Self bool `json:"self"`
}

// ApprovalList is GET /v1/approvals.
type ApprovalList struct {
	Approvals  []sandgate.Approval `json:"approvals"`
	NextCursor *string             `json:"next_cursor"`
}

// ApprovalDecision is the body of POST /v1/approvals/{id}/approve and
// …/deny: the approver's comment, recorded with the decision.
type ApprovalDecision struct {
	Comment string `json:"comment"`
}

// ApprovalOutcome is the answer to a grant or a denial: the approval as
// decided, and its run or session as it now stands (a granted run the
// policy in force refused is finished, rejected, its error saying why).
type ApprovalOutcome struct {
	Approval sandgate.Approval `json:"approval"`
	Run      *RunView          `json:"run,omitempty"`
	Session  *SessionView      `json:"session,omitempty"`
}
