package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate"
)

// fakeAdmitter allows everything but privileged runs and images named
// "evil/…", and counts its calls.
type fakeAdmitter struct {
	calls  atomic.Int64
	mask   []string
	panics bool
	// limits are the teams' limits; read-only once the server runs.
	limits map[string]sandgate.TeamLimits

	mu     sync.Mutex
	inputs []sandgate.AdmissionInput
}

// last returns the last input of operation op.
func (a *fakeAdmitter) last(op sandgate.Operation) (sandgate.AdmissionInput, bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i := len(a.inputs) - 1; i >= 0; i-- {
		if a.inputs[i].Operation == op {
			return a.inputs[i], true
		}
	}
	return sandgate.AdmissionInput{}, false
}

func (a *fakeAdmitter) Decide(_ context.Context, in sandgate.AdmissionInput) (sandgate.Decision, error) {
	n := a.calls.Add(1)
	a.mu.Lock()
	a.inputs = append(a.inputs, in)
	a.mu.Unlock()
	if a.panics {
		panic("admitter exploded")
	}
	d := sandgate.Decision{
		Allow: true, PolicyRevision: "sha256:test", DecisionID: fmt.Sprintf("dec-%d", n),
		Spec: in.Request, Mask: a.mask,
	}
	if in.Request.Privileged {
		d.Allow = false
		d.Violations = append(d.Violations, sandgate.Violation{
			Rule: "no_privileged", Message: "privileged mode is forbidden", Controls: []string{"CIS-5.5"}, Action: "deny",
		})
	}
	if in.Operation == sandgate.OperationExec && in.Request.Command[0] == "forbidden" {
		d.Allow = false
		d.Violations = append(d.Violations, sandgate.Violation{Rule: "denied_exec_command", Message: "not in a session", Action: "deny"})
	}
	if in.Operation == sandgate.OperationTerminal {
		d.Enforcement.TerminalTranscripts = true
	}
	if in.Port != nil && in.Port.Number != 8080 {
		d.Allow = false
		d.Violations = append(d.Violations, sandgate.Violation{Rule: "session_port_not_admitted", Message: "port not admitted", Fix: "serve on 8080", Action: "deny"})
	}
	if strings.HasPrefix(in.Request.Image, "evil/") {
		d.Allow = false
		d.Violations = append(d.Violations, sandgate.Violation{
			Rule: "allowed_images", Message: "image not allowed", Action: "deny",
		})
	}
	if strings.HasPrefix(in.Request.Image, "approve/") && !slices.Contains(approvalRules(in), "image_approval") {
		d.Allow = false
		d.Approvals = append(d.Approvals, sandgate.Violation{Rule: "image_approval", Message: "this image needs approval", Action: "require_approval"})
	}
	if in.Request.Network == "bridge" {
		d.Warnings = append(d.Warnings, sandgate.Violation{Rule: "network_bridge", Message: "bridge network", Action: "warn"})
	}
	// Every secret asked for is bound to the run's egress, as the
	// default bundle's data would have it.
	for _, name := range in.Request.Secrets {
		d.Enforcement.Secrets = append(d.Enforcement.Secrets, sandgate.SecretBinding{Name: name, Destinations: in.Request.Egress,
			Header: "Authorization", Format: "Bearer {value}", Env: strings.ToUpper(name) + "_TOKEN"})
	}
	return d, nil
}

func approvalRules(in sandgate.AdmissionInput) []string {
	if in.Approval == nil {
		return nil
	}
	return in.Approval.Rules
}

func (a *fakeAdmitter) Defaults() sandgate.Defaults { return sandgate.BuiltinDefaults }

// fakeApprovals keeps approvals in memory.
type fakeApprovals struct {
	mu sync.Mutex
	m  map[string]sandgate.Approval
}

func (f *fakeApprovals) CreateApproval(_ context.Context, a *sandgate.Approval) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m[a.ID] = *a
	return nil
}

func (f *fakeApprovals) GetApproval(_ context.Context, id string) (*sandgate.Approval, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	a, ok := f.m[id]
	if !ok {
		return nil, sandgate.Errorf(sandgate.CodeNotFound, "approval %s not found", id)
	}
	return &a, nil
}

