package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/admission"
	"github.com/sandgate/sandgate/gateway/api"
)

// DefaultReplayMaxDecisions is Config.ReplayMaxDecisions' default.
const DefaultReplayMaxDecisions = 10_000

const (
	// defaultReplayExamples and maxReplayExamples bound the examples of
	// each rule of a replay's report.
	defaultReplayExamples = 3
	maxReplayExamples     = 20
	// replayPage is how many records a replay reads from the trail at once.
	replayPage = 1000
	// maxReplayPending bounds the run requests a replay holds while it
	// waits for their decisions' records (they are committed together, so
	// a handful at most in a sound trail).
	maxReplayPending = 10_000
	// maxRecordedErrors bounds the errors of a refused candidate that its
	// policy.replayed event records, and each error's length.
	maxRecordedErrors   = 20
	maxRecordedErrorLen = 512
	// maxRecordedFiles bounds the candidate files whose digests the event
	// records (a bundle has at most 256; a refused one may claim more).
	maxRecordedFiles = 256
)

// replayTypes are the records a replay reads: a run's request and its
// decision (one pair per decision_id), and reviews, which are both.
var replayTypes = []sandgate.EventType{
	sandgate.EventRunRequested, sandgate.EventAdmissionAllowed,
	sandgate.EventAdmissionDenied, sandgate.EventAdmissionReviewed,
}

// replayQuery is a replay request after decoding.
type replayQuery struct {
	files    map[string][]byte
	since    time.Time
	until    time.Time
	team     string
	limit    int
	examples int
	// drift asks for the records to be compared with the policy in force.
	drift bool
}

// replays runs policy replays: the trail's recorded decisions read back,
// each re-evaluated through the gate (admission.Replay) with a candidate
// bundle, and the changes reported.
type replays struct {
	base
	gate *admission.Gate
	mask sandgate.Masker
	// replaying holds the one policy replay this gateway runs at a time.
	replaying sync.Mutex
}

// replay evaluates the recorded admission inputs of the range with the
// candidate bundle made of q.files and reports the decisions that would
// change. Nothing runs and nothing but the replay's own policy.replayed
// event is written. A candidate the engine refuses is POLICY-INVALID (or
// INVALID-REQUEST for bad file names), recorded as a refused replay.
func (s *replays) replay(ctx context.Context, p sandgate.Principal, corr string, q replayQuery) (api.ReplayReport, error) {
	loader, ok := s.d.Policies.(sandgate.CandidateLoader)
	if !ok {
		if loader, ok = s.d.Admitter.(sandgate.CandidateLoader); !ok {
			return api.ReplayReport{}, sandgate.Errorf(sandgate.CodeNotFound, "policy replay is not available: this gateway's policy engine cannot load a candidate bundle")
		}
	}
	// One replay at a time: each may keep a core busy for ReplayTimeout.
	if !s.replaying.TryLock() {
		return api.ReplayReport{}, sandgate.Errorf(sandgate.CodeRateLimited, "another policy replay is running on this gateway; retry when it has ended")
	}
	defer s.replaying.Unlock()
	start := time.Now()
	rctx, cancel := context.WithTimeout(ctx, s.cfg.ReplayTimeout)
	defer cancel()
	cand, err := loader.LoadCandidate(rctx, q.files)
	if err != nil {
		switch sandgate.ErrorCodeOf(err) {
		case sandgate.CodePolicyInvalid, sandgate.CodeInvalidRequest:
			if rerr := s.recordReplay(ctx, p, corr, q, nil, err); rerr != nil {
				return api.ReplayReport{}, rerr
			}
			return api.ReplayReport{}, err
		}
		return api.ReplayReport{}, unavailable(err, "the policy engine")
	}
	// A candidate evaluated in a child process of its own ends with it.
	if c, ok := cand.(io.Closer); ok {
		defer c.Close()
	}
	r := &replayer{
		gate:     s.gate,
		cand:     cand,
		examples: q.examples,
		current:  s.d.Policies.Status().Revision,
		fallback: s.gate.Settings(),
		rep: api.ReplayReport{
			CandidateRevision: cand.Revision(),
			CurrentRevision:   s.d.Policies.Status().Revision,
			Filter:            api.ReplayFilter{Since: timePtr(q.since), Until: timePtr(q.until), Team: q.team, Limit: q.limit},
		},
	}
	if q.drift {
		r.inForce = s.d.Admitter
		r.rep.Drift = &api.ReplayDrift{Examples: []api.ReplayExample{}}
	}
	err = r.run(rctx, s.d.Audit, q)
	switch {
	case ctx.Err() != nil:
		return api.ReplayReport{}, unavailable(ctx.Err(), "the replay")
	case rctx.Err() != nil:
		// Out of time: what was replayed so far is the answer.
		r.rep.TimedOut, r.rep.Truncated = true, true
	case sandgate.ErrorCodeOf(err) == sandgate.CodePolicyInvalid:
		// The candidate needed more than the evaluator's limits for one
		// of the decisions: refused, as at load.
		if rerr := s.recordReplay(ctx, p, corr, q, nil, err); rerr != nil {
			return api.ReplayReport{}, rerr
		}
		return api.ReplayReport{}, err
	case err != nil:
		return api.ReplayReport{}, unavailable(err, "the audit trail")
	}
	rep := r.report()
	rep.DurationMS = time.Since(start).Milliseconds()
	if err := s.recordReplay(ctx, p, corr, q, &rep, nil); err != nil {
		return api.ReplayReport{}, err
	}
	return rep, nil
}

