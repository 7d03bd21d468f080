package sandgate

import (
	"context"
	"time"
)

// State is where a run is in its life.
type State string

// The run states, in order.
const (
	// StatePendingApproval is a run the policy answered
	// require_approval: stored, with no container, until someone
	// approves it (then pending) or it is denied or expires (then
	// finished, rejected).
	StatePendingApproval State = "pending_approval"
	StatePending         State = "pending"
	StateCreating        State = "creating"
	StateRunning         State = "running"
	StateFinished        State = "finished"
)

// Outcome is how a finished run ended.
type Outcome string

// The run outcomes.
const (
	OutcomeSucceeded Outcome = "succeeded"
	OutcomeFailed    Outcome = "failed"
	OutcomeOOMKilled Outcome = "oom_killed"
	OutcomeTimedOut  Outcome = "timed_out"
	OutcomeCancelled Outcome = "cancelled"
	OutcomeError     Outcome = "error"
	OutcomeLost      Outcome = "lost"
	// OutcomeRejected is a run that waited for approval and never ran:
	// denied, expired, or refused by the policy in force when it was
	// approved.
	OutcomeRejected Outcome = "rejected"
)

// ErrorInfo is the client-facing form of a run's platform error.
type ErrorInfo struct {
	Code    ErrorCode `json:"code"`
	Message string    `json:"message"`
}

// Run is a submitted run and everything known about it; it is what
// GET /v1/runs/{id} answers.
type Run struct {
	ID             string `json:"id"`
	CorrelationID  string `json:"correlation_id"`
	DecisionID     string `json:"decision_id"`
	PolicyRevision string `json:"policy_revision,omitempty"`
	Principal      string `json:"principal"`
	Team           string `json:"team"`
	// SignIn is how the principal signed in, as the trail keeps it.
	SignIn         *SignIn `json:"sign_in,omitempty"`
	Node           string  `json:"node,omitempty"`
	IdempotencyKey string  `json:"-"`
	// ApprovalID is the approval the run waited for, if it did.
	ApprovalID  string     `json:"approval_id,omitempty"`
	State       State      `json:"state"`
	Outcome     Outcome    `json:"outcome,omitempty"`
	ExitCode    *int       `json:"exit_code"`
	OOMKilled   bool       `json:"oom_killed"`
	Error       *ErrorInfo `json:"error"`
	ContainerID string     `json:"container_id,omitempty"`
	CreatedAt   time.Time  `json:"created_at"`
	StartedAt   *time.Time `json:"started_at"`
	FinishedAt  *time.Time `json:"finished_at"`
	DurationMS  int64      `json:"duration_ms"`
	Stdout      Output     `json:"stdout"`
	Stderr      Output     `json:"stderr"`
	Spec        RunSpec    `json:"spec"`
	Warnings    []string   `json:"warnings"`
	// Artifacts summarises the files collected after the command ended,
	// for a run whose spec asked for artifacts.
	Artifacts *ArtifactSummary `json:"artifacts,omitempty"`
	// Usage is what the run's container used; nil until the run has
	// finished, and for a run that never had a running container.
	Usage *Usage `json:"usage"`
	// Egress is what a run with network egress did through the proxy;
	// nil for other runs.
	Egress *EgressSummary `json:"egress,omitempty"`
}

// Job is an admitted run handed to an Executor: the normalised, mutated and
// allowed spec plus the identities every event and container label carries.
type Job struct {
	RunID         string
	CorrelationID string
	DecisionID    string
	Principal     string
	// SignIn is how the principal signed in, as the trail keeps it: every
	// event of the job names the person.
	SignIn *SignIn
	Team   string
	// PolicyRevision is the revision of the policy that admitted the
	// run; its egress events that no per-connection decision judged (a
	// destination not admitted, a refused address) carry it.
	PolicyRevision string
	Spec           Normalized
	// AirGapped forbids any image pull, whatever the spec's pull policy.
	AirGapped bool
	// Enforcement is what the decision that admitted the run tells the
	// executor to hold it to beyond its spec.
	Enforcement Enforcement
	// TeamConcurrency is how many of the team's runs may hold a container
	// on this node at once (the team's limits); 0 sets no limit of the
	// team's own, and the node's share bounds it either way. For a
	// session's container it is the team's limit of sessions. Waiting
	// runs get containers a team at a time in turn.
	TeamConcurrency int
	// Stdout and Stderr, when set, are where the output is captured (the
	// gateway makes them, to read them while the run goes on); otherwise
	// the executor makes its own. Each keeps at most the spec's output
	// limit.
	Stdout, Stderr *OutputBuffer
	// Output, when set, is told of each chunk of captured output as it is
	// kept, within the output limit: p is the kept bytes, a slice of the
	// stream's buffer. It must not block for long.
	Output func(stream Stream, p []byte)
	// PullProgress, when set, is told of each image.pull_progress
	// event's payload as it is recorded (layers seen and done, bytes
	// fetched, attempt, final): the gateway puts it in the run's live
	// log. It must not block for long, nor change the map.
	PullProgress func(progress map[string]any)
	// Started, when set, is called once the container is running.
	Started func(containerID string, at time.Time)
	// Workspace, when set, is the local path of the run's checked
	// workspace archive, unpacked into its workspace before the command
	// starts. The caller keeps it until Execute returns.
	Workspace string
	// ContainerID is for adoption after a restart: the container the run
	// was started in, when known. A run served from a warm pool runs in a
	// container made before the run, which does not carry the run's ID.
	ContainerID string
	// SessionContainer marks the job of a session's container: RunID is
	// the session's ID, the command is its keepalive, the timeout its
	// lifetime; it always has a workspace and never a warm container.
	SessionContainer bool
	// SessionID names the session a command runs in (a job given to
	// Exec); its events carry it.
	SessionID string
	// Secrets are the secrets the egress proxy writes into the run's
	// requests, their values revealed by the gateway just before it
	// hands the job over; the container gets placeholders only. Empty
	// for an adopted run: its secrets are not used again.
	Secrets []RunSecret
}