func (f *fakeApprovals) ListApprovals(_ context.Context, flt sandgate.ApprovalFilter) ([]sandgate.Approval, string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []sandgate.Approval{}
	for _, a := range f.m {
		if (flt.Team == "" || a.Team == flt.Team) && (flt.Status == "" || a.Status == flt.Status) {
			out = append(out, a)
		}
	}
	return out, "", nil
}

func (f *fakeApprovals) DecideApproval(_ context.Context, a *sandgate.Approval) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.m[a.ID].Status != sandgate.ApprovalPending {
		return sandgate.Errorf(sandgate.CodeConflict, "approval %s is not pending", a.ID)
	}
	f.m[a.ID] = *a
	return nil
}

func (f *fakeApprovals) ReopenApproval(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	a := f.m[id]
	a.Status, a.DecidedAt, a.DecidedBy = sandgate.ApprovalPending, nil, ""
	f.m[id] = a
	return nil
}

func (f *fakeApprovals) ExpireApprovals(_ context.Context, now time.Time, limit int) ([]sandgate.Approval, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []sandgate.Approval
	for id, a := range f.m {
		if a.Status == sandgate.ApprovalPending && !now.Before(a.ExpiresAt) && len(out) < limit {
			a.Status = sandgate.ApprovalExpired
			f.m[id] = a
			out = append(out, a)
		}
	}
	return out, nil
}

func (a *fakeAdmitter) TeamLimits(team string) sandgate.TeamLimits { return a.limits[team] }

func (a *fakeAdmitter) Enforcement(string) sandgate.Enforcement { return sandgate.Enforcement{} }

type fakePolicies struct {
	mu        sync.Mutex
	status    sandgate.PolicyStatus
	reloadErr error
}

func (p *fakePolicies) Status() sandgate.PolicyStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status
}

func (p *fakePolicies) Reload(context.Context) (sandgate.PolicyStatus, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.reloadErr != nil {
		return sandgate.PolicyStatus{}, p.reloadErr
	}
	p.status.Revision = "sha256:reloaded"
	return p.status, nil
}

// fakeRecorder keeps every event; Record fails while failing is set.
type fakeRecorder struct {
	mu      sync.Mutex
	events  []sandgate.Event
	failing atomic.Bool
	// uncertain makes Record fail as a commit cut by a failover does: its
	// outcome unknown.
	uncertain atomic.Bool
}

func (r *fakeRecorder) Emit(ev sandgate.Event) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
}

func (r *fakeRecorder) Queue(_ context.Context, ev sandgate.Event) error {
	if r.failing.Load() {
		return sandgate.Errorf(sandgate.CodeAuditUnavailable, "the trail is behind")
	}
	r.Emit(ev)
	return nil
}

func (r *fakeRecorder) Record(_ context.Context, evs ...sandgate.Event) error {
	if r.failing.Load() {
		return sandgate.Errorf(sandgate.CodeAuditUnavailable, "postgres is away")
	}
	if r.uncertain.Load() {
		return sandgate.WrapError(sandgate.CodeAuditUnavailable, fmt.Errorf("%w: unexpected EOF", sandgate.ErrCommitUncertain), "audit trail cannot commit")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, evs...)
	return nil
}

func (r *fakeRecorder) QueueDepth() int { return 7 }

func (r *fakeRecorder) ofType(t sandgate.EventType) []sandgate.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []sandgate.Event
	for _, e := range r.events {
		if e.Type == t {
			out = append(out, e)
		}
	}
	return out
}

