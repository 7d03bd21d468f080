package executor

import (
	"time"

	"github.com/sandgate/sandgate"
)

// The executor's events. Each type is built in one place: a method of a
// run's trail, or orphanRemoved for a container no run owns.

// trail records the lifecycle events of one run, each with the job's
// correlation, run, decision, principal and team, the run's container and
// the session it belongs to.
type trail struct {
	sink sandgate.EventSink
	now  sandgate.Clock
	node string
	job  *sandgate.Job
	// container is the run's container ID so far ("" before it has one).
	container func() string
}

// subject is who and what the run's events are about: the job's
// correlation, run, decision, principal and team, and the run's container
// so far. A run's lifecycle events carry no policy revision: the
// admission's events do.
func (t *trail) subject() sandgate.Subject {
	s := sandgate.JobSubject(*t.job, t.node)
	s.PolicyRevision = ""
	s.ContainerID = t.container()
	return s
}

// withSession adds the session the run belongs to (a command's session,
// or the session itself for its container's events) to payload.
func (t *trail) withSession(payload map[string]any) map[string]any {
	sid := t.job.SessionID
	if t.job.SessionContainer {
		sid = t.job.RunID
	}
	if sid == "" {
		return payload
	}
	if payload == nil {
		payload = map[string]any{}
	}
	payload["session_id"] = sid
	return payload
}

// emit records one event of the run, made by the root package's
// constructor of its type.
func (t *trail) emit(build func(sandgate.Subject, time.Time, map[string]any) sandgate.Event, payload map[string]any) {
	t.sink.Emit(build(t.subject(), t.now(), t.withSession(payload)))
}

// emitEnd records one of the run's ending events, with res's outcome and
// exit code.
func (t *trail) emitEnd(build func(sandgate.Subject, time.Time, sandgate.Result, map[string]any) sandgate.Event, res sandgate.Result, payload map[string]any) {
	t.sink.Emit(build(t.subject(), t.now(), res, t.withSession(payload)))
}

// imageResolved: the run's image is present (pulled when it was),
// signed by signer when it is signed with a pinned key, and carrying the
// package list of digest packages when it carries one.
func (t *trail) imageResolved(ref, id, signer, packages string, pulled, cached bool, policy sandgate.PullPolicy) {
	p := map[string]any{"image": ref, "image_id": id, "pulled": pulled, "cached": cached, "pull_policy": string(policy)}
	if signer != "" {
		p["signer"] = signer
	}
	if packages != "" {
		p["packages_sha256"] = packages
	}
	t.emit(sandgate.NewImageResolved, p)
}

// imageUnavailable: the run's image is not there and may not, or could
// not, be fetched.
func (t *trail) imageUnavailable(ref, reason string, extra map[string]any) {
	p := map[string]any{"image": ref, "reason": reason}
	for k, v := range extra {
		p[k] = v
	}
	t.emit(sandgate.NewImageUnavailable, p)
}

// created: the run has its container (made, claimed warm, or found).
func (t *trail) created(payload map[string]any) {
	t.emit(sandgate.NewContainerCreated, payload)
}

// started: the run's command runs.
func (t *trail) started(payload map[string]any) {
	t.emit(sandgate.NewContainerStarted, payload)
}

// exited: the run's command ended with res's exit code.
func (t *trail) exited(res sandgate.Result, payload map[string]any) {
	t.emitEnd(sandgate.NewContainerExited, res, payload)
}

// oomKilled: the kernel's OOM killer ended the command.
func (t *trail) oomKilled(res sandgate.Result, memoryMB int64) {
	t.emitEnd(sandgate.NewContainerOOMKilled, res, map[string]any{"memory_mb": memoryMB})
}

// timedOut: the run was stopped at its timeout.
func (t *trail) timedOut(res sandgate.Result, timeoutSeconds int) {
	t.emitEnd(sandgate.NewRunTimedOut, res, map[string]any{"timeout_seconds": timeoutSeconds})
}

