package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate"
)

// storeTimeout bounds the run-store writes a run's goroutine makes; they
// must not hang a run forever, nor be cut short by a client leaving.
const storeTimeout = 15 * time.Second

// finalStoreFor is how long a run's final save is retried while the run
// store does not answer.
const finalStoreFor = 2 * time.Minute

// cancelWait is how long DELETE waits for a cancelled run to end before
// answering 202 with the run still stopping (the grace period is 10 s).
const cancelWait = 15 * time.Second

// service is the run orchestration: decode, normalise, decide, record,
// store, execute. Handlers call it and render what it returns.
type service struct {
	cfg     Config
	d       Deps
	now     func() time.Time
	newID   func() string
	mask    secrets
	metrics *Metrics
	log     *slog.Logger
	live    *hub
	idem    *idemCache
	teams   *teamLoad
	// callbacks delivers the completion callbacks of finished runs.
	callbacks *callbacks
	// replaying holds the one policy replay this gateway runs at a time.
	replaying sync.Mutex
	// sessions are the sessions open on this node; swg waits for their
	// goroutines, which outlive any run's.
	sessions *sessionHub
	swg      sync.WaitGroup
	// cluster is this node's part in a cluster; nil for a node alone.
	cluster *cluster

	runCtx   context.Context
	stopRuns context.CancelFunc
	wg       sync.WaitGroup
	draining atomic.Bool
}

// submission is a run request after decoding.
type submission struct {
	Principal      sandgate.Principal
	CorrelationID  string
	Spec           sandgate.RunSpec
	IdempotencyKey string
	// Workspace is the run's checked workspace archive, if it came with
	// one; submit hands it to the run, or removes it.
	Workspace *upload
}

