// Package admission is sandgate's one gate. Every operation that reads or
// changes sandbox state (a run, a review, a session opened, a command in
// it, files in and out of it, a run's artifacts, a cancel, a session
// ended, and a policy replay's re-evaluation of a recorded decision)
// passes Gate.Admit, which takes it through the same steps in the same
// order:
//
//  1. the principal, authenticated by the gateway, passed in;
//  2. the target resolved and its ownership checked: another team's
//     object answers NOT-FOUND exactly as one that does not exist, before
//     a byte of the request's body is read;
//  3. the principal's bounds (uploads under way, bytes in flight, the
//     team's runs) before any expensive work;
//  4. normalisation, once, into the admitted spec (the body is read here);
//  5. the decision;
//  6. the decision recorded, synchronously;
//  7. the run or session stored;
//  8. handed to the executor.
//
// Each operation is a Request type that says what each step means for it
// (a step it does not take is a no-op); adding an operation is adding a
// type. The package knows no HTTP framework, database or container
// runtime: it meets them at the root package's interfaces and at the
// narrow ones declared here, which the gateway implements.
package admission

import (
	"context"
	"errors"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/sandgate/sandgate"
)

// Caller is who a request comes from, as the gateway authenticated it.
type Caller struct {
	Principal sandgate.Principal
	// SignIn is how the principal authenticated, as the trail keeps it
	// (keyed hashes where the site masks them): every event of the
	// request, and of what it makes, names the person with it.
	SignIn        sandgate.SignIn
	CorrelationID string
	// Origin is where the request came from as the trail records a
	// refusal of it (method, path, source address).
	Origin map[string]any
	// Via is the surface the request came through when not the HTTP API
	// ("mcp"), and Client the client that surface named; the trail
	// records both with each decision and file operation.
	Via    string
	Client *sandgate.ClientInfo
}

// Answer is what an admitted request yields; which fields are set
// depends on the request.
type Answer struct {
	// Run is the run made or read (Run, Command, ReadRun, Artifacts,
	// Cancel).
	Run *sandgate.Run
	// Replayed says Run was made earlier by a request with the same
	// Idempotency-Key, not now.
	Replayed bool
	// Session is the session opened or read (OpenSession, ReadSession,
	// EndSession).
	Session *sandgate.Session
	// Decision is a review's or a replay's decision.
	Decision *sandgate.Decision
	// File is what PutFiles wrote or GetFiles read.
	File sandgate.FileDigest
	// Artifacts are a run's collected files (Artifacts).
	Artifacts []sandgate.Artifact
	// Approval is the approval a run or a session waits for (a decision
	// that needs one), or the one read or decided.
	Approval *sandgate.Approval
	// Stream is the terminal or port connection opened (Terminal, Port).
	Stream *Stream
}

// Request is one operation through the gate. Its methods are the steps
// 2 to 8 of the pipeline, in order; each runs with what the steps before
// it left in the pass.
type Request interface {
	// operation names the request in errors and logs.
	operation() string
	target(ctx context.Context, p *pass) error
	bounds(ctx context.Context, p *pass) error
	normalize(ctx context.Context, p *pass) error
	decide(ctx context.Context, p *pass) error
	record(ctx context.Context, p *pass) error
	store(ctx context.Context, p *pass) error
	execute(ctx context.Context, p *pass) error
}

// none is the steps a request does not take, embedded by each.
type none struct{}

func (none) target(context.Context, *pass) error    { return nil }
func (none) bounds(context.Context, *pass) error    { return nil }
func (none) normalize(context.Context, *pass) error { return nil }
func (none) decide(context.Context, *pass) error    { return nil }
func (none) record(context.Context, *pass) error    { return nil }
func (none) store(context.Context, *pass) error     { return nil }
func (none) execute(context.Context, *pass) error   { return nil }

// Deps are what the gate drives. Admitter, Authorizer, Recorder, Runs,
// Live, Runner and Workspaces are required.
type Deps struct {
	Admitter sandgate.Admitter
	// Authorizer decides whether the caller may do a request's action on
	// its target (data.sandgate.authz).
	Authorizer sandgate.Authorizer
	Recorder   sandgate.Recorder
	Runs       sandgate.RunStore
	// Keys claims Idempotency-Keys: the one decision on a key. Without
	// it, a request with a key is refused.
	Keys sandgate.IdempotencyKeys
	// Sessions stores sessions; without it (or without Config.Sessions)
	// the session operations answer NOT-FOUND.
	Sessions sandgate.SessionStore
	// Approvals keeps approvals; without it a decision that needs one is
	// a denial that says so.
	Approvals sandgate.ApprovalStore
	// Artifacts lists runs' artifacts; without it a run has none.
	Artifacts sandgate.ArtifactStore
	// Slots counts runs against their teams across a cluster; without it
	// teams are counted on this node alone.
	Slots Slots
	// Live is what this node knows of the runs and sessions it executes.
	Live Live
	// Runner hands admitted work to the executor (step 8).
	Runner Runner
	// Workspaces checks and spools workspace input.
	Workspaces Workspaces
	// Masker hashes secrets for the trail and the store.
	Masker sandgate.Masker
	// Streams opens terminals and port connections in sessions; without
	// it those operations answer CONFLICT.
	Streams Streams
	// Transcripts keeps terminals' transcripts when the policy's data
	// asks for them; without it they are hashed, not kept.
	Transcripts Transcripts
	// Secrets says which stored secrets a request names (input.secrets);
	// without it a request that names any is refused.
	Secrets Secrets
	// Observer, when set, is told of decisions and refusals (metrics).
	Observer Observer
	// Accepting, when set, is asked before a new run, session or
	// command: its error refuses it (a node that was taken over and is
	// fenced starts no work).
	Accepting func() error
	Clock     sandgate.Clock
	IDs       sandgate.IDSource
	Logger    *slog.Logger
}

