package executor

import (
	"context"
	"errors"

	"github.com/sandgate/sandgate"
)

// ending is how a run ended, as the path that followed it saw it. The
// paths only say what happened; the handle's decide alone turns that into
// an outcome, an error, the lifecycle events of the end and the result.
// Exactly one of these applies, in this order: err, beforeStart, lost,
// outside, an exit.
type ending struct {
	// reason says whether sandgate stopped the command: at its timeout,
	// cancelled (by a caller or shutdown), or because its container was
	// lost.
	reason stopReason
	// err: the run could not be run (refused, not created, not
	// started): outcome error, run.failed.
	err error
	// quiet: the run was refused before it was live; no event is due.
	quiet bool
	// beforeStart: cancelled before its command ran.
	beforeStart bool
	// lost says why the run's end cannot be known: outcome lost, with
	// lostCode (SBX-001 unless the daemon stopped answering).
	lost     string
	lostCode sandgate.ErrorCode
	// outside says who stopped the container through the daemon (not
	// sandgate, not the command): outcome error, with the exit code.
	outside string
	// code is the command's exit code, when known; oom that the kernel's
	// OOM killer ended it.
	code *int
	oom  bool
	// payload is what the end's events add (agent, exec_id, signal…).
	payload map[string]any
	// usage is what the run used, from its result; nil for none.
	usage func(sandgate.Result) *sandgate.Usage
}

// failed is the ending of a run that could not be run.
func failed(err error) ending { return ending{err: err} }

// cancelledBeforeStart is the ending of a run cancelled before its
// command ran.
func cancelledBeforeStart() ending { return ending{beforeStart: true} }

// lostEnding is the ending of a run whose end cannot be known.
func lostEnding(why string, payload map[string]any) ending {
	return ending{reason: stoppedLost, lost: why, lostCode: sandgate.CodeContainerCreate, payload: payload}
}

// exitedWith is the ending of a command that exited with code.
func exitedWith(reason stopReason, code int, oom bool, payload map[string]any) ending {
	return ending{reason: reason, code: &code, oom: oom, payload: payload}
}

// failedOr is the ending of a step that failed: cancelled before start
// when the run was cancelled meanwhile, else failed.
func (h *handle) failedOr(err error) ending {
	if h.ctx.Err() != nil {
		return cancelledBeforeStart()
	}
	return failed(err)
}

// stopReason says why a run was stopped before it exited by itself.
type stopReason int

const (
	notStopped stopReason = iota
	stoppedTimeout
	stoppedCancel
	stoppedLost
)

// reasonOf maps the run context's cause to a stop reason.
func reasonOf(ctx context.Context) stopReason {
	if errors.Is(context.Cause(ctx), errLost) {
		return stoppedLost
	}
	return stoppedCancel
}

// outcomeOf classifies the end of a command that exited with code: a
// stop sandgate made (cancel, timeout, loss) says it first, then an OOM
// kill, then the code. Containers and session commands end the same way.
func outcomeOf(reason stopReason, oom bool, code int) sandgate.Outcome {
	switch {
	case reason == stoppedCancel:
		return sandgate.OutcomeCancelled
	case reason == stoppedTimeout:
		return sandgate.OutcomeTimedOut
	case reason == stoppedLost:
		return sandgate.OutcomeLost
	case oom:
		return sandgate.OutcomeOOMKilled
	case code == 0:
		return sandgate.OutcomeSucceeded
	}
	return sandgate.OutcomeFailed
}