// submit admits and starts a run. It returns the run and whether it was
// created now (false: the idempotency key named an earlier run). A denial
// is POLICY-DENIED with the decision in Details; a failed audit commit is
// AUDIT-UNAVAILABLE and nothing runs.
func (s *service) submit(ctx context.Context, sub submission) (*sandgate.Run, bool, error) {
	if err := s.mayStartWork(); err != nil {
		return nil, false, err
	}
	p := sub.Principal
	handedOver := false
	defer func() {
		if !handedOver {
			sub.Workspace.remove()
		}
	}()
	in := sub.Spec
	if sub.Workspace != nil {
		in.Workspace = sub.Workspace.archive()
	}
	spec, err := sandgate.Normalize(in, s.d.Admitter.Defaults())
	if err != nil {
		return nil, false, err
	}
	if err := s.refuseSessionLabel(ctx, spec.SessionID); err != nil {
		return nil, false, err
	}
	if spec.CallbackURL != "" && len(s.cfg.CallbackKey) == 0 {
		return nil, false, sandgate.FieldError("callback_url", "completion callbacks are not configured on this gateway (it has no callback key)")
	}
	requestDigest := specDigest(spec.RunSpec)
	if sub.IdempotencyKey != "" {
		if e, ok := s.idem.get(p.Name, sub.IdempotencyKey, s.now()); ok {
			if e.digest != requestDigest {
				return nil, false, idempotencyConflict(sub.IdempotencyKey, e.runID)
			}
			if run, err := s.d.Runs.GetRun(ctx, e.runID); err == nil {
				return s.overlay(run), false, nil
			}
		}
	}
	// The run's ID is chosen now: an idempotency key is claimed for it
	// across the cluster before anything is decided, so that of two
	// requests with one key on two nodes one alone is decided.
	runID := s.newID()
	stored := false
	if sub.IdempotencyKey != "" {
		held, heldDigest, err := s.claimKey(ctx, p.Name, sub.IdempotencyKey, runID, s.keyedDigest(requestDigest))
		if err != nil {
			return nil, false, err
		}
		if held != "" {
			return s.idempotentRun(ctx, p, sub.IdempotencyKey, held, heldDigest, spec, requestDigest)
		}
		defer func() {
			if !stored {
				s.releaseKey(p.Name, sub.IdempotencyKey, runID)
			}
		}()
	}
	// The team's limits are checked before anything is decided or
	// recorded: a flood is refused for its team alone, at once; on this
	// node, and across the cluster.
	limits := s.d.Admitter.TeamLimits(p.Team)
	localRelease, err := s.teams.reserve(p.Team, limits, spec.Resources)
	if err != nil {
		s.metrics.teamLimited.WithLabelValues(p.Team).Inc()
		return nil, false, err
	}
	if err := s.reserveSlot(ctx, runID, p.Team, limits, spec.Resources); err != nil {
		localRelease()
		if sandgate.ErrorCodeOf(err) == sandgate.CodeRateLimited {
			s.metrics.teamLimited.WithLabelValues(p.Team).Inc()
		}
		return nil, false, err
	}
	release := func() {
		localRelease()
		s.releaseSlot(runID)
	}
	started := false
	defer func() {
		if !started {
			release()
		}
	}()
	dec, err := s.d.Admitter.Decide(ctx, sandgate.AdmissionInput{
		APIVersion: sandgate.APIVersion,
		Operation:  sandgate.OperationRun,
		Principal:  p,
		Request:    spec,
		Settings:   s.settings(),
	})
	if err != nil {
		return nil, false, unavailable(err, "policy evaluation")
	}
	s.metrics.decision(sandgate.OperationRun, dec)

	eventRunID := ""
	if dec.Allow {
		eventRunID = runID
	}
	base := sandgate.Event{
		Time: s.now(), CorrelationID: sub.CorrelationID, RunID: eventRunID, DecisionID: dec.DecisionID,
		Actor: p.Name, Team: p.Team, Node: s.cfg.Node, PolicyRevision: dec.PolicyRevision,
	}
	requested := base
	requested.Type = sandgate.EventRunRequested
	requested.Outcome = "requested"
	requested.Payload = map[string]any{"spec": s.mask.spec(spec.RunSpec, dec.Mask)}
	s.recordInput(requested.Payload, p)
	if sub.IdempotencyKey != "" {
		requested.Payload["idempotency_key"] = s.mask.value(sub.IdempotencyKey)
	}
	admission := base
	admission.Payload = s.decisionPayload(dec)
	if dec.Allow {
		admission.Type, admission.Outcome = sandgate.EventAdmissionAllowed, "allowed"
		admission.Payload["spec"] = s.mask.spec(dec.Spec.RunSpec, dec.Mask)
	} else {
		admission.Type, admission.Outcome = sandgate.EventAdmissionDenied, "denied"
	}
	rctx, cancel := context.WithTimeout(ctx, storeTimeout)
	err = s.d.Recorder.Record(rctx, requested, admission)
	cancel()
	if err != nil {
		s.log.Error("audit commit failed; run refused", "correlation_id", sub.CorrelationID, "error", err)
		if dec.Allow && errors.Is(err, sandgate.ErrCommitUncertain) {
			// The admission may reach the trail after all (the database
			// failed over mid-commit): the trail must then also say that
			// this run never ran.
			failed := base
			failed.Type, failed.Outcome, failed.Time = sandgate.EventRunFailed, string(sandgate.OutcomeError), s.now()
			failed.Payload = map[string]any{"error": "the admission's commit could not be confirmed; the request was refused and nothing was run"}
			s.d.Recorder.Emit(failed)
		}
		return nil, false, sandgate.WrapError(sandgate.CodeAuditUnavailable, err,
			"the audit trail cannot commit the decision now; nothing was run, retry later")
	}
	if !dec.Allow {
		return nil, false, denial(dec)
	}

	now := s.now()
	run := &sandgate.Run{
		ID: runID, CorrelationID: sub.CorrelationID, DecisionID: dec.DecisionID,
		PolicyRevision: dec.PolicyRevision, Principal: p.Name, Team: p.Team, Node: s.cfg.Node,
		IdempotencyKey: sub.IdempotencyKey, State: sandgate.StatePending, CreatedAt: now,
		Spec: s.storedSpec(dec.Spec, dec.Mask), Warnings: warningMessages(dec),
	}
	existing, created, err := s.d.Runs.CreateRun(ctx, run)
	stored = err == nil && created
	if err != nil {
		// The trail holds an admission for this run: say that it ended.
		failed := base
		failed.Type, failed.Outcome, failed.Time = sandgate.EventRunFailed, string(sandgate.OutcomeError), s.now()
		failed.Payload = map[string]any{"error": "the run could not be stored; nothing was run"}
		s.d.Recorder.Emit(failed)
		go s.endUnconfirmed(*run, "the run could not be stored; nothing was run")
		return nil, false, unavailable(err, "the run store")
	}
	if !created {
		if existing == nil {
			return nil, false, sandgate.Errorf(sandgate.CodeConflict, "idempotency key already used")
		}
		if specDigest(existing.Spec) != specDigest(run.Spec) {
			return nil, false, idempotencyConflict(sub.IdempotencyKey, existing.ID)
		}
		s.idem.put(p.Name, sub.IdempotencyKey, idemEntry{runID: existing.ID, digest: requestDigest, at: s.now()})
		return s.overlay(existing), false, nil
	}
	if sub.IdempotencyKey != "" {
		s.idem.put(p.Name, sub.IdempotencyKey, idemEntry{runID: run.ID, digest: requestDigest, at: now})
	}
	started, handedOver = true, true
	s.start(*run, dec.Spec, dec.Enforcement, limits.Concurrent, sub.Workspace, release)
	return s.overlay(run), true, nil
}

