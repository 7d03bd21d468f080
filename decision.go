package sandgate

import (
	"context"
	"slices"
	"time"
)

// Role is what a principal may do.
type Role string

// The roles.
const (
	RoleSubmitter Role = "submitter"
	RoleSecurity  Role = "security"
	RoleAuditor   Role = "auditor"
	RoleAdmin     Role = "admin"
)

// Principal is an authenticated caller.
type Principal struct {
	Name  string `json:"name"`
	Team  string `json:"team"`
	Roles []Role `json:"roles"`
}

// Has reports whether p holds any of roles.
func (p Principal) Has(roles ...Role) bool {
	for _, r := range roles {
		if slices.Contains(p.Roles, r) {
			return true
		}
	}
	return false
}

// Operation is why a spec is being evaluated.
type Operation string

// The operations a policy input can carry.
const (
	OperationRun    Operation = "run"
	OperationReview Operation = "review"
)

// APIVersion is the api_version of every policy input.
const APIVersion = "sandgate/v1"

// Settings are the gateway settings policies may depend on.
type Settings struct {
	AirGapped  bool     `json:"air_gapped"`
	MountRoots []string `json:"mount_roots"`
}

// AdmissionInput is the policy input document (`input` in Rego).
type AdmissionInput struct {
	APIVersion string    `json:"api_version"`
	Operation  Operation `json:"operation"`
	Principal  Principal `json:"principal"`
	Request    RunSpec   `json:"request"`
	Settings   Settings  `json:"settings"`
}

// Violation is one rule's finding.
type Violation struct {
	Rule     string   `json:"rule"`
	Message  string   `json:"message"`
	Controls []string `json:"controls"`
	// Action is "deny" or "warn"; a warn is reported and audited but does
	// not block.
	Action string `json:"action"`
}

// Mutation is a change policy made to the spec (a JSON Patch replace).
type Mutation struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
	Rule  string `json:"rule"`
}

// Decision is the policy's answer for one input.
type Decision struct {
	Allow          bool        `json:"allow"`
	Violations     []Violation `json:"violations"`
	Warnings       []Violation `json:"warnings"`
	Mutations      []Mutation  `json:"mutations"`
	PolicyRevision string      `json:"policy_revision"`
	DecisionID     string      `json:"decision_id"`
	// Spec is the normalised spec with the mutations applied: what runs
	// when Allow is true.
	Spec RunSpec `json:"spec"`
	// Mask lists the spec fields (dotted paths such as "env" or
	// "labels.token") the bundle's mask rules name: the audit trail stores
	// them only as keyed hashes.
	Mask []string `json:"mask,omitempty"`
}

// Admitter decides whether a run may go ahead.
type Admitter interface {
	// Decide normalises nothing: in.Request must already be normalised. It
	// always returns a decision; an undefined result, an evaluation error
	// or a missing policy yields a deny with a reason (fail closed). The
	// error is non-nil only for a cancelled context.
	Decide(ctx context.Context, in AdmissionInput) (Decision, error)
	// Defaults are the bundle's defaults for Normalize.
	Defaults() Defaults
}

// PolicyModule is one file of a loaded policy bundle.
type PolicyModule struct {
	Name   string `json:"name"`
	SHA256 string `json:"sha256"`
}

// PolicyStatus describes the policy in force.
type PolicyStatus struct {
	Revision    string         `json:"revision"`
	Source      string         `json:"source"`
	Modules     []PolicyModule `json:"modules"`
	LoadedAt    time.Time      `json:"loaded_at"`
	LastError   string         `json:"last_error,omitempty"`
	LastErrorAt *time.Time     `json:"last_error_at,omitempty"`
}

// PolicyAdmin is the policy engine as security staff drive it.
type PolicyAdmin interface {
	// Status describes the policy in force.
	Status() PolicyStatus
	// Reload loads the bundle again from its directory. On a compile or
	// test failure it keeps the old policy and returns POLICY-INVALID with
	// the errors in Details["errors"].
	Reload(ctx context.Context) (PolicyStatus, error)
}
