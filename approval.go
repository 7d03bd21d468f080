package sandgate

import (
	"context"
	"time"
)

// ApprovalStatus is where an approval stands.
type ApprovalStatus string

// The approval statuses: pending until someone grants or denies it, or
// until it expires.
const (
	ApprovalPending ApprovalStatus = "pending"
	ApprovalGranted ApprovalStatus = "granted"
	ApprovalDenied  ApprovalStatus = "denied"
	ApprovalExpired ApprovalStatus = "expired"
)

// ApprovalStatuses are every status, for filters.
var ApprovalStatuses = []ApprovalStatus{ApprovalPending, ApprovalGranted, ApprovalDenied, ApprovalExpired}

// Approval is a request that the policy answered require_approval: a run
// or a session stored pending_approval with no container, waiting for
// someone the policy lets approve it. It is what GET /v1/approvals/{id}
// answers.
type Approval struct {
	ID     string         `json:"id"`
	Status ApprovalStatus `json:"status"`
	// Operation is OperationRun or OperationSession.
	Operation Operation `json:"operation"`
	// RunID or SessionID is the request's run or session, stored
	// pending_approval.
	RunID     string `json:"run_id,omitempty"`
	SessionID string `json:"session_id,omitempty"`
	// CorrelationID is the request's: the approval's events and the
	// run's share it.
	CorrelationID  string `json:"correlation_id"`
	DecisionID     string `json:"decision_id"`
	PolicyRevision string `json:"policy_revision"`
	// Requester, Team, RequesterRoles and RequesterSignIn are who asked.
	Requester       string `json:"requester"`
	Team            string `json:"team"`
	RequesterRoles  []Role `json:"requester_roles"`
	RequesterSignIn SignIn `json:"requester_sign_in"`
	// Reasons are the findings that asked for approval, each with its
	// rule.
	Reasons []Violation `json:"reasons"`
	// Node holds the request's secret values in memory until it is
	// decided; another node can carry out an approval only of a request
	// that has none.
	Node string `json:"node"`
	// Spec is the request's spec, secrets as keyed hashes: what an
	// approver approves.
	Spec RunSpec `json:"spec"`
	// Limits are a session's.
	Limits    *SessionLimits `json:"limits,omitempty"`
	CreatedAt time.Time      `json:"created_at"`
	ExpiresAt time.Time      `json:"expires_at"`
	// DecidedAt, DecidedBy, DeciderSignIn and Comment are set once it is
	// granted, denied or expired.
	DecidedAt     *time.Time `json:"decided_at"`
	DecidedBy     string     `json:"decided_by,omitempty"`
	DeciderSignIn *SignIn    `json:"decider_sign_in,omitempty"`
	Comment       string     `json:"comment,omitempty"`
}

// MaxApprovalComment is the longest comment an approver may give, in
// bytes.
const MaxApprovalComment = 4096

// ApprovalInput is input.approval of a decision taken again after an
// approval: who approved, which rules they approved, and their comment.
type ApprovalInput struct {
	ID       string    `json:"id"`
	Approver Principal `json:"approver"`
	// Rules are the rules whose require_approval findings were approved.
	Rules   []string `json:"rules"`
	Comment string   `json:"comment"`
}

// ApprovalFilter selects approvals for listing. Team "" is every team.
type ApprovalFilter struct {
	Team   string
	Status ApprovalStatus
	Limit  int
	Cursor string
}

// ApprovalStore keeps approvals.
type ApprovalStore interface {
	// CreateApproval inserts a pending approval.
	CreateApproval(ctx context.Context, a *Approval) error
	// GetApproval returns the approval or NOT-FOUND.
	GetApproval(ctx context.Context, id string) (*Approval, error)
	// ListApprovals returns approvals newest first, and the cursor of the
	// next page ("" at the end).
	ListApprovals(ctx context.Context, f ApprovalFilter) ([]Approval, string, error)
	// DecideApproval saves a's status, decider and comment if a is still
	// pending in the store, and CONFLICT (with the stored approval) when
	// it is not: of two deciders at once, one wins.
	DecideApproval(ctx context.Context, a *Approval) error
	// ReopenApproval puts a decided approval back to pending: a grant
	// whose decision could not be recorded.
	ReopenApproval(ctx context.Context, id string) error
	// ExpireApprovals marks expired, at now, at most limit pending
	// approvals whose time ran out, and returns them.
	ExpireApprovals(ctx context.Context, now time.Time, limit int) ([]Approval, error)
}