func (r *fakeRecorder) all() []sandgate.Event {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

type fakeAudit struct {
	readyErr  error
	dbErr     error // DatabaseStatus's error: no writable primary
	exportErr error
	lastQuery sandgate.AuditFilter
	mu        sync.Mutex
	// trail, when set, answers the queries that name Types (a replay's)
	// with what the recorder holds (replay_test.go).
	trail *fakeRecorder
}

func (a *fakeAudit) Query(_ context.Context, f sandgate.AuditFilter) ([]sandgate.AuditRecord, string, error) {
	a.mu.Lock()
	a.lastQuery = f
	a.mu.Unlock()
	if f.Cursor == "bad" {
		return nil, "", sandgate.FieldError("cursor", "malformed cursor")
	}
	if len(f.Types) > 0 && a.trail != nil {
		return a.trail.query(f)
	}
	return []sandgate.AuditRecord{{Event: sandgate.Event{ID: "ev-1", Type: sandgate.EventRunRequested, CorrelationID: f.CorrelationID}, Seq: 1}}, "next-1", nil
}

// fakeExportLine is the JSON Lines export of fakeAudit.
const fakeExportLine = `{"event_id":"ev-1","type":"run.requested","event_time":"2026-01-02T03:04:05Z",` +
	`"chain_id":"chain-1","seq":1,"recorded_at":"2026-01-02T03:04:05Z","body":"{}","prev_hash":"00","hash":"11"}` + "\n"

func (a *fakeAudit) Export(_ context.Context, _ sandgate.AuditFilter, format sandgate.ExportFormat, w io.Writer) error {
	if a.exportErr != nil {
		return a.exportErr
	}
	if format == sandgate.ExportCSV {
		_, err := io.WriteString(w, "event_id,type\nev-1,run.requested\n")
		return err
	}
	_, err := io.WriteString(w, fakeExportLine)
	return err
}

func (a *fakeAudit) Verify(context.Context, sandgate.VerifyRange) (sandgate.VerifyReport, error) {
	return sandgate.VerifyReport{OK: true, Checked: 3}, nil
}

func (a *fakeAudit) Ready(context.Context) error { return a.readyErr }

func (a *fakeAudit) DatabaseStatus(context.Context) (string, error) {
	if a.dbErr != nil {
		return "", a.dbErr
	}
	return "primary 127.0.0.1:5433 of 127.0.0.1:5432, 127.0.0.1:5433", nil
}

// fakeStore is an in-memory RunStore and IdempotencyKeys.
type fakeStore struct {
	mu   sync.Mutex
	runs map[string]sandgate.Run
	keys map[string]fakeKey
	err  error
	// updateFailures makes that many UpdateRun calls fail.
	updateFailures int
	// lostAnswer makes CreateRun store the run and answer with this error:
	// a commit that landed while its answer was lost.
	lostAnswer error
}

func newFakeStore() *fakeStore {
	return &fakeStore{runs: map[string]sandgate.Run{}, keys: map[string]fakeKey{}}
}

// fakeKey is an idempotency key's claim.
type fakeKey struct {
	runID, digest string
	at            time.Time
}

func (s *fakeStore) CreateRun(_ context.Context, run *sandgate.Run) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return s.err
	}
	if _, ok := s.runs[run.ID]; ok {
		return sandgate.Errorf(sandgate.CodeConflict, "run %s already exists", run.ID)
	}
	s.runs[run.ID] = *run
	return s.lostAnswer
}

// ClaimIdempotencyKey claims as the run store does: a key held by a run
// that exists, or claimed less than a minute ago, stays its holder's.
func (s *fakeStore) ClaimIdempotencyKey(_ context.Context, principal, key, runID, digest string) (string, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.err != nil {
		return "", "", s.err
	}
	k := principal + "\x00" + key
	if cur, ok := s.keys[k]; ok && cur.runID != runID {
		if _, stored := s.runs[cur.runID]; stored || time.Since(cur.at) < time.Minute {
			return cur.runID, cur.digest, nil
		}
	}
	s.keys[k] = fakeKey{runID: runID, digest: digest, at: time.Now()}
	return "", "", nil
}

func (s *fakeStore) ReleaseIdempotencyKey(_ context.Context, principal, key, runID string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := principal + "\x00" + key
	if cur, ok := s.keys[k]; ok && cur.runID == runID {
		delete(s.keys, k)
	}
	return nil
}

func (s *fakeStore) UpdateRun(_ context.Context, run *sandgate.Run) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.updateFailures > 0 {
		s.updateFailures--
		return errors.New("connection reset")
	}
	s.runs[run.ID] = *run
	return nil
}

