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
	// RoleApprover may grant or deny other principals' requests that a
	// policy answered require_approval (data.sandgate.authz says whose).
	RoleApprover Role = "approver"
)

// Roles are every role a principal can hold.
var Roles = []Role{RoleSubmitter, RoleSecurity, RoleAuditor, RoleAdmin, RoleApprover}

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
	// OperationSession admits a session: its spec (the keepalive command
	// as its command) and its idle and lifetime limits in input.session.
	OperationSession Operation = "session"
	// OperationExec admits a command in an open session: input.request is
	// the session's admitted spec with the command's fields, and
	// input.session names the session.
	OperationExec Operation = "exec"
)

// APIVersion is the api_version of every policy input.
const APIVersion = "sandgate/v1"

// Settings are the gateway settings policies may depend on.
type Settings struct {
	AirGapped  bool     `json:"air_gapped"`
	MountRoots []string `json:"mount_roots"`
	// HostGroups are groups of the host that open doors on it, found at
	// start: the group of the Docker daemon's socket and the groups that
	// own the mount roots. No run may hold one, as the gids of
	// data.sandgate.config.privileged_gids.
	HostGroups []HostGroup `json:"host_groups"`
}

// HostGroup is a group of the host and what it owns there.
type HostGroup struct {
	GID int64 `json:"gid"`
	// Owns names what membership opens: "the Docker socket
	// /var/run/docker.sock", "the mount root /srv/work".
	Owns string `json:"owns"`
}

// AdmissionInput is the policy input document (`input` in Rego).
type AdmissionInput struct {
	APIVersion string     `json:"api_version"`
	Operation  Operation  `json:"operation"`
	Principal  Principal  `json:"principal"`
	Request    Normalized `json:"request"`
	Settings   Settings   `json:"settings"`
	// Session is set for the operations session and exec.
	Session *SessionInput `json:"session,omitempty"`
	// Approval is set when a request that required approval is decided
	// again after someone granted it.
	Approval *ApprovalInput `json:"approval,omitempty"`
	// Port is set for the operation port: the session's port asked for.
	Port *PortInput `json:"port,omitempty"`
	// Secrets are the stored secrets among those the request names, with
	// their versions (input.secrets); a name the request asks for that is
	// not here is not stored.
	Secrets map[string]SecretState `json:"secrets,omitempty"`
}

// SessionInput is input.session: the session a spec is decided for.
type SessionInput struct {
	// ID is empty while the session is being admitted.
	ID                 string `json:"id"`
	IdleTimeoutSeconds int    `json:"idle_timeout_seconds"`
	MaxLifetimeSeconds int    `json:"max_lifetime_seconds"`
}

// Violation is one rule's finding. A decision carries each rule once,
// however many elements of the request it found at fault: Count says how
// many, and Message names the first few.
type Violation struct {
	Rule    string `json:"rule"`
	Message string `json:"message"`
	// Controls are the CIS Docker Benchmark and Pod Security Standards
	// controls the rule enforces, from its METADATA annotation in the
	// bundle (and any the finding names itself).
	Controls []string `json:"controls"`
	// Severity is "critical", "high", "medium" or "low", from the rule's
	// METADATA annotation (custom.severity): how much a request the rule
	// denies could do, for whoever triages the audit trail.
	Severity string `json:"severity,omitempty"`
	// Action is "deny" or "warn"; a warn is reported and audited but does
	// not block.
	Action string `json:"action"`
	// Fix is what the policy suggests doing instead: the finding's own
	// "fix", else its rule's METADATA custom.fix; empty when it has none.
	Fix string `json:"fix,omitempty"`
	// Count is how many findings the violation stands for (capabilities,
	// mounts, … at fault; 1 for a rule about the request as a whole). The
	// policy engine sets it to at least 1.
	Count int `json:"count,omitempty"`
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
	Allow      bool        `json:"allow"`
	Violations []Violation `json:"violations"`
	Warnings   []Violation `json:"warnings"`
	Mutations  []Mutation  `json:"mutations"`
	// Approvals are the findings whose action is require_approval and
	// that no approval in the input covers: with no violation, the
	// request waits for someone to approve it (NeedsApproval).
	Approvals      []Violation `json:"approvals,omitempty"`
	PolicyRevision string      `json:"policy_revision"`
	DecisionID     string      `json:"decision_id"`
	// Spec is the normalised spec with the mutations applied: what runs
	// when Allow is true.
	Spec Normalized `json:"spec"`
	// Mask lists the spec fields (dotted paths such as "env" or
	// "labels.token") the bundle's mask rules name: the audit trail stores
	// them only as keyed hashes.
	Mask []string `json:"mask,omitempty"`
	// Enforcement is what the executor holds this run to beyond its spec,
	// from the data of the revision that decided.
	Enforcement Enforcement `json:"-"`
}

// NeedsApproval reports whether d neither allows nor denies: nothing but
// require_approval findings stand in the way.
func (d Decision) NeedsApproval() bool {
	if d.Allow || len(d.Approvals) == 0 {
		return false
	}
	for _, v := range d.Violations {
		if v.Action != "warn" {
			return false
		}
	}
	return true
}