// keyedDigest is a request's digest as the idempotency keys keep it: a
// keyed hash (the mask key every node shares), since the request it
// identifies may hold secrets.
func (s *service) keyedDigest(digest string) string { return fmt.Sprint(s.mask.value(digest)) }

// idempotentRun answers a request whose idempotency key names run held
// (made by an earlier request, here or on another node, whose digest
// heldDigest the key recorded): that run, or CONFLICT when the key came
// with another request. A key recorded without a digest is compared
// through the stored spec.
func (s *service) idempotentRun(ctx context.Context, p sandgate.Principal, key, held, heldDigest string, spec sandgate.Normalized, digest string) (*sandgate.Run, bool, error) {
	existing, err := s.d.Runs.GetRun(ctx, held)
	if err != nil {
		return nil, false, unavailable(err, "the run store")
	}
	same := heldDigest == s.keyedDigest(digest)
	if heldDigest == "" {
		same = specDigest(existing.Spec) == specDigest(s.storedSpec(spec, nil))
	}
	if !same {
		return nil, false, idempotencyConflict(key, existing.ID)
	}
	s.idem.put(p.Name, key, idemEntry{runID: existing.ID, digest: digest, at: s.now()})
	return s.overlay(existing), false, nil
}

func (s *service) settings() sandgate.Settings {
	roots := s.cfg.MountRoots
	if roots == nil {
		roots = []string{}
	}
	return sandgate.Settings{AirGapped: s.cfg.AirGapped, MountRoots: roots}
}

// SettingsReporter is implemented by an Admitter that puts settings of its
// own in every policy input (the policy engine: its mount roots resolved).
// The trail then records those, so that a replay sees what the policy saw.
type SettingsReporter interface {
	Settings() sandgate.Settings
}

// policySettings are the settings the policy sees in an input.
func (s *service) policySettings() sandgate.Settings {
	st := s.settings()
	if r, ok := s.d.Admitter.(SettingsReporter); ok {
		own := r.Settings()
		st.AirGapped = st.AirGapped || own.AirGapped
		if len(own.MountRoots) > 0 || len(st.MountRoots) == 0 {
			st.MountRoots = own.MountRoots
		}
	}
	if st.MountRoots == nil {
		st.MountRoots = []string{}
	}
	return st
}

// recordInput adds to an admission's payload what its policy input held
// besides the spec and what the event's columns say (actor, team): the
// principal's roles and the settings. A replay (replay.go) rebuilds the
// input from them exactly.
func (s *service) recordInput(payload map[string]any, p sandgate.Principal) {
	roles := make([]string, len(p.Roles))
	for i, r := range p.Roles {
		roles[i] = string(r)
	}
	st := s.policySettings()
	payload["principal_roles"] = roles
	payload["settings"] = map[string]any{"air_gapped": st.AirGapped, "mount_roots": slices.Clone(st.MountRoots)}
}

// decisionPayload is the audit payload of a decision, secrets masked.
// It is built of maps and slices only, not of the Violation structs, so
// that the trail encodes it once, as it is (a struct's fields would not
// come out in canonical key order).
func (s *service) decisionPayload(dec sandgate.Decision) map[string]any {
	return map[string]any{
		"allow":      dec.Allow,
		"violations": violationDocs(dec.Violations),
		"warnings":   violationDocs(dec.Warnings),
		"mutations":  maskMutations(s.mask, dec.Mutations, dec.Mask),
	}
}

// violationDocs is vs as the JSON documents the API shows, never null.
func violationDocs(vs []sandgate.Violation) []map[string]any {
	out := make([]map[string]any, len(vs))
	for i, v := range vs {
		out[i] = map[string]any{"rule": v.Rule, "message": v.Message, "controls": v.Controls, "severity": v.Severity, "action": v.Action, "count": v.Count}
	}
	return out
}

// denial is the POLICY-DENIED error for a decision.
func denial(dec sandgate.Decision) error {
	msgs := make([]string, 0, len(dec.Violations))
	for _, v := range dec.Violations {
		if v.Action == "warn" {
			continue
		}
		msgs = append(msgs, fmt.Sprintf("%s: %s", v.Rule, v.Message))
	}
	msg := "denied by policy"
	if len(msgs) > 0 {
		msg += ": " + strings.Join(msgs, "; ")
	}
	return &sandgate.Error{Code: sandgate.CodePolicyDenied, Message: msg, Details: decisionDetails(decisionView(dec, false))}
}