func (s *fakeStore) GetRun(_ context.Context, id string) (*sandgate.Run, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.runs[id]
	if !ok {
		return nil, sandgate.Errorf(sandgate.CodeNotFound, "no run %s", id)
	}
	return &r, nil
}

func (s *fakeStore) ListRuns(_ context.Context, f sandgate.RunFilter) ([]sandgate.Run, string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []sandgate.Run
	for _, r := range s.runs {
		if (f.Team == "" || r.Team == f.Team) && (f.State == "" || r.State == f.State) &&
			(f.Outcome == "" || r.Outcome == f.Outcome) && (f.SessionID == "" || r.Spec.SessionID == f.SessionID) {
			out = append(out, r)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID > out[j].ID })
	return out, "", nil
}

// fakeExecutor interprets the command: "echo ARGS…" prints and exits 0,
// "exit N" exits N, "block" prints "first" and waits for release or
// cancellation, "unavailable" fails with SBX-002.
type fakeExecutor struct {
	calls   atomic.Int64
	pingErr error

	mu      sync.Mutex
	running map[string]chan sandgate.Outcome
	jobs    []sandgate.Job
}

// fakeUsage is what every run of the fake executor that exits used.
func fakeUsage(at time.Time) *sandgate.Usage {
	i := func(v int64) *int64 { return &v }
	return &sandgate.Usage{CPUMS: i(250), CPUUserMS: i(200), CPUSystemMS: i(50), MemoryPeakBytes: i(8 << 20), PidsPeak: i(3),
		WallMS: 1500, Source: sandgate.UsageCgroupV2, SampledAt: &at}
}

func newFakeExecutor() *fakeExecutor {
	return &fakeExecutor{running: map[string]chan sandgate.Outcome{}}
}

func (e *fakeExecutor) Execute(ctx context.Context, job sandgate.Job) (sandgate.Result, error) {
	e.calls.Add(1)
	ch := make(chan sandgate.Outcome, 1)
	e.mu.Lock()
	e.running[job.RunID] = ch
	e.jobs = append(e.jobs, job)
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.running, job.RunID)
		e.mu.Unlock()
	}()
	start := time.Date(2026, 1, 1, 0, 0, 1, 0, time.UTC)
	end := start.Add(1500 * time.Millisecond)
	res := sandgate.Result{ContainerID: "c-" + job.RunID[:8], StartedAt: start, FinishedAt: end}

	cmd := job.Spec.Command
	// As the Docker executor does: into the run's buffers, then tell.
	emit := func(stream sandgate.Stream, p []byte) {
		buf := job.Stdout
		if stream == sandgate.Stderr {
			buf = job.Stderr
		}
		if buf != nil {
			p = buf.Write(p)
		}
		if job.Output != nil {
			job.Output(stream, p)
		}
	}
	if cmd[0] == "panic" {
		panic("executor bug")
	}
	if cmd[0] == "unavailable" {
		res.Outcome = sandgate.OutcomeError
		res.Error = &sandgate.ErrorInfo{Code: sandgate.CodeImageUnavailable, Message: "image not present"}
		return res, sandgate.Errorf(sandgate.CodeImageUnavailable, "image not present")
	}
	if job.SessionContainer {
		// A session's container runs until the session ends.
		job.Started(res.ContainerID, start)
		<-ctx.Done()
		res.Outcome = sandgate.OutcomeCancelled
		return res, nil
	}
	if len(cmd) > 1 && cmd[1] == "pull" && job.PullProgress != nil {
		// As the Docker executor does while it pulls the image.
		job.PullProgress(map[string]any{"image": job.Spec.Image, "attempt": 1, "layers": 2, "layers_done": 1, "final": false})
		job.PullProgress(map[string]any{"image": job.Spec.Image, "attempt": 1, "layers": 2, "layers_done": 2, "final": true})
	}
	if job.Started != nil {
		job.Started(res.ContainerID, start)
	}
	exit := func(code int) (sandgate.Result, error) {
		res.ExitCode = &code
		res.Usage = fakeUsage(end)
		res.Outcome = sandgate.OutcomeSucceeded
		if code != 0 {
			res.Outcome = sandgate.OutcomeFailed
		}
		return res, nil
	}
	switch cmd[0] {
	case "echo":
		out := strings.Join(cmd[1:], " ") + "\n"
		emit(sandgate.Stdout, []byte(out))
		res.Stdout = sandgate.Output{Data: out, Encoding: "utf-8", Bytes: int64(len(out))}
		return exit(0)
	case "stderr":
		out := strings.Join(cmd[1:], " ") + "\n"
		emit(sandgate.Stderr, []byte(out))
		res.Stderr = sandgate.Output{Data: out, Encoding: "utf-8", Bytes: int64(len(out))}
		return exit(0)
	case "exit":
		n, _ := strconv.Atoi(cmd[1])
		return exit(n)
	case "block":
		emit(sandgate.Stdout, []byte("first\n"))
		select {
		case o := <-ch:
			if o == sandgate.OutcomeCancelled {
				res.Outcome = o
				res.Stdout = sandgate.Output{Data: "first\n", Encoding: "utf-8", Bytes: 6}
				return res, nil
			}
			emit(sandgate.Stdout, []byte("second\n"))
			res.Stdout = sandgate.Output{Data: "first\nsecond\n", Encoding: "utf-8", Bytes: 13}
			return exit(0)
		case <-ctx.Done():
			res.Outcome = sandgate.OutcomeCancelled
			return res, nil
		}
	}
	return exit(0)
}

