package sandgate

import "time"

// The constructors below are the one place each event type is built: its
// type, its outcome and which columns it fills. Producers give who and
// what the event is about (a Subject), when, and the payload of details;
// the audit writer adds the chain fields. A new event type gets a
// constant in event.go and a constructor here (event_test.go holds the
// two together).

// Subject is who and what an event is about: the columns every event of
// a run, a session or a request fills the same way.
type Subject struct {
	CorrelationID string
	RunID         string
	DecisionID    string
	ContainerID   string
	Actor         string
	// SignIn is how the actor signed in, as the trail keeps it (keyed
	// hashes where the site masks them); every event of a request, and
	// of the run or session it made, carries it in its payload's "actor".
	SignIn         *SignIn
	Team           string
	Node           string
	PolicyRevision string
}

// JobSubject is the subject of the events of job on node: its run, its
// decision and who asked for it.
func JobSubject(job Job, node string) Subject {
	return Subject{CorrelationID: job.CorrelationID, RunID: job.RunID, DecisionID: job.DecisionID,
		Actor: job.Principal, SignIn: job.SignIn, Team: job.Team, Node: node, PolicyRevision: job.PolicyRevision}
}

// RunSubject is the subject of the events of a stored run on node.
func RunSubject(r Run, node string) Subject {
	return Subject{CorrelationID: r.CorrelationID, RunID: r.ID, DecisionID: r.DecisionID, ContainerID: r.ContainerID,
		Actor: r.Principal, SignIn: r.SignIn, Team: r.Team, Node: node, PolicyRevision: r.PolicyRevision}
}

// SessionSubject is the subject of the events of a session on node: its
// ID is the run ID of its container's events.
func SessionSubject(s Session, node string) Subject {
	return Subject{CorrelationID: s.CorrelationID, RunID: s.ID, DecisionID: s.DecisionID, ContainerID: s.ContainerID,
		Actor: s.Principal, SignIn: s.SignIn, Team: s.Team, Node: node, PolicyRevision: s.PolicyRevision}
}

// PrincipalSubject is the subject of a request of p's that is about no
// run: an export, a replay, a refusal.
func PrincipalSubject(p Principal, correlationID, node string) Subject {
	return Subject{CorrelationID: correlationID, Actor: p.Name, Team: p.Team, Node: node}
}

// WithActor is payload with its "actor": the actor's name and how they
// signed in, as the trail keeps it; payload itself when there is no
// sign-in to add. The caller's map is not changed: it may be shared by
// events. Every event of a request, and of the run or session it made,
// names the person this way, whichever part emits it.
func WithActor(payload map[string]any, actor string, in *SignIn) map[string]any {
	if in == nil || actor == "" {
		return payload
	}
	out := make(map[string]any, len(payload)+1)
	for k, v := range payload {
		out[k] = v
	}
	out["actor"] = in.Doc(actor)
	return out
}

// By is s with the actor's sign-in (as the trail keeps it); an empty
// method leaves s as it is.
func (s Subject) By(in SignIn) Subject {
	if in.Method != "" {
		s.SignIn = &in
	}
	return s
}

// NodeSubject is the subject of what a node does of its own accord.
func NodeSubject(node string) Subject { return Subject{Node: node} }

func (s Subject) event(t EventType, at time.Time, outcome string, payload map[string]any) Event {
	payload = WithActor(payload, s.Actor, s.SignIn)
	return Event{Type: t, Time: at, Outcome: outcome, CorrelationID: s.CorrelationID, RunID: s.RunID,
		DecisionID: s.DecisionID, ContainerID: s.ContainerID, Actor: s.Actor, Team: s.Team, Node: s.Node,
		PolicyRevision: s.PolicyRevision, Payload: payload}
}

// exit is an event that carries how a command ended: the result's outcome
// and exit code.
func (s Subject) exit(t EventType, at time.Time, res Result, payload map[string]any) Event {
	ev := s.event(t, at, string(res.Outcome), payload)
	if res.ExitCode != nil {
		c := *res.ExitCode
		ev.ExitCode = &c
	}
	return ev
}

// NewRunRequested records a request that is being decided, in the shape of
// its DecisionRecord (record.Payload).
func NewRunRequested(s Subject, at time.Time, record map[string]any) Event {
	return s.event(EventRunRequested, at, "requested", record)
}

// NewAdmissionAllowed records an allowing decision (DecisionPayload, with
// the admitted spec).
func NewAdmissionAllowed(s Subject, at time.Time, decision map[string]any) Event {
	return s.event(EventAdmissionAllowed, at, "allowed", decision)
}

// NewAdmissionDenied records a denying decision (DecisionPayload).
func NewAdmissionDenied(s Subject, at time.Time, decision map[string]any) Event {
	return s.event(EventAdmissionDenied, at, "denied", decision)
}

// NewAdmissionReviewed records a review: the decision and its record in one
// payload.
func NewAdmissionReviewed(s Subject, at time.Time, allow bool, payload map[string]any) Event {
	outcome := "denied"
	if allow {
		outcome = "allowed"
	}
	return s.event(EventAdmissionReviewed, at, outcome, payload)
}