func warningMessages(dec sandgate.Decision) []string {
	out := []string{}
	for _, w := range dec.Warnings {
		out = append(out, fmt.Sprintf("%s: %s", w.Rule, w.Message))
	}
	for _, v := range dec.Violations {
		if v.Action == "warn" {
			out = append(out, fmt.Sprintf("%s: %s", v.Rule, v.Message))
		}
	}
	return out
}

// unavailable gives an uncoded dependency error the UNAVAILABLE code.
func unavailable(err error, what string) error {
	var se *sandgate.Error
	if errors.As(err, &se) {
		return err
	}
	if errors.Is(err, context.Canceled) {
		return sandgate.WrapError(sandgate.CodeUnavailable, err, "request cancelled")
	}
	return sandgate.WrapError(sandgate.CodeUnavailable, err, "%s is unavailable", what)
}

// storedSpec is the spec as the run store keeps it and the API shows it:
// env values, stdin and the fields the decision's mask names become keyed
// hashes, so secrets never rest in the database. Equal secrets hash equally,
// so idempotent retries still compare equal.
func (s *service) storedSpec(normalized sandgate.Normalized, mask []string) sandgate.RunSpec {
	spec := normalized.RunSpec
	redacted := spec
	redacted.Env = nil
	if len(spec.Env) > 0 {
		redacted.Env = make(map[string]string, len(spec.Env))
		for k, v := range spec.Env {
			redacted.Env[k] = fmt.Sprint(s.mask.value(v))
		}
	}
	if spec.Stdin != "" {
		redacted.Stdin = fmt.Sprint(s.mask.value(spec.Stdin))
	}
	if len(spec.Files) > 0 {
		redacted.Files = make([]sandgate.File, len(spec.Files))
		for i, f := range spec.Files {
			f.Content = fmt.Sprint(s.mask.value(f.Content))
			redacted.Files[i] = f
		}
	}
	if len(mask) == 0 {
		return redacted
	}
	// Other masked paths: hash them through the spec's JSON form. A mask
	// that names a non-string field cannot be represented in a RunSpec;
	// env and stdin are hashed all the same.
	doc, err := json.Marshal(s.mask.spec(spec, mask))
	if err != nil {
		return redacted
	}
	var masked sandgate.RunSpec
	if err := json.Unmarshal(doc, &masked); err != nil {
		return redacted
	}
	return masked
}

// start executes the run in its own goroutine, detached from the request.
// spec is the admitted spec with its secrets; run carries the stored form.
// release gives back the run's place in its team's limits when it ends.
func (s *service) start(run sandgate.Run, spec sandgate.Normalized, enforce sandgate.Enforcement, teamConcurrency int, up *upload, release func()) {
	lr := newLiveRun(run, spec.OutputLimitBytes)
	lr.spec, lr.enforce, lr.teamConcurrency, lr.upload = spec, enforce, teamConcurrency, up
	ctx, cancel := context.WithCancel(s.runCtx)
	lr.cancel = cancel
	s.live.add(run.ID, lr)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer cancel()
		defer release()
		s.execute(ctx, lr)
	}()
}

// execute drives one run to its end and stores the result.
func (s *service) execute(ctx context.Context, lr *liveRun) {
	defer s.live.remove(lr.run.ID)
	defer lr.upload.remove()
	run, _ := lr.setState(sandgate.StateCreating, "", s.now())
	log := s.log.With("run_id", run.ID, "correlation_id", run.CorrelationID)
	s.storeLater(lr, run, log)

	job := sandgate.Job{
		RunID: run.ID, CorrelationID: run.CorrelationID, DecisionID: run.DecisionID,
		Principal: run.Principal, Team: run.Team, Spec: lr.spec, AirGapped: s.cfg.AirGapped,
		PolicyRevision:  run.PolicyRevision,
		Enforcement:     lr.enforce,
		TeamConcurrency: lr.teamConcurrency,
		Stdout:          lr.out[sandgate.Stdout],
		Stderr:          lr.out[sandgate.Stderr],
		Output:          lr.output,
		Workspace:       lr.upload.localPath(),
		Started: func(containerID string, at time.Time) {
			if r, ok := lr.setState(sandgate.StateRunning, containerID, at); ok {
				s.storeLater(lr, r, log)
			}
		},
	}
	log.Info("run starting", "image", run.Spec.Image)
	res, err := safely(log, func() (sandgate.Result, error) {
		if lr.session != "" {
			// A command in a session: the session's container runs it.
			x, err := s.executorOf(lr.session)
			if err != nil {
				return sandgate.Result{}, err
			}
			return x.Exec(ctx, lr.session, job)
		}
		return s.d.Executor.Execute(ctx, job)
	})
	s.complete(lr, res, err, log, "run finished")
}