// release lets a blocked run finish successfully.
func (e *fakeExecutor) release(runID string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	ch, ok := e.running[runID]
	if ok {
		ch <- sandgate.OutcomeSucceeded
	}
	return ok
}

func (e *fakeExecutor) Cancel(_ context.Context, runID string) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	ch, ok := e.running[runID]
	if !ok {
		return sandgate.Errorf(sandgate.CodeNotFound, "run %s is not executing", runID)
	}
	select {
	case ch <- sandgate.OutcomeCancelled:
	default:
	}
	return nil
}

func (e *fakeExecutor) Ping(context.Context) error { return e.pingErr }

func (e *fakeExecutor) lastJob() sandgate.Job {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.jobs[len(e.jobs)-1]
}

type fakeSandboxes struct {
	err error
}

func (f *fakeSandboxes) Sandboxes(context.Context) ([]sandgate.Sandbox, error) {
	if f.err != nil {
		return nil, f.err
	}
	return []sandgate.Sandbox{{ContainerID: "c1", Name: "sandgate-x", RunID: "r1"}}, nil
}

func (f *fakeSandboxes) CleanupOrphans(context.Context) ([]sandgate.Sandbox, error) {
	if f.err != nil {
		return nil, f.err
	}
	return []sandgate.Sandbox{{ContainerID: "c2", Orphan: true}}, nil
}

// jsonMap decodes a JSON object.
func jsonMap(b []byte) map[string]any {
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	return m
}

// purgedEventID is an event the fake trail's retention dropped.
const purgedEventID = "0193a000-0000-7000-8000-00000000dead"

var fakeNote = sandgate.CheckpointNote{
	ChainID: "test-node-1", Origin: "sandgate.test-node/test-node-1", TreeSize: 3, RootHash: make([]byte, 32),
	Note:      "sandgate.test-node/test-node-1\n3\nAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\n\n— sandgate.test-node/test-node-1 AAAAAA==\n",
	CreatedAt: time.Date(2026, 11, 27, 0, 0, 0, 0, time.UTC),
}

func (a *fakeAudit) Checkpoint(_ context.Context, chain string) (sandgate.CheckpointNote, error) {
	if chain != "" && chain != fakeNote.ChainID {
		return sandgate.CheckpointNote{}, sandgate.Errorf(sandgate.CodeNotFound, "no chain %q", chain)
	}
	return fakeNote, nil
}

