package sandgate

import (
	"context"
	"errors"
	"slices"
	"time"
)

// EventType names an audit event.
type EventType string

// The audit event types.
const (
	EventRunRequested       EventType = "run.requested"
	EventAdmissionAllowed   EventType = "admission.allowed"
	EventAdmissionDenied    EventType = "admission.denied"
	EventAdmissionReviewed  EventType = "admission.reviewed"
	EventImageResolved      EventType = "image.resolved"
	EventImageUnavailable   EventType = "image.unavailable"
	EventContainerCreated   EventType = "container.created"
	EventContainerStarted   EventType = "container.started"
	EventContainerExited    EventType = "container.exited"
	EventContainerOOMKilled EventType = "container.oom_killed"
	EventRunTimedOut        EventType = "run.timed_out"
	EventRunCancelled       EventType = "run.cancelled"
	EventRunFailed          EventType = "run.failed"
	EventRunLost            EventType = "run.lost"
	EventContainerRemoved   EventType = "container.removed"
	EventExecutorRetry      EventType = "executor.retry"
	EventOrphanRemoved      EventType = "orphan.removed"
	EventPolicyLoaded       EventType = "policy.loaded"
	EventPolicyLoadFailed   EventType = "policy.load_failed"
	EventAuthDenied         EventType = "auth.denied"
	EventAuditExported      EventType = "audit.exported"
	EventVolumeRemoved      EventType = "volume.removed"
	EventAuditArchived      EventType = "audit.archived"
	EventRetentionApplied   EventType = "retention.applied"
	// EventAuditKeyRegistered records a node's first checkpoint key, when
	// the node first uses it; EventAuditKeyRotated a node's new key, with
	// the key it replaces and that key's endorsement.
	EventAuditKeyRegistered EventType = "audit.key_registered"
	EventAuditKeyRotated    EventType = "audit.key_rotated"
	// EventAuditKeyEndorsed records a cluster root key's endorsement of a
	// node's checkpoint key, which the node was configured with.
	EventAuditKeyEndorsed EventType = "audit.key_endorsed"
	// EventArtifactsCollected lists the files collected from a run's
	// workspace after its command ended: path, size and SHA-256 of each.
	EventArtifactsCollected EventType = "artifacts.collected"
	// EventCallbackDelivered records that a run's completion callback was
	// answered 2xx; EventCallbackFailed that it was given up (refused,
	// out of attempts, or cut short by shutdown).
	EventCallbackDelivered EventType = "callback.delivered"
	EventCallbackFailed    EventType = "callback.failed"
	// EventPolicyReplayed records a replay of past admission decisions
	// against a candidate bundle: its revision, the filters and the
	// counts of the decisions that would change.
	EventPolicyReplayed EventType = "policy.replayed"
	// EventEgressAllowed and EventEgressDenied record the connections of
	// egress runs through the proxy: the first to each destination
	// singly, the repeats aggregated with counts (docs/egress.md).
	EventEgressAllowed EventType = "egress.allowed"
	EventEgressDenied  EventType = "egress.denied"
	// EventSessionCreated records that a session's container runs and
	// takes commands; EventSessionEnded that it ended, with the reason
	// (deleted, idle, lifetime, oom, exited, lost, error, shutdown).
	EventSessionCreated EventType = "session.created"
	EventSessionEnded   EventType = "session.ended"
	// EventSessionFilePut and EventSessionFileGet record a file or an
	// archive written into or read out of a session's workspace, with its
	// path, size and SHA-256.
	EventSessionFilePut EventType = "session.file_put"
	EventSessionFileGet EventType = "session.file_get"
	// EventAuditWitnessAlarm records a witness's alarm, posted with its
	// signature: a checkpoint that does not extend the one it saw (a
	// rewritten or forked history), a smaller tree, or a note not signed
	// by the gateway's key.
	EventAuditWitnessAlarm EventType = "audit.witness_alarm"
	// EventNodeTakenOver records that a survivor took over a node whose
	// heartbeat lapsed: how many of its runs it adopted and how many it
	// recorded lost, and whether the dead node's Docker daemon answered.
	EventNodeTakenOver EventType = "node.taken_over"
	// EventAuditChainClosed records that a survivor closed a dead node's
	// chain with a final checkpoint signed by the survivor's key: the
	// chain, its node, the head it signed, and the signing node and key.
	EventAuditChainClosed EventType = "audit.chain_closed"
	// EventApprovalRequested records a request the policy answered
	// require_approval, stored with no container, with the reasons and
	// when the approval expires; EventApprovalGranted and
	// EventApprovalDenied who decided it and their comment;
	// EventApprovalExpired that nobody did in time. All four carry the
	// request's correlation ID.
	EventApprovalRequested EventType = "approval.requested"
	EventApprovalGranted   EventType = "approval.granted"
	EventApprovalDenied    EventType = "approval.denied"
	EventApprovalExpired   EventType = "approval.expired"
	// EventTerminalOpened and EventTerminalClosed record a terminal on a
	// session (GET /v1/sessions/{id}/terminal): its opening, and its end
	// with the bytes each way and the SHA-256 of its transcript.
	EventTerminalOpened EventType = "terminal.opened"
	EventTerminalClosed EventType = "terminal.closed"
	// EventPortConnection records one connection to a session's port
	// through the gateway, at its end: the bytes each way, its duration,
	// and an HTTP request's method, path and status.
	EventPortConnection EventType = "port.connection"
	// EventSecretSet records a secret's first version (or its first after
	// a delete), EventSecretRotated a new version of a stored one,
	// EventSecretDeleted its removal: by whom, the name, the version and
	// the value's keyed hash, never the value.
	EventSecretSet     EventType = "secret.set"
	EventSecretRotated EventType = "secret.rotated"
	EventSecretDeleted EventType = "secret.deleted"
	// EventSecretUsed records that the egress proxy wrote a run's secret
	// into its requests to a destination; EventSecretMisdirected a
	// request refused for carrying a secret's placeholder where the
	// secret may not go. Both are aggregated per destination like the
	// egress events.
	EventSecretUsed        EventType = "secret.used"
	EventSecretMisdirected EventType = "secret.misdirected"
	// EventImagePullProgress records how far a run's image pull has come
	// (layers done of layers seen, bytes fetched), at most one a second
	// per pull and once at its end.
	EventImagePullProgress EventType = "image.pull_progress"
	// EventRunCPUThrottled records that a run spent more than the
	// node's set share of its wall time throttled by its CPU limit.
	EventRunCPUThrottled EventType = "run.cpu_throttled"
)