// complete stores a run's end: the executor's result, cancelled when a
// DELETE asked for it, counted, logged, and handed to its followers.
func (s *service) complete(lr *liveRun, res sandgate.Result, err error, log *slog.Logger, msg string) {
	final := lr.snapshot()
	applyResult(&final, res, err, s.now())
	if lr.wasCancelRequested() && (final.Outcome == sandgate.OutcomeError || final.Outcome == "") {
		final.Outcome, final.Error = sandgate.OutcomeCancelled, nil
	}
	if res.Artifacts != nil {
		s.saveArtifacts(&final, *res.Artifacts, log)
	}
	s.metrics.runsFinished.WithLabelValues(string(final.Outcome)).Inc()
	s.metrics.observeUsage(final.Outcome, final.Usage)
	log.Info(msg, "outcome", final.Outcome, "exit_code", final.ExitCode, "duration_ms", final.DurationMS)
	s.store(lr, final, log)
	lr.finish(final)
	s.callback(lr, final)
}

// callback hands a finished run that asked for one to the callbacks'
// workers. The URL comes from the admitted spec; an adopted run has only
// the stored one (a keyed hash when the bundle's mask names it, which
// then cannot be delivered). The trail shows the stored one.
func (s *service) callback(lr *liveRun, final sandgate.Run) {
	target := lr.spec.CallbackURL
	if target == "" {
		target = final.Spec.CallbackURL
	}
	if target == "" {
		return
	}
	body, err := callbackBody(final)
	if err != nil {
		s.log.Error("callback body", "run_id", final.ID, "error", err)
		return
	}
	s.callbacks.enqueue(callback{url: target, shown: final.Spec.CallbackURL, run: final, body: body})
}

// callbackBody is the run as GET /v1/runs answers it without
// include=output: each stream's size, encoding and digest, not its data.
func callbackBody(run sandgate.Run) ([]byte, error) {
	for _, o := range []*sandgate.Output{&run.Stdout, &run.Stderr} {
		o.Data, o.Raw = "", nil
	}
	return marshal(runView(&run))
}

// safely calls the executor, turning a panic into an error result so that
// the run still ends and is stored.
func safely(log *slog.Logger, call func() (sandgate.Result, error)) (res sandgate.Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			log.Error("executor panicked", "panic", fmt.Sprint(r))
			err = sandgate.Errorf(sandgate.CodeInternal, "the executor failed")
			res = sandgate.Result{Outcome: sandgate.OutcomeError,
				Error: &sandgate.ErrorInfo{Code: sandgate.CodeInternal, Message: "the executor failed"}}
		}
	}()
	return call()
}

// store saves the run, logging a failure: the run goes on regardless. The
// final save is retried for up to finalStoreFor, since a run left
// "running" in the store would outlive its end.
func (s *service) store(lr *liveRun, run sandgate.Run, log *slog.Logger) {
	lr.storeMu.Lock()
	defer lr.storeMu.Unlock()
	if lr.finalStored {
		return // an earlier state, overtaken by the end
	}
	lr.finalStored = run.State == sandgate.StateFinished
	// The final save outlasts a Postgres restart: a run whose end was not
	// stored would read as running for ever.
	var until time.Time
	if run.State == sandgate.StateFinished {
		until = time.Now().Add(finalStoreFor)
	}
	saveRetrying("store run", until, 500*time.Millisecond, log.With("state", run.State), func(ctx context.Context) error {
		return s.d.Runs.UpdateRun(ctx, &run)
	})
}

// endUnconfirmed ends, in the store, a run whose CreateRun failed: a
// commit can land though its answer is lost (a failover cut the
// connection), which would leave a pending run that never runs beside a
// trail that says it failed. The row, when it exists, ends as an error,
// as the trail says; when it does not, there is nothing to end.
func (s *service) endUnconfirmed(run sandgate.Run, msg string) {
	now := s.now()
	run.State, run.Outcome, run.FinishedAt = sandgate.StateFinished, sandgate.OutcomeError, &now
	run.Error = &sandgate.ErrorInfo{Code: sandgate.CodeUnavailable, Message: msg}
	saveRetrying("end a run whose store was not confirmed", time.Now().Add(finalStoreFor), 500*time.Millisecond, s.log.With("run_id", run.ID),
		func(ctx context.Context) error {
			if err := s.d.Runs.UpdateRun(ctx, &run); sandgate.ErrorCodeOf(err) != sandgate.CodeNotFound {
				return err
			}
			return nil
		})
}