// cancelled: the run was cancelled (reason "cancelled" or "shutdown"),
// before its command ran or while it ran.
func (t *trail) cancelled(res sandgate.Result, reason string, beforeStart bool) {
	p := map[string]any{"reason": reason}
	if beforeStart {
		p["before_start"] = true
		res = sandgate.Result{}
	}
	t.emitEnd(sandgate.NewRunCancelled, res, p)
}

// failed: the run could not be run, or was ended by someone else through
// the daemon; res.Error says why.
func (t *trail) failed(res sandgate.Result, extra map[string]any) {
	p := map[string]any{"error_code": string(res.Error.Code), "message": res.Error.Message}
	for k, v := range extra {
		p[k] = v
	}
	t.emitEnd(func(s sandgate.Subject, at time.Time, res sandgate.Result, p map[string]any) sandgate.Event {
		return sandgate.NewRunFailed(s, at, res, "", p)
	}, res, p)
}

// lost: the run's end cannot be known; res.Error says why.
func (t *trail) lost(res sandgate.Result, extra map[string]any) {
	p := outputPayload(res, map[string]any{"error_code": string(res.Error.Code), "reason": res.Error.Message})
	for k, v := range extra {
		p[k] = v
	}
	t.emitEnd(sandgate.NewRunLost, res, p)
}

// removed: the run's container is gone.
func (t *trail) removed() {
	t.emit(sandgate.NewContainerRemoved, nil)
}

// retry: a Docker call of the run failed transiently and is tried again.
func (t *trail) retry(op string, attempt int, wait time.Duration, err error) {
	t.emit(sandgate.NewExecutorRetry, map[string]any{
		"operation": op, "attempt": attempt, "wait_ms": wait.Milliseconds(), "error": err.Error(),
	})
}

// artifactsCollected: what was stored of the run's artifacts.
func (t *trail) artifactsCollected(a *sandgate.Artifacts) {
	files := make([]any, len(a.Files))
	for i, f := range a.Files {
		files[i] = map[string]any{"path": f.Path, "size": f.Size, "sha256": f.SHA256, "mode": int64(f.Mode)}
	}
	p := map[string]any{"files": files, "bytes": a.Bytes, "truncated": a.Truncated, "skipped_count": int64(a.SkippedCount)}
	if a.Error != "" {
		p["error"] = a.Error
	}
	t.emit(sandgate.NewArtifactsCollected, p)
}

// outputPayload adds the sizes and digests of the output, never the data.
func outputPayload(res sandgate.Result, p map[string]any) map[string]any {
	for name, o := range map[string]sandgate.Output{"stdout": res.Stdout, "stderr": res.Stderr} {
		p[name+"_bytes"] = o.Bytes
		p[name+"_sha256"] = o.SHA256
		p[name+"_truncated"] = o.Truncated
	}
	return p
}

// orphanRemoved is the event of a container removed because no live run
// owned it.
func orphanRemoved(now time.Time, node string, s sandgate.Sandbox) sandgate.Event {
	sub := sandgate.Subject{CorrelationID: s.CorrelationID, RunID: s.RunID, ContainerID: s.ContainerID, Node: node}
	return sandgate.NewOrphanRemoved(sub, now,
		map[string]any{"name": s.Name, "image": s.Image, "state": s.State, "session": s.Session, "task": s.Task})
}

// pullProgress: how far an attempt at pulling the run's image has come.
func (t *trail) pullProgress(payload map[string]any) {
	t.emit(sandgate.NewImagePullProgress, payload)
}

// cpuThrottled: the run spent more than share of its wall time throttled
// by its CPU limit.
func (t *trail) cpuThrottled(u *sandgate.Usage, share float64) {
	t.emit(sandgate.NewRunCPUThrottled, map[string]any{
		"cpu_throttled_ms": *u.CPUThrottledMS, "cpu_nr_throttled": *u.CPUNrThrottled, "cpu_nr_periods": *u.CPUNrPeriods,
		"wall_ms": u.WallMS, "throttled_share": float64(*u.CPUThrottledMS) / float64(max(1, u.WallMS)), "threshold": share,
	})
}