// NewImageResolved records the image a run's container is made from.
func NewImageResolved(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventImageResolved, at, "", payload)
}

// NewImagePullProgress records how far a run's image pull has come.
func NewImagePullProgress(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventImagePullProgress, at, "", payload)
}

// NewRunCPUThrottled records a run that spent more than the node's set
// share of its time throttled by its CPU limit.
func NewRunCPUThrottled(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventRunCPUThrottled, at, "", payload)
}

// NewImageUnavailable records an image that is not present and may not be
// pulled.
func NewImageUnavailable(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventImageUnavailable, at, "", payload)
}

// NewContainerCreated records a container made for a run.
func NewContainerCreated(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventContainerCreated, at, "", payload)
}

// NewContainerStarted records a run's command started.
func NewContainerStarted(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventContainerStarted, at, "", payload)
}

// NewContainerExited records a command that exited by itself, with its exit
// code.
func NewContainerExited(s Subject, at time.Time, res Result, payload map[string]any) Event {
	return s.exit(EventContainerExited, at, res, payload)
}

// NewContainerOOMKilled records a container the kernel killed for memory.
func NewContainerOOMKilled(s Subject, at time.Time, res Result, payload map[string]any) Event {
	return s.exit(EventContainerOOMKilled, at, res, payload)
}

// NewRunTimedOut records a run stopped at its timeout.
func NewRunTimedOut(s Subject, at time.Time, res Result, payload map[string]any) Event {
	return s.exit(EventRunTimedOut, at, res, payload)
}

// NewRunCancelled records a run stopped because it was cancelled; res is the
// zero Result for one cancelled before it started.
func NewRunCancelled(s Subject, at time.Time, res Result, payload map[string]any) Event {
	return s.exit(EventRunCancelled, at, res, payload)
}

// NewRunFailed records a run that failed or never ran: the executor's
// failures and the gateway's refusals after an admission was recorded
// (the admission's commit uncertain, the run not stored). errMsg says
// why; payload, which may be nil, adds details.
func NewRunFailed(s Subject, at time.Time, res Result, errMsg string, payload map[string]any) Event {
	if payload == nil {
		payload = map[string]any{}
	}
	if errMsg != "" {
		payload["error"] = errMsg
	}
	if res.Outcome == "" {
		res.Outcome = OutcomeError
	}
	return s.exit(EventRunFailed, at, res, payload)
}

// NewRunLost records a run whose container or process could not be
// followed to its end.
func NewRunLost(s Subject, at time.Time, res Result, payload map[string]any) Event {
	if res.Outcome == "" {
		res.Outcome = OutcomeLost
	}
	return s.exit(EventRunLost, at, res, payload)
}

// NewContainerRemoved records a run's container removed.
func NewContainerRemoved(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventContainerRemoved, at, "", payload)
}

// NewExecutorRetry records a Docker call retried after a transient error.
func NewExecutorRetry(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventExecutorRetry, at, "", payload)
}

// NewOrphanRemoved records a managed container no live run owned, removed.
func NewOrphanRemoved(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventOrphanRemoved, at, "", payload)
}

// NewPolicyLoaded records a policy bundle put in force.
func NewPolicyLoaded(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventPolicyLoaded, at, "success", payload)
}

// NewPolicyLoadFailed records a policy bundle refused, the old one kept.
func NewPolicyLoadFailed(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventPolicyLoadFailed, at, "failure", payload)
}

// NewAuthDenied records a request refused for its token or its role; reason
// is "unauthenticated" or "forbidden".
func NewAuthDenied(s Subject, at time.Time, reason string, payload map[string]any) Event {
	return s.event(EventAuthDenied, at, reason, payload)
}

// NewAuditExported records an export of the trail, before it streams.
func NewAuditExported(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventAuditExported, at, "started", payload)
}

// NewVolumeRemoved records a team's cache volume removed by an admin.
func NewVolumeRemoved(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventVolumeRemoved, at, "removed", payload)
}

// NewAuditArchived records a month of the trail archived.
func NewAuditArchived(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventAuditArchived, at, "archived", payload)
}

// NewRetentionApplied records a month of the trail dropped by retention.
func NewRetentionApplied(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventRetentionApplied, at, "dropped", payload)
}

// NewAuditKeyRegistered records a node's first checkpoint key.
func NewAuditKeyRegistered(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventAuditKeyRegistered, at, "registered", payload)
}

// NewAuditKeyRotated records a node's new checkpoint key.
func NewAuditKeyRotated(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventAuditKeyRotated, at, "rotated", payload)
}

// NewAuditKeyEndorsed records a cluster root's endorsement of a node's
// checkpoint key.
func NewAuditKeyEndorsed(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventAuditKeyEndorsed, at, "endorsed", payload)
}

