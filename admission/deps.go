package admission

import (
	"context"
	"io"
	"os"

	"github.com/sandgate/sandgate"
)

// The narrow interfaces the gate drives, implemented by the gateway: its
// live state, its executor side, its spooling of uploads, its cluster's
// counts and its metrics.

// Secrets are the stored secrets, as far as a policy input says of them.
type Secrets interface {
	// States are the stored secrets among names, with their versions.
	// UNAVAILABLE when the store cannot answer.
	States(ctx context.Context, names []string) (map[string]sandgate.SecretState, error)
}

// Live is what this node knows of the runs and sessions it executes.
type Live interface {
	// Run is the run as it stands while it executes on this node (state,
	// output so far); nil when it does not execute here.
	Run(id string) *sandgate.Run
	// Session is the session open on this node; nil when none is.
	Session(id string) *LiveSession
}

// LiveSession is a session open on this node: as it stands, and the
// admitted spec it runs (secrets in clear), which its commands start from.
type LiveSession struct {
	Session sandgate.Session
	Spec    sandgate.Normalized
}

// Admitted is a run the gate admitted, handed to the executor: the run as
// it is stored (secrets as keyed hashes), the admitted spec it runs (in
// clear), and what its decision holds it to.
type Admitted struct {
	Run         sandgate.Run
	Spec        sandgate.Normalized
	Enforcement sandgate.Enforcement
	// TeamConcurrency is how many of the team's runs may hold a
	// container at once (its limits as the node's share bounds them).
	TeamConcurrency int
	// Session is the session a command runs in; "" for a run.
	Session string
	// Workspace is the run's checked workspace archive, nil for none; it
	// is the runner's from now on.
	Workspace *Upload
	// Release gives back what the run holds of its team's bounds (and its
	// workspace's bytes); the runner calls it once the run has ended.
	Release func()
}

// AdmittedSession is a session the gate admitted, stored open.
type AdmittedSession struct {
	Session     sandgate.Session
	Spec        sandgate.Normalized
	Enforcement sandgate.Enforcement
	// TeamConcurrency is how many of the team's sessions may hold a
	// session place at once (its limits as the node bounds them).
	TeamConcurrency int
	// Release gives back what the session holds of its team's bounds; the
	// runner calls it once the session has ended.
	Release func()
}

// Runner hands admitted work to the executor and acts on what executes
// on this node. Its errors are the executor's codes.
type Runner interface {
	// Start starts an admitted run (or a command in its session, when
	// a.Session is set) in its own goroutine and returns at once.
	Start(a Admitted)
	// Open opens an admitted session and waits a while for its
	// container to run; it returns the session as it then stands.
	Open(ctx context.Context, a AdmittedSession) (*sandgate.Session, error)
	// Cancel stops a run executing on this node and waits a little for
	// its end; CONFLICT when it does not execute here.
	Cancel(ctx context.Context, run *sandgate.Run) (*sandgate.Run, error)
	// End ends a session open on this node and waits a little for its
	// container's removal.
	End(ctx context.Context, id string) (*sandgate.Session, error)
	// PutFiles writes an upload into the workspace of a session open on
	// this node.
	PutFiles(ctx context.Context, id string, up sandgate.FileUpload) (sandgate.FileDigest, error)
	// GetFiles streams a file or a directory of a session open on this
	// node to the writer w makes once the kind ("file" or "tar") is known.
	GetFiles(ctx context.Context, id, path string, w func(kind string) (io.Writer, error)) (sandgate.FileDigest, error)
}

// Workspaces checks workspace input and spools uploads to the gateway's
// disk (package workspace's checks).
type Workspaces interface {
	// CheckSpec refuses, naming it, an artifact pattern that is not a
	// valid glob and an inline file the workspace would refuse to write.
	CheckSpec(spec sandgate.RunSpec) error
	// Archive writes a run's workspace archive from r to a file and
	// checks every entry (INVALID-REQUEST or TOO-LARGE naming it).
	Archive(r io.Reader) (*Upload, error)
	// Files writes what PUT /v1/sessions/{id}/files sends from r: an
	// archive of format as it is, or one file packed as a tar of the one
	// entry path with mode (format sandgate.FileFormatFile).
	Files(r io.Reader, path, format string, mode int64) (*Upload, error)
}

// Upload is a body spooled to the gateway's disk.
type Upload struct {
	Path string
	Size int64
	// SHA256 is a single file's content digest (the one the trail
	// records for it).
	SHA256 string
	// Archive is a workspace archive's summary.
	Archive *sandgate.WorkspaceArchive
}

// LocalPath is the upload's file, "" for none; nil-safe.
func (u *Upload) LocalPath() string {
	if u == nil {
		return ""
	}
	return u.Path
}

// Remove deletes the upload's file; nil-safe.
func (u *Upload) Remove() {
	if u != nil && u.Path != "" {
		os.Remove(u.Path)
	}
}

// Slots counts runs against their teams' limits across a cluster
// (package runstore).
type Slots interface {
	// ReserveSlot counts a run against its team's limits; ok is false
	// when it does not fit.
	ReserveSlot(ctx context.Context, slot sandgate.Slot, l sandgate.SlotLimits) (sandgate.SlotUse, bool, error)
	// ReleaseSlot gives a run's slot back.
	ReleaseSlot(ctx context.Context, runID string) error
}

// SettingsReporter is implemented by an Admitter that puts settings of
// its own in every policy input (the policy engine: its mount roots
// resolved). The input, and so the record, then carries those.
type SettingsReporter interface {
	Settings() sandgate.Settings
}

// Observer is told what the gate decided and refused (the gateway's
// metrics).
type Observer interface {
	// Decided counts a policy decision of an operation.
	Decided(op sandgate.Operation, d sandgate.Decision)
	// TeamLimited counts a request refused for its team's limits.
	TeamLimited(team string)
}

type nopObserver struct{}

func (nopObserver) Decided(sandgate.Operation, sandgate.Decision) {}
func (nopObserver) TeamLimited(string)                            {}