// storeLater stores a state of a live run that is not its end, off the
// run's path: while the run is live the API answers from the live run,
// and the store has the state a moment later. Only the latest state
// waiting is stored, and never after the end (store).
func (s *service) storeLater(lr *liveRun, run sandgate.Run, log *slog.Logger) {
	lr.pendingMu.Lock()
	defer lr.pendingMu.Unlock()
	lr.pending = &run
	if lr.storing {
		return
	}
	lr.storing = true
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		for {
			lr.pendingMu.Lock()
			p := lr.pending
			lr.pending = nil
			if p == nil {
				lr.storing = false
				lr.pendingMu.Unlock()
				return
			}
			lr.pendingMu.Unlock()
			s.store(lr, *p, log)
		}
	}()
}

// saveRetrying calls save until it succeeds, fails for good (NOT-FOUND,
// INVALID-REQUEST) or until has passed, waiting first and then twice as
// long each time, at most 5 s; each call gets storeTimeout.
func saveRetrying(what string, until time.Time, first time.Duration, log *slog.Logger, save func(context.Context) error) {
	wait := first
	for i := 1; ; i++ {
		ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
		err := save(ctx)
		cancel()
		if err == nil {
			return
		}
		if code := sandgate.ErrorCodeOf(err); time.Now().After(until) || code == sandgate.CodeNotFound || code == sandgate.CodeInvalidRequest {
			log.Error(what, "attempts", i, "error", err)
			return
		}
		log.Warn(what+", retrying", "attempt", i, "error", err)
		time.Sleep(wait)
		wait = min(2*wait, 5*time.Second)
	}
}

// applyResult copies an execution's result onto the run.
func applyResult(run *sandgate.Run, res sandgate.Result, err error, now time.Time) {
	run.State = sandgate.StateFinished
	run.Outcome = res.Outcome
	run.ExitCode = res.ExitCode
	run.OOMKilled = res.OOMKilled
	if res.ContainerID != "" {
		run.ContainerID = res.ContainerID
	}
	if !res.StartedAt.IsZero() {
		t := res.StartedAt
		run.StartedAt = &t
	}
	finished := res.FinishedAt
	if finished.IsZero() {
		finished = now
	}
	run.FinishedAt = &finished
	from := run.CreatedAt
	if run.StartedAt != nil {
		from = *run.StartedAt
	}
	run.DurationMS = max(0, finished.Sub(from).Milliseconds())
	run.Stdout, run.Stderr = res.Stdout, res.Stderr
	run.Usage = res.Usage
	run.Egress = res.Egress
	run.Error = res.Error
	if err != nil && run.Error == nil {
		run.Error = &sandgate.ErrorInfo{Code: sandgate.ErrorCodeOf(err), Message: sandgate.ErrorMessageOf(err)}
	}
	if run.Outcome == "" {
		switch {
		case err != nil:
			run.Outcome = sandgate.OutcomeError
		case run.ExitCode != nil && *run.ExitCode == 0:
			run.Outcome = sandgate.OutcomeSucceeded
		case run.ExitCode != nil:
			run.Outcome = sandgate.OutcomeFailed
		default:
			run.Outcome = sandgate.OutcomeError
		}
	}
	if run.Outcome == sandgate.OutcomeError && run.Error == nil {
		run.Error = &sandgate.ErrorInfo{Code: sandgate.CodeInternal, Message: "the executor reported no result"}
	}
}

// overlay returns the run with what this node knows live: the state and
// the output captured so far.
func (s *service) overlay(run *sandgate.Run) *sandgate.Run {
	if lr := s.live.get(run.ID); lr != nil {
		r := lr.snapshot()
		return &r
	}
	return run
}

// seesAllTeams reports whether p may read every team's runs.
func seesAllTeams(p sandgate.Principal) bool {
	return p.Has(sandgate.RoleAdmin, sandgate.RoleAuditor)
}

// visibleRun returns the run when p may see it; another team's run is
// NOT-FOUND, exactly as a run that does not exist.
func (s *service) visibleRun(ctx context.Context, p sandgate.Principal, id string, allTeams bool) (*sandgate.Run, error) {
	notFound := sandgate.Errorf(sandgate.CodeNotFound, "run %s not found", id)
	if _, err := uuid.Parse(id); err != nil || len(id) != 36 {
		return nil, notFound
	}
	run, err := s.d.Runs.GetRun(ctx, id)
	if err != nil {
		if sandgate.ErrorCodeOf(err) == sandgate.CodeNotFound {
			return nil, notFound
		}
		return nil, unavailable(err, "the run store")
	}
	if run == nil || (!allTeams && run.Team != p.Team) {
		return nil, notFound
	}
	return s.overlay(run), nil
}

// get returns a run p may see.
func (s *service) get(ctx context.Context, p sandgate.Principal, id string) (*sandgate.Run, error) {
	return s.visibleRun(ctx, p, id, seesAllTeams(p))
}