// recordReplay commits the replay's policy.replayed event: the candidate's
// revision and files, the filters and the counts (rep), or the reason the
// candidate was refused (refused).
func (s *replays) recordReplay(ctx context.Context, p sandgate.Principal, corr string, q replayQuery, rep *api.ReplayReport, refused error) error {
	filter := map[string]any{"limit": q.limit}
	if q.team != "" {
		filter["team"] = q.team
	}
	if !q.since.IsZero() {
		filter["since"] = q.since.UTC().Format(time.RFC3339Nano)
	}
	if !q.until.IsZero() {
		filter["until"] = q.until.UTC().Format(time.RFC3339Nano)
	}
	payload := map[string]any{"files": fileDigests(q.files), "file_count": len(q.files), "filter": filter}
	outcome := "refused"
	if rep != nil {
		outcome = "success"
		payload["candidate_revision"] = rep.CandidateRevision
		payload["counts"] = map[string]any{
			"replayed": rep.Replayed, "unchanged": rep.Unchanged,
			"newly_denied": rep.NewlyDenied.Count, "newly_allowed": rep.NewlyAllowed.Count, "changed": rep.Changed.Count,
			"approximate": rep.Approximate, "masked_inputs": rep.MaskedInputs, "mask_dependent": rep.MaskDependent,
			"skipped": rep.Skipped,
		}
		payload["truncated"], payload["timed_out"], payload["duration_ms"] = rep.Truncated, rep.TimedOut, rep.DurationMS
		if rep.Drift != nil {
			payload["drift"] = map[string]any{"count": rep.Drift.Count, "same_revision": rep.Drift.SameRevision}
		}
	} else {
		payload["errors"] = refusalErrors(refused)
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), storeTimeout)
	defer cancel()
	subject := sandgate.PrincipalSubject(p, corr, s.cfg.Node)
	subject.PolicyRevision = s.d.Policies.Status().Revision
	err := s.d.Recorder.Record(rctx, sandgate.NewPolicyReplayed(subject, s.now(), outcome, payload))
	if err != nil {
		return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "the audit trail cannot record the replay now; retry later")
	}
	return nil
}

// fileDigests lists the candidate's files with their SHA-256, by name,
// the first maxRecordedFiles of them.
func fileDigests(files map[string][]byte) []map[string]any {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	names = names[:min(len(names), maxRecordedFiles)]
	out := make([]map[string]any, 0, len(names))
	for _, n := range names {
		sum := sha256.Sum256(files[n])
		out = append(out, map[string]any{"name": shorten(n, 256), "sha256": hex.EncodeToString(sum[:])})
	}
	return out
}

// refusalErrors are the problems of a refused candidate, bounded.
func refusalErrors(err error) []string {
	var se *sandgate.Error
	errs := []string{sandgate.ErrorMessageOf(err)}
	if errors.As(err, &se) {
		if list, ok := se.Details["errors"].([]string); ok && len(list) > 0 {
			errs = list
		}
	}
	out := make([]string, 0, min(len(errs), maxRecordedErrors))
	for _, e := range errs[:min(len(errs), maxRecordedErrors)] {
		out = append(out, shorten(strings.ToValidUTF8(e, "?"), maxRecordedErrorLen))
	}
	return out
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	t = t.UTC()
	return &t
}

// replayer is one replay: the candidate, and the report it builds.
type replayer struct {
	gate     *admission.Gate
	cand     sandgate.PolicyCandidate
	examples int
	// fallback are the settings a record without its own is replayed with.
	fallback sandgate.Settings
	rep      api.ReplayReport
	changes  [3]changeSet
	// inForce, when drift was asked for, is the policy in force, and
	// current its revision.
	inForce sandgate.Admitter
	current string
}