func (a *fakeAudit) InclusionProof(_ context.Context, id string, size int64) (sandgate.InclusionProof, error) {
	if id == "nope" {
		return sandgate.InclusionProof{}, sandgate.FieldError("event_id", "event_id must be a UUID")
	}
	if id == purgedEventID {
		return sandgate.InclusionProof{}, &sandgate.Error{Code: sandgate.CodePurged, Message: "retention dropped audit_events_2025_01",
			Details: map[string]any{"partition": "audit_events_2025_01"}}
	}
	return sandgate.InclusionProof{EventID: id, ChainID: fakeNote.ChainID, Seq: 2, LeafIndex: 1, TreeSize: 3,
		EventHash: make([]byte, 32), Hashes: [][]byte{make([]byte, 32), make([]byte, 32)}, Checkpoint: fakeNote}, nil
}

func (a *fakeAudit) ConsistencyProof(_ context.Context, chain string, from, to int64) (sandgate.ConsistencyProof, error) {
	return sandgate.ConsistencyProof{ChainID: fakeNote.ChainID, From: from, To: 3, FromRoot: make([]byte, 32),
		Hashes: [][]byte{make([]byte, 32)}, Checkpoint: fakeNote}, nil
}

func (a *fakeAudit) AddCosignature(_ context.Context, c sandgate.Cosignature) (sandgate.CheckpointNote, error) {
	cp := fakeNote
	cp.Cosignatures = []string{"— witness.example AAAAAA=="}
	return cp, nil
}

func (a *fakeAudit) Receipt(_ context.Context, runID string) (sandgate.Receipt, error) {
	return sandgate.Receipt{Format: sandgate.ReceiptFormat, RunID: runID, CreatedAt: fakeNote.CreatedAt,
		Events: []sandgate.ReceiptEvent{{EventID: "0193a000-0000-7000-8000-000000000001", Type: "run.requested", ChainID: fakeNote.ChainID,
			Seq: 2, Body: `{"run_id":"` + runID + `"}`, PrevHash: strings.Repeat("0", 64), Hash: strings.Repeat("1", 64),
			LeafIndex: 1, TreeSize: 3, Proof: []string{"AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA="}}},
		Checkpoints: []sandgate.ReceiptCheckpoint{{ChainID: fakeNote.ChainID, Note: fakeNote.Note}},
		Keys:        []string{"sandgate.test-node/test-node-1+00000000+AQ=="}}, nil
}

func (a *fakeAudit) RecordWitnessAlarm(_ context.Context, r sandgate.WitnessAlarmReport) (sandgate.WitnessAlarm, error) {
	if r.WitnessKey == "bad" {
		return sandgate.WitnessAlarm{}, sandgate.FieldError("witness_key", "not a witness key")
	}
	return sandgate.WitnessAlarm{EventID: "0193a000-0000-7000-8000-0000000000aa", Witness: "witness.example", WitnessKey: r.WitnessKey, Origin: fakeNote.Origin, ChainID: fakeNote.ChainID,
		Kind: "inconsistent", Detail: "the tree of 5 does not extend the tree of 3", SeenSize: 3, SeenRoot: "AAAA", OfferedSize: 5,
		OfferedRoot: "AAAB", RaisedAt: fakeNote.CreatedAt}, nil
}

// Exec runs a command of a session as Execute runs a run.
func (e *fakeExecutor) Exec(ctx context.Context, _ string, job sandgate.Job) (sandgate.Result, error) {
	return e.Execute(ctx, job)
}

// PutFiles reads what it is given and reports its size.
func (e *fakeExecutor) PutFiles(_ context.Context, _ string, _ sandgate.Normalized, up sandgate.FileUpload) (sandgate.FileDigest, error) {
	b, err := io.ReadAll(io.NewSectionReader(up.Body, 0, up.Size))
	if err != nil {
		return sandgate.FileDigest{}, err
	}
	sum := sha256.Sum256(b)
	return sandgate.FileDigest{Path: up.Path, Kind: up.Format, Bytes: int64(len(b)), SHA256: hex.EncodeToString(sum[:]), Entries: 1}, nil
}