// NewArtifactsCollected records the files collected from a run's workspace.
func NewArtifactsCollected(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventArtifactsCollected, at, "", payload)
}

// NewCallbackDelivered records a completion callback answered 2xx.
func NewCallbackDelivered(s Subject, at time.Time, outcome string, payload map[string]any) Event {
	return s.event(EventCallbackDelivered, at, outcome, payload)
}

// NewCallbackFailed records a completion callback given up.
func NewCallbackFailed(s Subject, at time.Time, outcome string, payload map[string]any) Event {
	return s.event(EventCallbackFailed, at, outcome, payload)
}

// NewPolicyReplayed records a replay against a candidate bundle; outcome is
// "success" or "refused".
func NewPolicyReplayed(s Subject, at time.Time, outcome string, payload map[string]any) Event {
	return s.event(EventPolicyReplayed, at, outcome, payload)
}

// NewEgressAllowed records connections of an egress run let through.
func NewEgressAllowed(s Subject, at time.Time, outcome string, payload map[string]any) Event {
	return s.event(EventEgressAllowed, at, outcome, payload)
}

// NewEgressDenied records connections of an egress run refused.
func NewEgressDenied(s Subject, at time.Time, outcome string, payload map[string]any) Event {
	return s.event(EventEgressDenied, at, outcome, payload)
}

// NewSessionCreated records a session's container running and taking
// commands.
func NewSessionCreated(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventSessionCreated, at, "open", payload)
}

// NewSessionEnded records a session's end with its reason.
func NewSessionEnded(s Subject, at time.Time, reason SessionEndReason, payload map[string]any) Event {
	if payload == nil {
		payload = map[string]any{}
	}
	payload["reason"] = string(reason)
	return s.event(EventSessionEnded, at, string(reason), payload)
}

// NewSessionFilePut records a file or an archive written into a session,
// or refused ("done" or "refused").
func NewSessionFilePut(s Subject, at time.Time, outcome string, payload map[string]any) Event {
	return s.event(EventSessionFilePut, at, outcome, payload)
}

// NewSessionFileGet records a file or a directory read out of a session, or
// refused.
func NewSessionFileGet(s Subject, at time.Time, outcome string, payload map[string]any) Event {
	return s.event(EventSessionFileGet, at, outcome, payload)
}

// NewAuditWitnessAlarm records a witness's alarm; kind is its outcome.
func NewAuditWitnessAlarm(s Subject, at time.Time, kind string, payload map[string]any) Event {
	return s.event(EventAuditWitnessAlarm, at, kind, payload)
}

// NewNodeTakenOver records a survivor's takeover of a dead node.
func NewNodeTakenOver(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventNodeTakenOver, at, "taken_over", payload)
}

// NewAuditChainClosed records a dead node's chain closed by a survivor.
func NewAuditChainClosed(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventAuditChainClosed, at, "closed", payload)
}

// NewApprovalRequested records a request stored pending_approval: the
// approval's ID, the reasons, the decision's payload and the expiry.
func NewApprovalRequested(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventApprovalRequested, at, "pending", payload)
}

// NewApprovalGranted records an approval granted; s's actor is the
// approver.
func NewApprovalGranted(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventApprovalGranted, at, "granted", payload)
}

// NewApprovalDenied records an approval denied; s's actor is the
// approver who denied it.
func NewApprovalDenied(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventApprovalDenied, at, "denied", payload)
}

// NewApprovalExpired records an approval nobody decided in time.
func NewApprovalExpired(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventApprovalExpired, at, "expired", payload)
}

// NewTerminalOpened records a terminal opened on a session.
func NewTerminalOpened(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventTerminalOpened, at, "open", payload)
}

// NewTerminalClosed records a terminal's end; outcome is "exited" (its
// program ended), "closed" (its client left) or "error".
func NewTerminalClosed(s Subject, at time.Time, outcome string, payload map[string]any) Event {
	return s.event(EventTerminalClosed, at, outcome, payload)
}

// NewPortConnection records a connection to a session's port at its end;
// outcome is "done" or "failed".
func NewPortConnection(s Subject, at time.Time, outcome string, payload map[string]any) Event {
	return s.event(EventPortConnection, at, outcome, payload)
}

// NewSecretSet records a secret's first version, set by the subject's
// actor.
func NewSecretSet(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventSecretSet, at, "set", payload)
}

// NewSecretRotated records a new version of a stored secret.
func NewSecretRotated(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventSecretRotated, at, "rotated", payload)
}

// NewSecretDeleted records a secret removed.
func NewSecretDeleted(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventSecretDeleted, at, "deleted", payload)
}

// NewSecretUsed records the proxy writing a run's secret into its
// requests to a destination.
func NewSecretUsed(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventSecretUsed, at, "used", payload)
}

// NewSecretMisdirected records requests refused for carrying a secret's
// placeholder where the secret may not go.
func NewSecretMisdirected(s Subject, at time.Time, payload map[string]any) Event {
	return s.event(EventSecretMisdirected, at, "refused", payload)
}
