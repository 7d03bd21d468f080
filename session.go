package sandgate

import (
	"context"
	"fmt"
	"io"
	"path"
	"strings"
	"time"
)

// A session is a long-lived sandbox: one container, created with the same
// hardening as a run's and kept alive by a keepalive command, with a
// workspace of its own at its workdir. Commands in it are runs (admitted
// with OperationExec, stored, followed, cancelled like any run), files go
// in and out of its workspace, and it ends when it is deleted, idle for
// too long, too old, or its container dies.

// SessionState is where a session is in its life.
type SessionState string

// The session states.
const (
	// SessionPendingApproval is a session the policy answered
	// require_approval: stored with no container until someone approves
	// it (then it opens) or it is denied or expires (then it ends,
	// rejected).
	SessionPendingApproval SessionState = "pending_approval"
	SessionOpen            SessionState = "open"
	SessionEnded           SessionState = "ended"
)

// SessionEndReason says why a session ended.
type SessionEndReason string

// The reasons a session ends.
const (
	SessionDeleted  SessionEndReason = "deleted"
	SessionIdle     SessionEndReason = "idle"
	SessionLifetime SessionEndReason = "lifetime"
	SessionOOM      SessionEndReason = "oom"
	// SessionExited: the container's keepalive ended by itself, or was
	// stopped through the daemon by someone else.
	SessionExited SessionEndReason = "exited"
	// SessionLost: the container vanished, or the gateway restarted and
	// could not take the session over.
	SessionLost     SessionEndReason = "lost"
	SessionError    SessionEndReason = "error"
	SessionShutdown SessionEndReason = "shutdown"
	// SessionRejected: it waited for approval and never opened (denied,
	// expired, or refused when approved).
	SessionRejected SessionEndReason = "rejected"
)

// SessionSpec is the body of POST /v1/sessions: a run spec without a
// command, with the session's limits and, for an image without `sleep`,
// the command that keeps its container alive.
type SessionSpec struct {
	RunSpec
	// IdleTimeoutSeconds ends the session after this long without a
	// command or a file operation; 0 takes the policy's default.
	IdleTimeoutSeconds int `json:"idle_timeout_seconds,omitempty"`
	// MaxLifetimeSeconds ends the session this long after its container
	// started, whatever it does; 0 takes the policy's default.
	MaxLifetimeSeconds int `json:"max_lifetime_seconds,omitempty"`
	// Keepalive is the container's main process, which must run until it
	// is stopped and do nothing else; empty takes the policy's default
	// for the image (data.sandgate.config.defaults.session_keepalive).
	Keepalive []string `json:"keepalive,omitempty"`
}

// MaxKeepaliveArgs bounds a keepalive command.
const MaxKeepaliveArgs = 16

// DecodeSessionSpec decodes a session spec as strictly as DecodeRunSpec
// does a run spec. A command, stdin, artifacts or a callback are refused:
// commands are runs of the session, files are read with GET …/files.
func DecodeSessionSpec(r io.Reader) (SessionSpec, error) {
	var spec SessionSpec
	if err := DecodeStrict(r, &spec, MaxSpecBytes); err != nil {
		return SessionSpec{}, err
	}
	switch {
	case spec.UID != nil:
		return SessionSpec{}, FieldError("uid", "unknown field")
	case spec.GID != nil:
		return SessionSpec{}, FieldError("gid", "unknown field")
	case spec.Security != nil:
		return SessionSpec{}, FieldError("security", "unknown field")
	case spec.Workspace != nil:
		return SessionSpec{}, FieldError("workspace", "unknown field: files go into a session with PUT /v1/sessions/{id}/files")
	case len(spec.Command) > 0:
		return SessionSpec{}, FieldError("command", "a session has no command: run commands with POST /v1/sessions/{id}/runs (keepalive names the container's main process)")
	case spec.Stdin != "":
		return SessionSpec{}, FieldError("stdin", "a session takes no stdin; a command in it does")
	case len(spec.Artifacts) > 0:
		return SessionSpec{}, FieldError("artifacts", "a session collects no artifacts: read files with GET /v1/sessions/{id}/files")
	case spec.CallbackURL != "":
		return SessionSpec{}, FieldError("callback_url", "a session has no completion callback")
	case spec.SessionID != "":
		return SessionSpec{}, FieldError("session_id", "is the session's own ID, set by the server")
	case spec.IdleTimeoutSeconds < 0:
		return SessionSpec{}, FieldError("idle_timeout_seconds", "must not be negative")
	case spec.MaxLifetimeSeconds < 0:
		return SessionSpec{}, FieldError("max_lifetime_seconds", "must not be negative")
	case len(spec.Keepalive) > MaxKeepaliveArgs:
		return SessionSpec{}, FieldError("keepalive", "has more than %d elements", MaxKeepaliveArgs)
	}
	for i, m := range spec.Mounts {
		if m.Resolved != "" {
			return SessionSpec{}, FieldError(fmt.Sprintf("mounts[%d].resolved", i), "unknown field")
		}
	}
	for i, a := range spec.Keepalive {
		if len(a) > MaxValueBytes {
			return SessionSpec{}, FieldError(fmt.Sprintf("keepalive[%d]", i), "is too long")
		}
	}
	if err := spec.CheckBounds(); err != nil {
		return SessionSpec{}, err
	}
	return spec, nil
}