// Stream names an output stream.
type Stream string

// The output streams.
const (
	Stdout Stream = "stdout"
	Stderr Stream = "stderr"
)

// Result is how an executed job ended.
type Result struct {
	Outcome     Outcome
	ExitCode    *int
	OOMKilled   bool
	ContainerID string
	CreatedAt   time.Time
	StartedAt   time.Time
	FinishedAt  time.Time
	Stdout      Output
	Stderr      Output
	// Error is set for OutcomeError and OutcomeLost, with a SANDGATE-SBX
	// code or DOCKER-UNAVAILABLE.
	Error *ErrorInfo
	// Artifacts is what was collected from the workspace once the command
	// ended, for a job whose spec asked for artifacts; nil otherwise.
	Artifacts *Artifacts
	// Usage is what the container used while the run had it; nil when the
	// command never ran.
	Usage *Usage
	// Egress is what an egress run did through the proxy; nil otherwise.
	Egress *EgressSummary
}

// Executor runs admitted jobs in fresh, locked-down sandboxes. The Docker
// executor is one; a Kubernetes one would be another.
type Executor interface {
	// Execute runs job to completion and reports its result. It emits the
	// lifecycle events as they happen. It returns an error only when the
	// job could not be run at all (codes SBX-001…004, DOCKER-UNAVAILABLE);
	// the result then still says when it ended and why.
	Execute(ctx context.Context, job Job) (Result, error)
	// Cancel stops the run: SIGTERM, a grace period, SIGKILL, then removal.
	// It returns NOT-FOUND when no such run is executing.
	Cancel(ctx context.Context, runID string) error
	// Ping reports whether the sandbox backend answers
	// (DOCKER-UNAVAILABLE when not).
	Ping(ctx context.Context) error
}

// RunFilter selects runs for listing. Empty fields match everything.
type RunFilter struct {
	Team string
	// Node selects the runs of one gateway node, as reconciliation after a
	// restart does.
	Node      string
	State     State
	Outcome   Outcome
	SessionID string
	TaskID    string
	Since     time.Time
	Until     time.Time
	Limit     int
	Cursor    string
	// WithOutput asks for the runs' output data; without it a listed run's
	// stdout and stderr carry their sizes and digests only, so that a page
	// of runs costs what its metadata does whatever the runs printed.
	WithOutput bool
}

// Reconciler is an Executor that can take over the runs a previous
// process of its node left unfinished, for instance after a SIGKILL.
type Reconciler interface {
	// Hold keeps the containers of these runs from the orphan reaper until
	// Adopt has ended them. Call it before the reaper's first pass.
	Hold(runIDs ...string)
	// HoldContainers keeps these containers from the orphan reaper until
	// Adopt has ended the runs started in them: a container made ahead of
	// its run (a warm pool's) does not carry the run's ID, so Hold cannot
	// name it. Call it with Hold, with the runs' known container IDs.
	HoldContainers(containerIDs ...string)
	// Adopt finishes the run job.RunID that a previous process of this
	// node started, in the container labelled with the run's ID or else in
	// job.ContainerID: a running container is followed to its end (output
	// from then on), one that exited meanwhile is recorded with its real
	// exit code, one created but never started is started; a run whose
	// container is gone ends as OutcomeLost with a reason. It emits the
	// remaining lifecycle events and removes the container. Errors are
	// those of Execute.
	Adopt(ctx context.Context, job Job) (Result, error)
}