// GetFiles answers every path with the same file.
func (e *fakeExecutor) GetFiles(_ context.Context, _ string, path string, w io.Writer, begin func(string)) (sandgate.FileDigest, error) {
	if path == "missing" {
		return sandgate.FileDigest{}, sandgate.Errorf(sandgate.CodeNotFound, "%s: no such file", path)
	}
	begin(sandgate.FileFormatFile)
	n, err := io.WriteString(w, "content\n")
	return sandgate.FileDigest{Path: path, Kind: sandgate.FileFormatFile, Bytes: int64(n)}, err
}

// fakeSessions keeps sessions in memory.
type fakeSessions struct {
	mu sync.Mutex
	m  map[string]sandgate.Session
}

func newFakeSessions() *fakeSessions { return &fakeSessions{m: map[string]sandgate.Session{}} }

func (f *fakeSessions) CreateSession(_ context.Context, ss *sandgate.Session) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.m[ss.ID] = *ss
	return nil
}

func (f *fakeSessions) UpdateSession(_ context.Context, ss *sandgate.Session) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.m[ss.ID]; !ok {
		return sandgate.Errorf(sandgate.CodeNotFound, "session %s not found", ss.ID)
	}
	f.m[ss.ID] = *ss
	return nil
}

func (f *fakeSessions) GetSession(_ context.Context, id string) (*sandgate.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	ss, ok := f.m[id]
	if !ok {
		return nil, sandgate.Errorf(sandgate.CodeNotFound, "session %s not found", id)
	}
	return &ss, nil
}

func (f *fakeSessions) ListSessions(_ context.Context, flt sandgate.SessionFilter) ([]sandgate.Session, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := []sandgate.Session{}
	for _, ss := range f.m {
		if (flt.Team == "" || ss.Team == flt.Team) && (flt.State == "" || ss.State == flt.State) && (flt.Node == "" || ss.Node == flt.Node) {
			out = append(out, ss)
		}
	}
	return out, nil
}

// generic returns v as encoding/json's generic form.
func generic(v any) any {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var g any
	if err := dec.Decode(&g); err != nil {
		return nil
	}
	return g
}

// fakeVault keeps secrets in memory, for the handlers' contract; the real
// vault's tests are package secrets' and secrets_test.go's.
type fakeVault struct {
	mu    sync.Mutex
	infos map[string]sandgate.SecretInfo
}

func (v *fakeVault) Put(_ context.Context, s sandgate.Subject, name, value string) (sandgate.SecretInfo, bool, error) {
	if err := sandgate.CheckSecretName("name", name); err != nil {
		return sandgate.SecretInfo{}, false, err
	}
	if err := sandgate.CheckSecretValue(value); err != nil {
		return sandgate.SecretInfo{}, false, err
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.infos == nil {
		v.infos = map[string]sandgate.SecretInfo{}
	}
	prev, ok := v.infos[name]
	at := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	info := sandgate.SecretInfo{Name: name, Version: prev.Version + 1, ValueHash: "hmac-sha256:00", KeyID: "k1",
		SetBy: s.Actor, SetAt: at, CreatedBy: s.Actor, CreatedAt: at}
	if ok {
		info.CreatedBy, info.CreatedAt = prev.CreatedBy, prev.CreatedAt
	}
	v.infos[name] = info
	return info, !ok, nil
}

func (v *fakeVault) List(context.Context) ([]sandgate.SecretInfo, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	var out []sandgate.SecretInfo
	for _, i := range v.infos {
		out = append(out, i)
	}
	return out, nil
}

func (v *fakeVault) Delete(_ context.Context, _ sandgate.Subject, name string) error {
	v.mu.Lock()
	defer v.mu.Unlock()
	if _, ok := v.infos[name]; !ok {
		return sandgate.Errorf(sandgate.CodeNotFound, "secret %s not found", name)
	}
	delete(v.infos, name)
	return nil
}

func (v *fakeVault) States(context.Context, []string) (map[string]sandgate.SecretState, error) {
	return nil, nil
}

func (v *fakeVault) Reveal(context.Context, []sandgate.SecretBinding) ([]sandgate.RunSecret, error) {
	return nil, sandgate.Errorf(sandgate.CodeNotFound, "no secrets")
}