// list returns a page of runs p may see.
func (s *service) list(ctx context.Context, p sandgate.Principal, f sandgate.RunFilter) ([]sandgate.Run, string, error) {
	if !seesAllTeams(p) {
		f.Team = p.Team
	}
	runs, next, err := s.d.Runs.ListRuns(ctx, f)
	if err != nil {
		return nil, "", unavailable(err, "the run store")
	}
	for i := range runs {
		if f.WithOutput {
			runs[i] = *s.overlay(&runs[i])
			continue
		}
		if lr := s.live.get(runs[i].ID); lr != nil {
			runs[i] = lr.snapshotMeta()
		}
	}
	return runs, next, nil
}

// cancel stops a run p may cancel: submitters their team's, admins any. It
// waits a little for the run to end and returns it as it then is.
func (s *service) cancel(ctx context.Context, p sandgate.Principal, id string) (*sandgate.Run, error) {
	run, err := s.visibleRun(ctx, p, id, p.Has(sandgate.RoleAdmin))
	if err != nil {
		return nil, err
	}
	if run.State == sandgate.StateFinished {
		return nil, &sandgate.Error{Code: sandgate.CodeConflict,
			Message: fmt.Sprintf("run %s has already finished (%s)", id, run.Outcome),
			Details: map[string]any{"state": run.State, "outcome": run.Outcome}}
	}
	lr := s.live.get(id)
	if lr == nil {
		return nil, &sandgate.Error{Code: sandgate.CodeConflict,
			Message: fmt.Sprintf("run %s is not executing on this node", id),
			Details: map[string]any{"state": run.State, "node": run.Node}}
	}
	cancelCtx := lr.requestCancel()
	s.log.Info("run cancel requested", "run_id", id, "correlation_id", run.CorrelationID, "actor", p.Name)
	if err := s.d.Executor.Cancel(ctx, id); err != nil {
		if sandgate.ErrorCodeOf(err) != sandgate.CodeNotFound {
			return nil, unavailable(err, "the executor")
		}
		// Not in the executor yet (or any more): end the job's context.
		cancelCtx()
	}
	t := time.NewTimer(cancelWait)
	defer t.Stop()
	select {
	case <-lr.done:
	case <-t.C:
	case <-ctx.Done():
	}
	r := lr.snapshot()
	return &r, nil
}

// review evaluates a spec without running it and audits the review.
func (s *service) review(ctx context.Context, p sandgate.Principal, corr string, req sandgate.RunSpec) (sandgate.Decision, error) {
	spec, err := sandgate.Normalize(req, s.d.Admitter.Defaults())
	if err != nil {
		return sandgate.Decision{}, err
	}
	dec, err := s.d.Admitter.Decide(ctx, sandgate.AdmissionInput{
		APIVersion: sandgate.APIVersion, Operation: sandgate.OperationReview,
		Principal: p, Request: spec, Settings: s.settings(),
	})
	if err != nil {
		return sandgate.Decision{}, unavailable(err, "policy evaluation")
	}
	s.metrics.decision(sandgate.OperationReview, dec)
	payload := s.decisionPayload(dec)
	payload["spec"] = s.mask.spec(spec.RunSpec, dec.Mask)
	s.recordInput(payload, p)
	outcome := "denied"
	if dec.Allow {
		outcome = "allowed"
	}
	// The review is answered once its event is queued, not committed, but
	// never further ahead of the trail than its bounded backlog: under
	// sustained load reviews are answered as fast as they are audited.
	qctx, cancel := context.WithTimeout(ctx, storeTimeout)
	err = s.d.Recorder.Queue(qctx, sandgate.Event{
		Type: sandgate.EventAdmissionReviewed, Time: s.now(), Outcome: outcome,
		CorrelationID: corr, DecisionID: dec.DecisionID, Actor: p.Name, Team: p.Team,
		Node: s.cfg.Node, PolicyRevision: dec.PolicyRevision, Payload: payload,
	})
	cancel()
	if err != nil {
		s.log.Error("audit trail too far behind; review refused", "correlation_id", corr, "error", err)
		return sandgate.Decision{}, sandgate.WrapError(sandgate.CodeAuditUnavailable, err,
			"the audit trail cannot take the review now; retry later")
	}
	// The answer shows the spec as the runs API does: secrets as their
	// keyed hashes, never echoed in clear.
	dec.Spec = sandgate.Normalized{RunSpec: s.storedSpec(dec.Spec, dec.Mask)}
	return dec, nil
}