// RunStore keeps runs, the state the API serves.
type RunStore interface {
	// CreateRun inserts a new run: CONFLICT when its ID exists. Whether
	// an Idempotency-Key names an earlier run is decided before, once, by
	// IdempotencyKeys' claim.
	CreateRun(ctx context.Context, run *Run) error
	// UpdateRun saves the run's state, outcome and result fields.
	UpdateRun(ctx context.Context, run *Run) error
	// GetRun returns the run or a NOT-FOUND error.
	GetRun(ctx context.Context, id string) (*Run, error)
	// ListRuns returns runs newest first and the cursor of the next page
	// ("" on the last page).
	ListRuns(ctx context.Context, f RunFilter) ([]Run, string, error)
}

// IdempotencyKeys is the one decision on an Idempotency-Key: a claim in
// the database made for a new run's ID before its request is decided, so
// that of two requests with one key, on any nodes, one alone is decided
// and the other is answered with its run. Its methods answer UNAVAILABLE
// when the database does not.
type IdempotencyKeys interface {
	// ClaimIdempotencyKey claims principal's key for runID and digest,
	// which identifies the request (a keyed hash: it must not reveal the
	// request's secrets). It returns "" when the claim is the caller's,
	// else the run ID the key names and the digest of the request that
	// claimed it ("" for a key stored without one).
	ClaimIdempotencyKey(ctx context.Context, principal, key, runID, digest string) (held, heldDigest string, err error)
	// ReleaseIdempotencyKey gives up the claim of key for runID, whose
	// request made no run, so that a retry is decided afresh.
	ReleaseIdempotencyKey(ctx context.Context, principal, key, runID string) error
}

// Sandbox is a container sandgate manages.
type Sandbox struct {
	ContainerID   string    `json:"container_id"`
	Name          string    `json:"name"`
	Image         string    `json:"image"`
	State         string    `json:"state"`
	RunID         string    `json:"run_id"`
	Session       string    `json:"session,omitempty"`
	Task          string    `json:"task,omitempty"`
	CorrelationID string    `json:"correlation_id,omitempty"`
	Node          string    `json:"node,omitempty"`
	CreatedAt     time.Time `json:"created_at"`
	// Orphan is true when no live run of this node owns the container.
	Orphan bool `json:"orphan"`
}

// CacheVolume is one team's cache volume.
type CacheVolume struct {
	Team         string `json:"team"`
	Name         string `json:"name"`
	DockerVolume string `json:"docker_volume"`
	SizeMB       int64  `json:"size_mb"`
	// UsedBytes is how much of the volume's file system is in use; -1 when
	// it is not mounted.
	UsedBytes int64 `json:"used_bytes"`
	Mounted   bool  `json:"mounted"`
}

// VolumeAdmin lists and removes the teams' cache volumes.
type VolumeAdmin interface {
	// CacheVolumes lists every team's cache volumes.
	CacheVolumes(ctx context.Context) ([]CacheVolume, error)
	// RemoveCacheVolume removes team's volume name and what it holds:
	// NOT-FOUND when there is none, CONFLICT while a run uses it.
	RemoveCacheVolume(ctx context.Context, team, name string) error
}

// BuiltImage is an image `sandgate image build` made (the sandbox image
// or a language image of a recipe), built on or loaded into a node's
// daemon, as GET /v1/config lists it.
type BuiltImage struct {
	// ID is the image ID: the SHA-256 of its configuration, which names
	// every layer, so it pins the content as a registry digest does.
	ID string `json:"id"`
	// RepoTags are the image's names.
	RepoTags []string `json:"repo_tags"`
	// RepoDigests are registry manifest digests; empty for images built
	// or loaded here, which no registry has seen.
	RepoDigests []string `json:"repo_digests"`
	// Pins are the digest-pinned references a run spec may name
	// (repository@ID for each name, and the RepoDigests).
	Pins []string `json:"pins"`
	// Recipe names the recipe of a language image; empty for the sandbox
	// image.
	Recipe string `json:"recipe"`
	// Packages are the Debian packages of a language image, name=version.
	Packages []string `json:"packages"`
	// Size is the image's size in bytes.
	Size int64 `json:"size"`
}

// ImageCatalog lists the images sandgate built that a node's daemon holds.
type ImageCatalog interface {
	// BuiltImages returns them by name; DOCKER-UNAVAILABLE when the daemon
	// does not answer.
	BuiltImages(ctx context.Context) ([]BuiltImage, error)
}

// SandboxAdmin lists and cleans up managed containers.
type SandboxAdmin interface {
	// Sandboxes lists every container labelled sandgate.managed.
	Sandboxes(ctx context.Context) ([]Sandbox, error)
	// CleanupOrphans removes managed containers that no live run owns and
	// returns them (DOCKER-UNAVAILABLE when the daemon does not answer).
	CleanupOrphans(ctx context.Context) ([]Sandbox, error)
}