// The kinds of change, as indexes of replayer.changes.
const (
	newlyDenied = iota
	newlyAllowed
	changedRules
)

// run reads the range's records page by page and replays each decision,
// until the range or the limit ends. A decision's input is its request's
// record (run.requested), or a review's own.
func (r *replayer) run(ctx context.Context, trail sandgate.AuditTrail, q replayQuery) error {
	f := sandgate.AuditFilter{Types: replayTypes, Team: q.team, Since: q.since, Until: q.until, Limit: replayPage}
	pending := map[string]sandgate.AuditRecord{}
	for {
		recs, next, err := trail.Query(ctx, f)
		if err != nil {
			return err
		}
		for _, rec := range recs {
			if r.rep.Replayed >= q.limit {
				r.rep.Truncated = true
				return nil
			}
			var err error
			switch rec.Type {
			case sandgate.EventRunRequested:
				if rec.DecisionID == "" || len(pending) >= maxReplayPending {
					r.rep.Skipped++
					continue
				}
				pending[rec.DecisionID] = rec
			case sandgate.EventAdmissionAllowed, sandgate.EventAdmissionDenied:
				req, ok := pending[rec.DecisionID]
				if !ok {
					r.rep.Skipped++
					continue
				}
				delete(pending, rec.DecisionID)
				err = r.one(ctx, req, rec)
			case sandgate.EventAdmissionReviewed:
				err = r.one(ctx, rec, rec)
			}
			if err != nil {
				return err
			}
		}
		if next == "" || len(recs) == 0 {
			break
		}
		f.Cursor = next
	}
	r.rep.Skipped += len(pending)
	return nil
}

// one replays the decision recorded in dec whose input req records.
func (r *replayer) one(ctx context.Context, req, dec sandgate.AuditRecord) error {
	rec, exact, ok := r.record(req)
	if !ok {
		r.rep.Skipped++
		return nil
	}
	got, err := r.gate.Reevaluate(ctx, rec, r.cand)
	if err != nil {
		return err
	}
	r.rep.Replayed++
	at := dec.RecordedAt.UTC()
	r.rep.Through = &at
	if !exact {
		r.rep.Approximate++
	}
	dependent := false
	if doc, _ := req.Payload["spec"].(map[string]any); hasMasked(doc) {
		r.rep.MaskedInputs++
		if dependent, err = r.maskDependent(ctx, rec, doc, got); err != nil {
			return err
		}
		if dependent {
			r.rep.MaskDependent++
		}
	}

	oldAllow, oldRules := recordedVerdict(dec)
	newRules := denyRules(got.Violations)
	ex := api.ReplayExample{
		DecisionID: dec.DecisionID, RunID: dec.RunID, CorrelationID: dec.CorrelationID,
		Principal: dec.Actor, Team: dec.Team, Operation: string(rec.Input.Operation), RecordedAt: at,
		RecordedRevision: dec.PolicyRevision, RecordedAllow: oldAllow, RecordedRules: oldRules,
		CandidateAllow: got.Allow, CandidateRules: newRules, Approximate: !exact, MaskDependent: dependent,
	}
	if r.inForce != nil {
		if err := r.drift(ctx, rec, ex); err != nil {
			return err
		}
	}
	kind := -1
	switch {
	case oldAllow && !got.Allow:
		kind = newlyDenied
	case !oldAllow && got.Allow:
		kind = newlyAllowed
	case !oldAllow && !got.Allow && !slices.Equal(oldRules, newRules):
		kind = changedRules
	}
	if kind < 0 {
		r.rep.Unchanged++
		return nil
	}
	r.changes[kind].add(ex, without(newRules, oldRules), without(oldRules, newRules), r.examples)
	return nil
}

// drift evaluates the record with the policy in force and counts the
// decision when it differs from the record ex describes.
func (r *replayer) drift(ctx context.Context, rec sandgate.DecisionRecord, ex api.ReplayExample) error {
	d, err := r.gate.Reevaluate(ctx, rec, r.inForce)
	if err != nil {
		return err
	}
	rules := denyRules(d.Violations)
	if d.Allow == ex.RecordedAllow && slices.Equal(rules, ex.RecordedRules) {
		return nil
	}
	dr := r.rep.Drift
	dr.Count++
	if ex.RecordedRevision == r.current {
		dr.SameRevision++
	}
	if len(dr.Examples) < r.examples {
		ex.CandidateAllow, ex.CandidateRules = d.Allow, rules
		dr.Examples = append(dr.Examples, ex)
	}
	return nil
}