// Enforcement is what the policy bundle's data tells the executor to hold
// a run to whatever its spec says: facts only the executor can check (the
// groups an image's /etc/group adds, the registry a pull reaches) and
// sizes only it can apply. It travels with the decision, so the executor
// enforces the revision that admitted the run.
type Enforcement struct {
	// PrivilegedGIDs are group IDs no container may hold, as its primary
	// group or as a supplementary group its image adds
	// (data.sandgate.config.privileged_gids).
	PrivilegedGIDs []int64 `json:"privileged_gids"`
	// PullRegistries are the registries (host[:port]) an image may be
	// pulled from; empty, no pull goes anywhere
	// (data.sandgate.config.pull_registries).
	PullRegistries []string `json:"pull_registries"`
	// VolumeQuotaMB is the size of each cache volume of the run's team
	// (data.sandgate.config.volume_quota_mb).
	VolumeQuotaMB int64 `json:"volume_quota_mb"`
	// MaxVolumes is how many cache volumes the run's team may have
	// (data.sandgate.config.max_volumes); 0 is the executor's default.
	MaxVolumes int `json:"max_volumes"`
	// EgressPrivateCIDRs are the loopback and private addresses the egress
	// proxy may connect an egress run to; every other such address is
	// refused (data.sandgate.config.egress_private_cidrs).
	EgressPrivateCIDRs []string `json:"egress_private_cidrs"`
	// Secrets are the bindings of the secrets the run asks for
	// (data.sandgate.config.secrets): where the egress proxy writes each.
	Secrets []SecretBinding `json:"secrets,omitempty"`
	// ImageSigners are, by image repository, the keys (their IDs in
	// SANDGATE_IMAGE_VERIFY_KEYS) one of which must have signed the image
	// a run of the team resolves; a repository not listed needs no
	// signature (data.sandgate.config.image_signers).
	ImageSigners map[string][]string `json:"image_signers,omitempty"`
	// TerminalTranscripts says a session's terminals are kept, byte for
	// byte, as the artifact of each terminal's run
	// (data.sandgate.config.terminal_transcripts).
	TerminalTranscripts bool `json:"terminal_transcripts,omitempty"`
}

// TeamLimits bound what one team may hold at once, so that one team's
// flood is refused for that team alone (data.sandgate.config.team_limits).
// A zero field sets no limit of the bundle's; Capacity.Effective bounds
// Concurrent and Sessions by the node's share whatever the bundle says.
type TeamLimits struct {
	// Concurrent is how many of the team's runs may hold a container.
	Concurrent int `json:"concurrent"`
	// Sessions is how many of the team's sessions may be open at once on
	// a node; they hold session places, not run slots.
	Sessions int `json:"sessions"`
	// Queued is how many of the team's admitted runs may wait for one.
	Queued int `json:"queued"`
	// MemoryMB and CPUs bound the sums of the memory and CPU limits of
	// the team's running and queued runs.
	MemoryMB int64   `json:"memory_mb"`
	CPUs     float64 `json:"cpus"`
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
	// TeamLimits are the limits of the policy in force for team.
	TeamLimits(team string) TeamLimits
	// Enforcement is what the policy in force tells the executor to hold
	// team's runs to; a decision carries its own revision's.
	Enforcement(team string) Enforcement
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
	// SignedBy is the pinned key that signed the bundle in force and
	// SignedRevision the revision its signed manifest names; both are
	// empty when no verification keys are pinned.
	SignedBy       string `json:"signed_by,omitempty"`
	SignedRevision string `json:"signed_revision,omitempty"`
	// Rules are the rules of the policy in force, as their METADATA
	// describes them, sorted by rule.
	Rules []PolicyRule `json:"rules,omitempty"`
}

// PolicyRule is one rule of the policy in force: what its METADATA says,
// where it is, and how many of the bundle's unit tests name it.
type PolicyRule struct {
	Rule string `json:"rule"`
	// Kind is finding or mutation.
	Kind     string   `json:"kind"`
	Title    string   `json:"title"`
	Severity string   `json:"severity,omitempty"`
	Controls []string `json:"controls"`
	// Module and Line locate the rule's METADATA block.
	Module string `json:"module"`
	Line   int    `json:"line"`
	// Tests counts the test_ rules of the bundle's *_test.rego modules
	// that name the rule (as the string of its ID).
	Tests int `json:"tests"`
}

// PolicyAdmin is the policy engine as security staff drive it.
type PolicyAdmin interface {
	// Status describes the policy in force.
	Status() PolicyStatus
	// Reload loads the bundle again from its directory. On a compile or
	// test failure it keeps the old policy and returns POLICY-INVALID with
	// the errors in Details["errors"]; with no directory (the embedded
	// bundle) it returns CONFLICT naming SANDGATE_POLICY_DIR.
	Reload(ctx context.Context) (PolicyStatus, error)
}

// PolicyCandidate is a policy bundle that is not in force: loaded,
// compiled, tested and prepared exactly as a reload would, so that past
// decisions can be replayed against it before it ships.
type PolicyCandidate interface {
	// Revision is the candidate's revision, as a reload of the same files
	// would report it.
	Revision() string
	// Mask lists the spec fields the candidate's mask rules name.
	Mask() []string
	// Decide evaluates in against the candidate as the engine in force
	// would (mutations applied, fail closed). in.Settings are used as
	// they are: the candidate has no settings of its own. The error is
	// non-nil when ctx is done, or when a candidate evaluated out of
	// process cannot decide: POLICY-INVALID when the evaluation used one
	// of its limits, UNAVAILABLE when the evaluator failed.
	Decide(ctx context.Context, in AdmissionInput) (Decision, error)
}

// CandidateLoader loads candidate bundles. It is implemented by the policy
// engine (package policies).
type CandidateLoader interface {
	// LoadCandidate loads the bundle made of files (file name, such as
	// "admission.rego" or "data.json", to content). A bundle that does not
	// compile, defines no decision or fails its own tests is
	// POLICY-INVALID with every problem in Details["errors"]; bad file
	// names are INVALID-REQUEST.
	LoadCandidate(ctx context.Context, files map[string][]byte) (PolicyCandidate, error)
}