// SessionLimits are a session's admitted idle timeout and lifetime.
type SessionLimits struct {
	IdleTimeoutSeconds int `json:"idle_timeout_seconds"`
	MaxLifetimeSeconds int `json:"max_lifetime_seconds"`
}

// NormalizeSession makes a session's spec what policy judges and the
// executor runs: the keepalive as its command (the request's, else the
// default for its image), its workdir (the workspace's default when it
// names none), and its limits with their defaults. id is the session's
// ID, set as the spec's session_id.
func NormalizeSession(in SessionSpec, id string, d Defaults) (Normalized, SessionLimits, error) {
	d = d.merge()
	rs := in.RunSpec
	rs.SessionID = id
	if err := d.resolveLanguage(&rs); err != nil {
		return Normalized{}, SessionLimits{}, err
	}
	if rs.Image == "" {
		rs.Image = d.Image
	}
	rs.Command = in.Keepalive
	if len(rs.Command) == 0 {
		rs.Command = keepaliveFor(d.SessionKeepalive, rs.Image)
	}
	if len(rs.Command) == 0 {
		return Normalized{}, SessionLimits{}, FieldError("keepalive", "is required: the policy names no keepalive command for image %s", rs.Image)
	}
	if rs.Workdir == "" {
		rs.Workdir = d.WorkspaceWorkdir
	}
	n, err := Normalize(rs, d)
	if err != nil {
		if e, ok := err.(*Error); ok && e.Field == "command" {
			e.Field = "keepalive"
		}
		return Normalized{}, SessionLimits{}, err
	}
	lim := SessionLimits{IdleTimeoutSeconds: in.IdleTimeoutSeconds, MaxLifetimeSeconds: in.MaxLifetimeSeconds}
	if lim.IdleTimeoutSeconds == 0 {
		lim.IdleTimeoutSeconds = d.SessionIdleTimeoutSeconds
	}
	if lim.MaxLifetimeSeconds == 0 {
		lim.MaxLifetimeSeconds = d.SessionMaxLifetimeSeconds
	}
	return n, lim, nil
}

// keepaliveFor is the keepalive the data names for image: by the image as
// written, then without its digest, then by its repository alone (so a
// repository's entry covers its tags and digests), else "*".
func keepaliveFor(m map[string][]string, image string) []string {
	name, _, _ := strings.Cut(image, "@")
	repo := name
	if i := strings.LastIndexByte(name, ':'); i > strings.LastIndexByte(name, '/') {
		repo = name[:i]
	}
	for _, k := range []string{image, name, repo, "*"} {
		if c := m[k]; len(c) > 0 {
			return c
		}
	}
	return nil
}

// ExecSpec is the body of POST /v1/sessions/{id}/runs: a command in a
// session. Env is added to the session's environment, which the
// container has; the other fields replace the session's for this command.
type ExecSpec struct {
	Command          []string          `json:"command"`
	Env              map[string]string `json:"env,omitempty"`
	Stdin            string            `json:"stdin,omitempty"`
	Workdir          string            `json:"workdir,omitempty"`
	TimeoutSeconds   int               `json:"timeout_seconds,omitempty"`
	OutputLimitBytes int64             `json:"output_limit_bytes,omitempty"`
	TaskID           string            `json:"task_id,omitempty"`
}

// DecodeExecSpec decodes a command of a session strictly.
func DecodeExecSpec(r io.Reader) (ExecSpec, error) {
	var x ExecSpec
	if err := DecodeStrict(r, &x, MaxSpecBytes); err != nil {
		return ExecSpec{}, err
	}
	if len(x.Command) == 0 {
		return ExecSpec{}, FieldError("command", "is required")
	}
	if x.TimeoutSeconds < 0 {
		return ExecSpec{}, FieldError("timeout_seconds", "must not be negative")
	}
	if x.OutputLimitBytes < 0 {
		return ExecSpec{}, FieldError("output_limit_bytes", "must not be negative")
	}
	probe := RunSpec{Command: x.Command, Env: x.Env, Workdir: x.Workdir, TaskID: x.TaskID}
	if err := probe.CheckBounds(); err != nil {
		return ExecSpec{}, err
	}
	return x, nil
}