// record reads the decision record a request's event holds, and whether
// it is exact. A record written in the one shape (sandgate.DecisionRecord)
// is the input exactly as the engine saw it, whatever the operation.
// Records written before are rebuilt as well as they can be: as operation
// run (or review), with the submitter role for runs (the role POST
// /v1/runs requires), none for reviews, and the settings they kept or
// the gateway's; they are approximate.
func (r *replayer) record(req sandgate.AuditRecord) (sandgate.DecisionRecord, bool, bool) {
	if rec, ok := sandgate.ReadDecisionRecord(req.Payload); ok {
		return rec, true, true
	}
	doc, ok := req.Payload["spec"].(map[string]any)
	if !ok {
		return sandgate.DecisionRecord{}, false, false
	}
	spec, err := specFromDoc(doc)
	if err != nil {
		return sandgate.DecisionRecord{}, false, false
	}
	op := sandgate.OperationRun
	if req.Type == sandgate.EventAdmissionReviewed {
		op = sandgate.OperationReview
	}
	exact := true
	p := sandgate.Principal{Name: req.Actor, Team: req.Team, Roles: []sandgate.Role{}}
	if raw, ok := req.Payload["principal_roles"].([]any); ok {
		for _, v := range raw {
			if s, ok := v.(string); ok {
				p.Roles = append(p.Roles, sandgate.Role(s))
			}
		}
	} else {
		exact = false
		if op == sandgate.OperationRun {
			p.Roles = append(p.Roles, sandgate.RoleSubmitter)
		}
	}
	st, ok := recordedSettings(req.Payload["settings"])
	if !ok {
		exact = false
		st = r.fallback
		st.MountRoots = slices.Clone(st.MountRoots)
	}
	// A session's and a command's decisions recorded before the one shape
	// kept neither their operation nor their session in the input.
	if o, _ := req.Payload["operation"].(string); o != "" && o != string(op) {
		exact = false
	}
	return sandgate.DecisionRecord{Input: sandgate.AdmissionInput{
		APIVersion: sandgate.APIVersion, Operation: op, Principal: p,
		Request: sandgate.Normalized{RunSpec: spec}, Settings: st,
	}}, exact, true
}

// recordedSettings reads the settings a record written before the one
// shape kept.
func recordedSettings(v any) (sandgate.Settings, bool) {
	m, ok := v.(map[string]any)
	if !ok {
		return sandgate.Settings{}, false
	}
	st := sandgate.Settings{MountRoots: []string{}}
	if st.AirGapped, ok = m["air_gapped"].(bool); !ok {
		return sandgate.Settings{}, false
	}
	roots, _ := m["mount_roots"].([]any)
	for _, r := range roots {
		if s, ok := r.(string); ok {
			st.MountRoots = append(st.MountRoots, s)
		}
	}
	return st, true
}

// maskDependent reports whether the candidate's decision on in depends on
// the masked values of the recorded spec doc: when a violation's message
// shows a keyed hash, or when the decision changes (verdict or rules)
// with every masked value replaced by "". The replay cannot know the
// values themselves; a rule that treats a hash and "" alike but the real
// value otherwise goes unseen.
func (r *replayer) maskDependent(ctx context.Context, rec sandgate.DecisionRecord, doc map[string]any, got sandgate.Decision) (bool, error) {
	for _, v := range slices.Concat(got.Violations, got.Warnings) {
		if strings.Contains(v.Message, sandgate.MaskPrefix) {
			return true, nil
		}
	}
	spec, err := specFromDoc(unmasked(doc).(map[string]any))
	if err != nil {
		return true, nil
	}
	rec.Input.Request = sandgate.Normalized{RunSpec: spec}
	alt, err := r.gate.Reevaluate(ctx, rec, r.cand)
	if err != nil {
		return false, err
	}
	return alt.Allow != got.Allow || !slices.Equal(denyRules(alt.Violations), denyRules(got.Violations)), nil
}

// specFromDoc reads a recorded spec document back. It is not normalised
// again: it is the normalised spec the policy saw (mount sources resolved
// then, on the host that decided), masked.
func specFromDoc(doc map[string]any) (sandgate.RunSpec, error) {
	raw, err := json.Marshal(doc)
	if err != nil {
		return sandgate.RunSpec{}, err
	}
	var spec sandgate.RunSpec
	err = json.Unmarshal(raw, &spec)
	return spec, err
}