// Config is the gate's behaviour.
type Config struct {
	// Node names this gateway node in the trail and the store.
	Node string
	// AirGapped and MountRoots are the settings every policy input carries.
	AirGapped  bool
	MountRoots []string
	// Callbacks says completion callbacks can be signed; without it a run
	// that asks for one is refused.
	Callbacks bool
	// Sessions says the executor keeps sessions.
	Sessions bool
	// Uploads bounds the bodies being uploaded.
	Uploads UploadLimits
	// Capacity is the node's: its teams' limits are bounded by their
	// share of it, and its Sessions are the node's session budget. The
	// zero value bounds nothing.
	Capacity sandgate.Capacity
}

// Gate is the admission pipeline. It is safe for concurrent use.
type Gate struct {
	cfg      Config
	d        Deps
	teams    *Teams
	uploads  *uploads
	draining atomic.Bool
	// held are the requests waiting for approval whose secrets this node
	// holds.
	held heldRequests
}

// New returns the gate. teams is the node's count of its teams' runs,
// which the gateway shares for the runs and sessions it adopts.
func New(cfg Config, d Deps, teams *Teams) (*Gate, error) {
	switch {
	case d.Admitter == nil, d.Authorizer == nil, d.Recorder == nil, d.Runs == nil, d.Live == nil, d.Runner == nil, d.Workspaces == nil:
		return nil, errors.New("admission: Admitter, Authorizer, Recorder, Runs, Live, Runner and Workspaces are required")
	case !d.Masker.Keyed():
		return nil, errors.New("admission: a keyed Masker is required")
	}
	if d.Clock == nil {
		d.Clock = time.Now
	}
	if d.Logger == nil {
		d.Logger = slog.New(slog.DiscardHandler)
	}
	if d.Observer == nil {
		d.Observer = nopObserver{}
	}
	if teams == nil {
		teams = NewTeams()
	}
	cfg.Uploads = cfg.Uploads.withDefaults()
	return &Gate{cfg: cfg, d: d, teams: teams, uploads: newUploads(cfg.Uploads, d.Clock)}, nil
}

// Drain refuses new runs, sessions and commands from now on (the gateway
// is stopping); the requests on objects that exist go on.
func (g *Gate) Drain() { g.draining.Store(true) }

// Uploads reports the bytes held by uploads and how many are in flight,
// all principals together.
func (g *Gate) Uploads() (bytes int64, inFlight int) { return g.uploads.totals() }

// Admit takes r through the pipeline's steps in their one order and
// returns what it yields. Errors are *sandgate.Error with the code of the
// step that refused: NOT-FOUND, CONFLICT or FORBIDDEN at the target,
// RATE-LIMITED, STORAGE-FULL or TOO-LARGE at the bounds,
// INVALID-REQUEST at normalisation, POLICY-DENIED at the decision,
// AUDIT-UNAVAILABLE at the record, UNAVAILABLE at the store, and the
// executor's codes after.
func (g *Gate) Admit(ctx context.Context, who Caller, r Request) (Answer, error) {
	p := &pass{g: g, who: who, req: r}
	defer p.unwind()
	steps := [...]func(context.Context, *pass) error{
		principal,   // 1
		r.target,    // 2
		r.bounds,    // 3
		r.normalize, // 4
		r.decide,    // 5
		r.record,    // 6
		r.store,     // 7
		r.execute,   // 8
	}
	for _, step := range steps {
		if err := step(ctx, p); err != nil {
			if errors.Is(err, errAnswered) {
				break
			}
			return Answer{}, err
		}
	}
	return p.answer, nil
}

// errAnswered ends the pipeline early with the answer it has: an
// idempotent retry answered with the run its key made.
var errAnswered = errors.New("answered")

// principal is step 1: the gateway authenticated the caller; a request
// without a principal never reaches a target.
func principal(_ context.Context, p *pass) error {
	if p.who.Principal.Name == "" {
		return sandgate.Errorf(sandgate.CodeUnauthenticated, "the request has no principal")
	}
	return nil
}

// pass is one request on its way through the steps: what each step found
// for the next.
type pass struct {
	g   *Gate
	who Caller
	req Request

	// Step 2: the object the request acts on.
	run     *sandgate.Run
	session *sandgate.Session
	open    *LiveSession
	// Step 3: what the request holds of its principal's bounds.
	hold   *Hold
	upload *uploadHold
	// Step 4: the request as the policy judges it, and its body's upload.
	id      string
	input   sandgate.AdmissionInput
	spooled *Upload
	// Step 5.
	dec sandgate.Decision
	key string
	// approval is the approval the decision asks for (require_approval),
	// to be stored with the request pending.
	approval *sandgate.Approval
	// comment is an approver's, with their decision.
	comment string
	// Step 7, begun beside step 6 (storeAlongside).
	stored func() (sandgate.Run, error)

	answer Answer
	// undo are what the pass gives back if it ends before its work was
	// handed over; keep drops them.
	undo []func()
}

// onFail registers f to run if the pass ends before keep.
func (p *pass) onFail(f func()) { p.undo = append(p.undo, f) }

// keep hands what the pass holds over to the work it started.
func (p *pass) keep() { p.undo = nil }

func (p *pass) unwind() {
	for i := len(p.undo) - 1; i >= 0; i-- {
		p.undo[i]()
	}
}

// now is the gate's clock.
func (p *pass) now() time.Time { return p.g.d.Clock() }