// ExecRunSpec is the spec of a command in a session whose admitted spec
// is session: the session's spec with the command's fields, for
// Normalize and then policy (OperationExec). The result has no files: they
// were written when the session was made.
func ExecRunSpec(session RunSpec, x ExecSpec) RunSpec {
	rs := session.clone()
	rs.UID, rs.GID, rs.Security = nil, nil, nil
	for i := range rs.Mounts {
		rs.Mounts[i].Resolved = ""
	}
	rs.Files = nil
	rs.Command = append([]string(nil), x.Command...)
	// The container has the session's environment already; the command's
	// own is what it adds.
	rs.Env = x.Env
	rs.Stdin = x.Stdin
	if x.Workdir != "" {
		rs.Workdir = x.Workdir
		if !path.IsAbs(x.Workdir) {
			rs.Workdir = path.Join(session.Workdir, x.Workdir)
		}
	}
	if x.TimeoutSeconds > 0 {
		rs.TimeoutSeconds = x.TimeoutSeconds
	}
	if x.OutputLimitBytes > 0 {
		rs.OutputLimitBytes = x.OutputLimitBytes
	}
	rs.TaskID = x.TaskID
	return rs
}

// Session is a session and everything known about it; it is what
// GET /v1/sessions/{id} answers.
type Session struct {
	ID             string `json:"id"`
	CorrelationID  string `json:"correlation_id"`
	DecisionID     string `json:"decision_id"`
	PolicyRevision string `json:"policy_revision,omitempty"`
	Principal      string `json:"principal"`
	Team           string `json:"team"`
	// SignIn is how the principal signed in, as the trail keeps it.
	SignIn *SignIn      `json:"sign_in,omitempty"`
	Node   string       `json:"node,omitempty"`
	State  SessionState `json:"state"`
	// ApprovalID is the approval the session waited for, if it did.
	ApprovalID string `json:"approval_id,omitempty"`
	// EndReason says why an ended session ended.
	EndReason    SessionEndReason `json:"end_reason,omitempty"`
	Error        *ErrorInfo       `json:"error"`
	ContainerID  string           `json:"container_id,omitempty"`
	Limits       SessionLimits    `json:"limits"`
	CreatedAt    time.Time        `json:"created_at"`
	StartedAt    *time.Time       `json:"started_at"`
	LastActiveAt time.Time        `json:"last_active_at"`
	EndedAt      *time.Time       `json:"ended_at"`
	// Runs counts the commands run in the session.
	Runs int64 `json:"runs"`
	// Egress is what an ended session with network egress did through
	// the egress proxy, all its commands together (since the gateway
	// last took it over, after a restart).
	Egress *EgressSummary `json:"egress,omitempty"`
	// Spec is the admitted spec, the keepalive as its command, secrets as
	// keyed hashes.
	Spec     RunSpec  `json:"spec"`
	Warnings []string `json:"warnings"`
}

// SessionFilter selects sessions for listing.
type SessionFilter struct {
	Team  string
	Node  string
	State SessionState
	Limit int
}

// SessionStore keeps sessions.
type SessionStore interface {
	// CreateSession inserts a new session.
	CreateSession(ctx context.Context, s *Session) error
	// UpdateSession saves the session's state and times.
	UpdateSession(ctx context.Context, s *Session) error
	// GetSession returns the session or NOT-FOUND.
	GetSession(ctx context.Context, id string) (*Session, error)
	// ListSessions returns sessions newest first.
	ListSessions(ctx context.Context, f SessionFilter) ([]Session, error)
}

// FileUpload is what PUT /v1/sessions/{id}/files writes: one file, or an
// archive unpacked at Path.
type FileUpload struct {
	// Path is relative to the session's workspace.
	Path string
	// Format is FileFormatFile for one file, else "tar", "tar.gz" or "zip".
	Format string
	// Body is an archive of Format, Size bytes long; a single file comes
	// packed as a tar of one entry, with Format FileFormatFile.
	Body io.ReaderAt
	Size int64
}

// The kinds of a file operation.
const (
	FileFormatFile = "file"
	FileFormatTar  = "tar"
)

// FileDigest is what a file operation wrote or read.
type FileDigest struct {
	Path    string `json:"path"`
	Kind    string `json:"kind"`
	Bytes   int64  `json:"bytes"`
	SHA256  string `json:"sha256"`
	Entries int    `json:"entries,omitempty"`
}

// SessionExecutor is an Executor that keeps sessions: a session's
// container is a job whose Execute lasts as long as the session (it ends
// it when its context is cancelled or its lifetime passes); commands run
// in it through Exec.
type SessionExecutor interface {
	// Exec runs job's command in the container of the open session
	// sessionID (a job Execute started with SessionContainer set) and
	// reports its end like Execute. Cancel(job.RunID) stops the command.
	// CONFLICT when the session is not open on this node.
	Exec(ctx context.Context, sessionID string, job Job) (Result, error)
	// PutFiles writes a file or unpacks an archive into the session's
	// workspace, as its user, with the workspace package's checks
	// (INVALID-REQUEST or TOO-LARGE naming the entry).
	PutFiles(ctx context.Context, sessionID string, spec Normalized, up FileUpload) (FileDigest, error)
	// GetFiles writes the file at path of the session's workspace to w,
	// or the directory at path as a tar; it never follows a symlink.
	// begin is called with the kind ("file" or "tar") before the first
	// byte. NOT-FOUND when there is no such path.
	GetFiles(ctx context.Context, sessionID, path string, w io.Writer, begin func(kind string)) (FileDigest, error)
}