// EventTypes are every type of event sandgate records, for filters that
// refuse a type no event can have.
var EventTypes = []EventType{
	EventRunRequested, EventAdmissionAllowed, EventAdmissionDenied, EventAdmissionReviewed,
	EventImageResolved, EventImageUnavailable, EventContainerCreated, EventContainerStarted,
	EventContainerExited, EventContainerOOMKilled, EventRunTimedOut, EventRunCancelled,
	EventRunFailed, EventRunLost, EventContainerRemoved, EventExecutorRetry, EventOrphanRemoved,
	EventPolicyLoaded, EventPolicyLoadFailed, EventAuthDenied, EventAuditExported, EventVolumeRemoved,
	EventAuditArchived, EventRetentionApplied, EventAuditKeyRegistered, EventAuditKeyRotated, EventAuditKeyEndorsed,
	EventArtifactsCollected,
	EventCallbackDelivered, EventCallbackFailed,
	EventPolicyReplayed,
	EventEgressAllowed, EventEgressDenied,
	EventSessionCreated, EventSessionEnded, EventSessionFilePut, EventSessionFileGet,
	EventAuditWitnessAlarm,
	EventNodeTakenOver, EventAuditChainClosed,
	EventApprovalRequested, EventApprovalGranted, EventApprovalDenied, EventApprovalExpired,
	EventTerminalOpened, EventTerminalClosed, EventPortConnection,
	EventSecretSet, EventSecretRotated, EventSecretDeleted, EventSecretUsed, EventSecretMisdirected,
	EventImagePullProgress, EventRunCPUThrottled,
}

// Known reports whether t is one of EventTypes.
func (t EventType) Known() bool { return slices.Contains(EventTypes, t) }

// Event is one entry of the audit trail as its producers see it. The audit
// writer adds the chain fields (chain, seq, hashes) and recorded_at.
type Event struct {
	// ID is the event's UUIDv7. Producers may leave it empty; the writer
	// then assigns one. A retried delivery reuses it.
	ID             string         `json:"event_id"`
	Type           EventType      `json:"type"`
	Time           time.Time      `json:"event_time"`
	Outcome        string         `json:"outcome,omitempty"`
	CorrelationID  string         `json:"correlation_id,omitempty"`
	RunID          string         `json:"run_id,omitempty"`
	DecisionID     string         `json:"decision_id,omitempty"`
	ContainerID    string         `json:"container_id,omitempty"`
	Actor          string         `json:"actor,omitempty"`
	Team           string         `json:"team,omitempty"`
	Node           string         `json:"node,omitempty"`
	PolicyRevision string         `json:"policy_revision,omitempty"`
	ExitCode       *int           `json:"exit_code,omitempty"`
	Payload        map[string]any `json:"payload,omitempty"`
}

// EventSink receives lifecycle events. Emit never blocks for long and never
// loses an event: when the store is away the event is spooled locally.
type EventSink interface {
	Emit(ev Event)
}

// EventSinkFunc adapts a function to EventSink.
type EventSinkFunc func(Event)

// Emit calls f.
func (f EventSinkFunc) Emit(ev Event) { f(ev) }

// Recorder is the audit trail as the gateway uses it.
type Recorder interface {
	EventSink
	// Queue queues ev for the next group commit like Emit, but waits while
	// the trail is too far behind, and returns AUDIT-UNAVAILABLE if ctx
	// ends first; the event is then not queued. A producer that answers
	// once its event is queued (a review) so never gets ahead of the
	// trail by more than a bounded backlog.
	Queue(ctx context.Context, ev Event) error
	// Record commits the events durably (synchronous commit) before it
	// returns, in order. It returns AUDIT-UNAVAILABLE when it cannot; the
	// caller must then not act on what the events describe. When the
	// connection broke with the commit in flight (the database crashed
	// or failed over), the error also matches ErrCommitUncertain: the
	// events may be in the trail, or reach it later, so the caller
	// records that it did not act.
	Record(ctx context.Context, events ...Event) error
}

// ErrCommitUncertain marks a Record that failed with its commit's outcome
// unknown: the events are kept as sealed and delivered when the database
// answers again, unless they had landed already.
var ErrCommitUncertain = errors.New("the commit's outcome is unknown; the events may be in the trail")