// decide turns x into the run's result and records the end in the trail.
// It is the one place a run's outcome is decided: every result it returns
// has an outcome, and an error when the outcome is error or lost. err is
// x.err: the job could not be run.
func (h *handle) decide(x ending) (sandgate.Result, error) {
	res := h.res
	if res.FinishedAt.IsZero() {
		res.FinishedAt = h.now()
	}
	res.Stdout, res.Stderr = h.stdout.output(), h.stderr.output()
	res.ExitCode = x.code
	switch {
	case x.err != nil:
		res.Outcome, res.Error = sandgate.OutcomeError, errorInfo(x.err)
		if !x.quiet {
			h.log.Warn("run failed", "run_id", h.job.RunID, "code", res.Error.Code, "err", x.err)
			h.trail.failed(res, nil)
		}
		return res, x.err
	case x.beforeStart:
		res.Outcome = sandgate.OutcomeCancelled
		h.trail.cancelled(res, h.cancelReason(), true)
		return res, nil
	case x.lost != "":
		res.Outcome = sandgate.OutcomeLost
		res.Error = &sandgate.ErrorInfo{Code: x.lostCode, Message: x.lost}
		res.Usage = x.usageOf(res)
		h.log.Warn("run lost", "run_id", h.job.RunID, "reason", x.lost)
		h.trail.lost(res, x.payload)
		return res, nil
	case x.outside != "":
		res.Outcome = sandgate.OutcomeError
		res.Error = &sandgate.ErrorInfo{Code: sandgate.CodeContainerCreate, Message: x.outside}
		res.Usage = x.usageOf(res)
		h.log.Warn("container stopped through the daemon", "run_id", h.job.RunID, "reason", x.outside)
		h.trail.exited(res, exitPayload(res, x, false))
		h.trail.failed(res, nil)
	case x.code == nil:
		// No path ends without saying how; a bug that did is an error,
		// not a run without an outcome.
		return h.decide(failed(sandgate.Errorf(sandgate.CodeInternal, "run %s ended without an exit code", h.job.RunID)))
	default:
		res.OOMKilled = x.oom
		res.Outcome = outcomeOf(x.reason, x.oom, *x.code)
		res.Usage = x.usageOf(res)
		h.trail.exited(res, exitPayload(res, x, x.oom))
		h.recordStop(res)
		h.recordThrottling(res.Usage)
		if cause := context.Cause(h.ctx); errors.Is(cause, errAgentGone) {
			// A session ended because its agent did: the session's end
			// says why.
			res.Error = &sandgate.ErrorInfo{Code: sandgate.CodeContainerCreate, Message: cause.Error()}
		}
	}
	if _, ws := h.link(); ws != nil && h.host == nil {
		res.Artifacts = h.e.workspaces.collect(h, ws)
	}
	return res, nil
}

// recordStop records what ended a command that exited, besides its exit:
// the OOM kill, the timeout or the cancellation.
func (h *handle) recordStop(res sandgate.Result) {
	switch res.Outcome {
	case sandgate.OutcomeOOMKilled:
		h.trail.oomKilled(res, h.job.Spec.Resources.MemoryMB)
	case sandgate.OutcomeTimedOut:
		h.trail.timedOut(res, h.job.Spec.TimeoutSeconds)
	case sandgate.OutcomeCancelled:
		h.trail.cancelled(res, h.cancelReason(), false)
	}
}

// recordThrottling records run.cpu_throttled when the run spent more
// than the node's share (Config.CPUThrottleShare) of its wall time
// throttled by its CPU limit.
func (h *handle) recordThrottling(u *sandgate.Usage) {
	if u == nil || u.CPUThrottledMS == nil || u.WallMS <= 0 {
		return
	}
	share := h.e.cfg.CPUThrottleShare
	if float64(*u.CPUThrottledMS) > share*float64(u.WallMS) {
		h.trail.cpuThrottled(u, share)
	}
}

// exitPayload is container.exited's payload: the output's sizes and
// digests, the OOM flag, the duration, what was used, and what the path
// adds.
func exitPayload(res sandgate.Result, x ending, oom bool) map[string]any {
	p := outputPayload(res, map[string]any{
		"oom_killed":  oom,
		"duration_ms": res.FinishedAt.Sub(res.StartedAt).Milliseconds(),
	})
	if res.Usage != nil {
		p["usage"] = res.Usage.Payload()
	}
	for k, v := range x.payload {
		p[k] = v
	}
	return p
}

func (x ending) usageOf(res sandgate.Result) *sandgate.Usage {
	if x.usage == nil {
		return nil
	}
	return x.usage(res)
}

// errorInfo is err as a run reports it.
func errorInfo(err error) *sandgate.ErrorInfo {
	info := &sandgate.ErrorInfo{Code: sandgate.ErrorCodeOf(err), Message: sandgate.ErrorMessageOf(err)}
	var se *sandgate.Error
	if !errors.As(err, &se) {
		info.Message = err.Error()
	}
	return info
}