// exportAudit commits an audit.exported event, then streams the export.
func (s *service) exportAudit(ctx context.Context, p sandgate.Principal, corr string, f sandgate.AuditFilter, format sandgate.ExportFormat, w io.Writer, begin func()) error {
	err := s.d.Recorder.Record(ctx, sandgate.Event{
		Type: sandgate.EventAuditExported, Time: s.now(), Outcome: "started", CorrelationID: corr,
		Actor: p.Name, Team: p.Team, Node: s.cfg.Node,
		Payload: map[string]any{"format": string(format), "filter": auditFilterPayload(f)},
	})
	if err != nil {
		return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "the audit trail cannot record the export now; retry later")
	}
	begin()
	return s.d.Audit.Export(ctx, f, format, w)
}

func auditFilterPayload(f sandgate.AuditFilter) map[string]any {
	m := map[string]any{}
	add := func(k, v string) {
		if v != "" {
			m[k] = v
		}
	}
	add("correlation_id", f.CorrelationID)
	add("run_id", f.RunID)
	add("decision_id", f.DecisionID)
	add("type", string(f.Type))
	add("actor", f.Actor)
	add("team", f.Team)
	add("outcome", f.Outcome)
	if !f.Since.IsZero() {
		m["since"] = f.Since.UTC().Format(time.RFC3339Nano)
	}
	if !f.Until.IsZero() {
		m["until"] = f.Until.UTC().Format(time.RFC3339Nano)
	}
	return m
}

// shutdown ends the runs: at once when CancelOnShutdown, else after they
// finish or ShutdownGrace passes. It waits for every run's final store.
func (s *service) shutdown(ctx context.Context) error {
	s.draining.Store(true)
	// Sessions end once the runs have had their chance: a command in a
	// session needs its session to finish.
	defer s.endSessions(ctx)
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	if !s.cfg.CancelOnShutdown {
		t := time.NewTimer(s.cfg.ShutdownGrace)
		defer t.Stop()
		select {
		case <-done:
			return nil
		case <-t.C:
		case <-ctx.Done():
		}
	}
	var cwg sync.WaitGroup
	for id, lr := range s.live.all() {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			cancelCtx := lr.requestCancel()
			if err := s.d.Executor.Cancel(ctx, id); err != nil {
				cancelCtx()
			}
		}()
	}
	cwg.Wait()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
	}
	// Out of time: cut every job's context and give the goroutines a last
	// moment to store their runs.
	s.stopRuns()
	select {
	case <-done:
		return nil
	case <-time.After(5 * time.Second):
		return fmt.Errorf("gateway shutdown: %d runs did not end", s.live.count())
	}
}

// idemCache remembers, for this node, which run an idempotency key made,
// so that a retry is answered without a second decision. The run store
// remains the authority across nodes.
type idemCache struct {
	mu      sync.Mutex
	entries map[string]idemEntry
	swept   time.Time
}

type idemEntry struct {
	runID string
	// digest identifies the normalised request, so that a key reused for
	// another request is refused.
	digest string
	at     time.Time
}

const idemWindow = 24 * time.Hour

func newIdemCache() *idemCache { return &idemCache{entries: map[string]idemEntry{}} }

func (c *idemCache) get(principal, key string, now time.Time) (idemEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[principal+"\x00"+key]
	if !ok || now.Sub(e.at) > idemWindow {
		return idemEntry{}, false
	}
	return e, true
}

func (c *idemCache) put(principal, key string, e idemEntry) {
	now := e.at
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Sub(c.swept) > time.Hour || len(c.entries) > 100_000 {
		for k, e := range c.entries {
			if now.Sub(e.at) > idemWindow {
				delete(c.entries, k)
			}
		}
		c.swept = now
	}
	if len(c.entries) > 100_000 {
		return
	}
	c.entries[principal+"\x00"+key] = e
}

func idempotencyConflict(key, runID string) error {
	return &sandgate.Error{Code: sandgate.CodeConflict,
		Message: fmt.Sprintf("Idempotency-Key %q was used for a different request (run %s); use a new key", key, runID),
		Details: map[string]any{"run_id": runID}}
}

// specDigest identifies a spec by its content, ignoring how empty lists
// and maps are spelled (null, [], {}), so that a spec read back from the
// store digests like the one that was stored.
func specDigest(s sandgate.RunSpec) string {
	raw, _ := json.Marshal(prune(generic(s)))
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// prune drops nulls and empty lists and maps from a generic JSON value.
func prune(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if e = prune(e); e == nil {
				delete(x, k)
			} else {
				x[k] = e
			}
		}
		if len(x) == 0 {
			return nil
		}
		return x
	case []any:
		if len(x) == 0 {
			return nil
		}
		for i := range x {
			x[i] = prune(x[i])
		}
		return x
	}
	return v
}
