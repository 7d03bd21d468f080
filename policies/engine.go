package policies

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/google/uuid"
	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/metrics"
	"github.com/open-policy-agent/opa/v1/rego"
	"github.com/open-policy-agent/opa/v1/topdown"

	"github.com/sandgate/sandgate"
)

// DefaultDebounce is how long Watch waits after the last file change in
// the bundle directory before it reloads, so that an editor's or a
// deployment's burst of writes is loaded once, complete.
const DefaultDebounce = 250 * time.Millisecond

// maxPasses bounds evaluate–mutate rounds: a policy whose mutations do not
// settle after this many is denied.
const maxPasses = 4

// The rules of the violations the engine itself reports when it cannot get
// a decision from the policy. They fail closed.
const (
	RuleNoPolicy        = "no_policy"
	RulePolicyUndefined = "policy_undefined"
	RulePolicyError     = "policy_error"
)

// evalNoMetrics spares each evaluation OPA's timers, which nothing reads.
var evalNoMetrics = rego.EvalMetrics(metrics.NoOp())

// evalNotCancellable is the external cancel of evaluations whose context
// can never be cancelled: one that nobody cancels.
var evalNotCancellable = rego.EvalExternalCancel(topdown.NewCancel())

// fallbackMask is what the audit trail masks when no policy is loaded.
var fallbackMask = []string{"env", "stdin", "files.*.content"}

// Options configure an Engine.
type Options struct {
	// Dir is the bundle directory to load and watch; "" loads the bundle
	// embedded in the binary.
	Dir string
	// Settings are the gateway settings every input carries. Mount roots
	// are resolved (symlinks followed) once, here.
	Settings sandgate.Settings
	// Clock gives the evaluation time (rego.EvalTime) and event times.
	// Default time.Now.
	Clock sandgate.Clock
	// IDs gives each decision its decision_id. Default UUIDv7.
	IDs sandgate.IDSource
	// Events receives policy.loaded and policy.load_failed. Optional.
	Events sandgate.EventSink
	// Logger logs loads and reloads. Default: discard.
	Logger *slog.Logger
	// Debounce is Watch's quiet period after a file change. Default
	// DefaultDebounce.
	Debounce time.Duration
	// VerifyKeys, when set, are the keys every bundle must be signed by
	// (SANDGATE_POLICY_VERIFY_KEYS): an unsigned or wrongly signed bundle,
	// or one with a file changed or added after signing, is refused at
	// start and at every reload. The embedded bundle is unsigned, so Dir
	// must be set.
	VerifyKeys *VerifyKeys
	// Evaluator, when set, is where bundles not yet in force are loaded,
	// tested and evaluated: every load's tests (at start and at each
	// reload) and every candidate, each in a child process under the
	// evaluator's limits. Without one, they run in this process.
	Evaluator *Evaluator
}

// policy is one loaded, tested and prepared revision of a bundle.
type policy struct {
	query     rego.PreparedEvalQuery
	egress    rego.PreparedEvalQuery // EgressQuery
	authz     authzQueries           // PrincipalQuery, AuthzQuery
	revision  string
	modules   []sandgate.PolicyModule
	loadedAt  time.Time
	defaults  sandgate.Defaults
	mask      []string
	teams     teamConfig
	approvals approvalConfig
	// secrets are the bindings of data.sandgate.config.secrets by name.
	secrets map[string]sandgate.SecretBinding
	config  map[string]any
	// rules are the bundle's METADATA by rule, for the violations.
	rules map[string]ruleMeta
	// described are the rules as Status shows them.
	described []sandgate.PolicyRule
	// signature is who signed it; nil when no keys are pinned.
	signature *Signature
}

// Engine evaluates admission decisions against a policy bundle and keeps it
// current. It implements sandgate.Admitter and sandgate.PolicyAdmin. The
// zero Engine has no policy and denies every request.
type Engine struct {
	dir      string
	source   string
	settings sandgate.Settings
	clock    sandgate.Clock
	ids      sandgate.IDSource
	events   sandgate.EventSink
	log      *slog.Logger
	debounce time.Duration
	keys     *VerifyKeys
	eval     *Evaluator

	current atomic.Pointer[policy]

	// settingsTerms are the input's "settings" for the engine's own
	// settings, without and with air-gapped mode.
	settingsTerms [2]*ast.Term

	// loadMu serialises loads; mu guards the last error.
	loadMu    sync.Mutex
	mu        sync.Mutex
	lastErr   string
	lastErrAt *time.Time
}

var (
	_ sandgate.Admitter    = (*Engine)(nil)
	_ sandgate.PolicyAdmin = (*Engine)(nil)
)

// New loads, compiles and tests the bundle and prepares it for evaluation.
// It returns a POLICY-INVALID error, listing every problem in
// Details["errors"], when the bundle cannot be read or compiled, does not
// define data.sandgate.admission.decision, or fails its own tests.
func New(ctx context.Context, opts Options) (*Engine, error) {
	e := &Engine{
		dir:      opts.Dir,
		settings: opts.Settings,
		clock:    opts.Clock,
		ids:      opts.IDs,
		events:   opts.Events,
		log:      opts.Logger,
		debounce: opts.Debounce,
		keys:     opts.VerifyKeys,
		eval:     opts.Evaluator,
	}
	_, e.source = bundleFS(opts.Dir)
	if e.log == nil {
		e.log = slog.New(slog.DiscardHandler)
	}
	if e.debounce <= 0 {
		e.debounce = DefaultDebounce
	}
	roots := make([]string, 0, len(opts.Settings.MountRoots))
	for _, r := range opts.Settings.MountRoots {
		if !filepath.IsAbs(r) {
			return nil, sandgate.Errorf(sandgate.CodeInvalidRequest, "mount root %q is not an absolute path", r)
		}
		resolved, err := filepath.EvalSymlinks(r)
		if err != nil {
			e.log.Warn("mount root cannot be resolved; using it as written", "root", r, "err", err)
			resolved = r
		}
		roots = append(roots, filepath.Clean(resolved))
	}
	e.settings.MountRoots = roots
	for i, airGapped := range []bool{false, true} {
		st := e.settings
		st.AirGapped = st.AirGapped || airGapped
		e.settingsTerms[i] = settingsTerm(st)
	}
	if _, err := e.load(ctx, "start"); err != nil {
		return nil, err
	}
	return e, nil
}

func (e *Engine) now() time.Time {
	if e.clock == nil {
		return time.Now()
	}
	return e.clock()
}

func (e *Engine) newID() string {
	if e.ids != nil {
		return e.ids()
	}
	id, err := uuid.NewV7()
	if err != nil {
		return uuid.NewString()
	}
	return id.String()
}

func (e *Engine) logger() *slog.Logger {
	if e.log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return e.log
}

// Defaults are the bundle's defaults (data.sandgate.config.defaults) for
// sandgate.Normalize; with no policy loaded, sandgate.BuiltinDefaults.
func (e *Engine) Defaults() sandgate.Defaults {
	if p := e.current.Load(); p != nil {
		return p.defaults
	}
	return sandgate.BuiltinDefaults
}

// TeamLimits are the limits data.sandgate.config.team_limits sets for
// team in the policy in force; with no policy loaded, none.
func (e *Engine) TeamLimits(team string) sandgate.TeamLimits {
	if p := e.current.Load(); p != nil {
		return p.teams.limits(team)
	}
	return sandgate.TeamLimits{}
}

// Enforcement is what the policy in force tells the executor to hold
// team's runs to; with no policy loaded, gid 0 is still privileged and no
// pull goes anywhere.
func (e *Engine) Enforcement(team string) sandgate.Enforcement {
	if p := e.current.Load(); p != nil {
		return withHostGroups(p.teams.enforcement(team), e.settings.HostGroups)
	}
	return withHostGroups(sandgate.Enforcement{PrivilegedGIDs: []int64{0}}, e.settings.HostGroups)
}

// withHostGroups adds the host's groups (Settings.HostGroups) to the
// privileged gids the executor holds runs to.
func withHostGroups(enf sandgate.Enforcement, groups []sandgate.HostGroup) sandgate.Enforcement {
	for _, g := range groups {
		if !slices.Contains(enf.PrivilegedGIDs, g.GID) {
			enf.PrivilegedGIDs = append(enf.PrivilegedGIDs, g.GID)
		}
	}
	return enf
}

// PolicyConfig returns the configuration of the policy in force (the
// bundle's data.sandgate.config: defaults, maxima, allowed images, …), so
// that GET /v1/config reports what is enforced now, after every reload.
// With no policy loaded it returns nil. Callers must not modify the map.
func (e *Engine) PolicyConfig() map[string]any {
	if p := e.current.Load(); p != nil {
		return p.config
	}
	return nil
}

// Settings are the gateway settings the engine puts in every input, with
// the mount roots resolved.
func (e *Engine) Settings() sandgate.Settings {
	s := e.settings
	s.MountRoots = slices.Clone(s.MountRoots)
	s.HostGroups = slices.Clone(s.HostGroups)
	return s
}

// Status describes the policy in force and the last failed load, if the
// last load failed.
func (e *Engine) Status() sandgate.PolicyStatus {
	st := sandgate.PolicyStatus{Source: e.source, Modules: []sandgate.PolicyModule{}}
	if p := e.current.Load(); p != nil {
		st.Revision = p.revision
		st.Modules = slices.Clone(p.modules)
		st.LoadedAt = p.loadedAt
		st.Rules = slices.Clone(p.described)
		if p.signature != nil {
			st.SignedBy, st.SignedRevision = p.signature.KeyID, p.signature.Revision
		}
	}
	e.mu.Lock()
	st.LastError = e.lastErr
	if e.lastErrAt != nil {
		t := *e.lastErrAt
		st.LastErrorAt = &t
	}
	e.mu.Unlock()
	return st
}

// Reload reads the bundle again. A bundle identical to the one in force is
// a no-op. On any failure it keeps the policy in force, records the error
// in Status, emits policy.load_failed and returns POLICY-INVALID with the
// problems in Details["errors"]. The embedded bundle (no directory) is
// answered CONFLICT, saying how to load a bundle that can be reloaded.
func (e *Engine) Reload(ctx context.Context) (sandgate.PolicyStatus, error) {
	if e.dir == "" {
		// The embedded bundle cannot change under a running binary:
		// a reload would quietly do nothing, which reads as success.
		return e.Status(), sandgate.Errorf(sandgate.CodeConflict,
			"the policy in force is the bundle embedded in the binary, which cannot be reloaded: "+
				"start the gateway with SANDGATE_POLICY_DIR set to a bundle directory (a copy of policies/ to begin with) to load and reload your own")
	}
	return e.ReloadFor(ctx, "api")
}

// ReloadFor is Reload for a trigger the caller names ("sighup"), which the
// policy.loaded and policy.load_failed events record.
func (e *Engine) ReloadFor(ctx context.Context, trigger string) (sandgate.PolicyStatus, error) {
	_, err := e.load(ctx, trigger)
	return e.Status(), err
}

// load reads, compiles, tests and prepares the bundle and swaps it in. It
// reports whether a new revision went into force.
func (e *Engine) load(ctx context.Context, trigger string) (bool, error) {
	e.loadMu.Lock()
	defer e.loadMu.Unlock()
	old := e.current.Load()
	b, err := readVerifiedBundle(e.dir, e.keys)
	if err == nil && old != nil && b.revision == old.revision && b.signature.same(old.signature) {
		e.setLastError(nil)
		return false, nil
	}
	// With an evaluator, the bundle's tests run in its child, on the very
	// bytes this process then compiles and prepares without them.
	if err == nil && e.eval != nil {
		err = e.eval.check(ctx, e.source, b.files)
	}
	var p *policy
	if err == nil {
		p, err = e.prepare(ctx, b, e.eval == nil)
	}
	if err != nil {
		inv := invalid(e.source, err)
		errs, _ := inv.(*sandgate.Error).Details["errors"].([]string)
		if len(errs) == 0 {
			errs = []string{sandgate.ErrorMessageOf(inv)}
		}
		e.setLastError(errs)
		attempted := ""
		if b != nil {
			attempted = b.revision
		}
		e.logger().Error("policy bundle refused; the policy in force is kept",
			"source", e.source, "trigger", trigger, "attempted_revision", attempted, "errors", errs)
		e.emit(sandgate.NewPolicyLoadFailed(sandgate.Subject{PolicyRevision: revisionOf(old)}, time.Time{}, map[string]any{
			"source": e.source, "trigger": trigger, "attempted_revision": attempted, "errors": errs,
		}))
		return false, inv
	}
	e.current.Store(p)
	e.setLastError(nil)
	payload := map[string]any{
		"source": e.source, "trigger": trigger, "previous_revision": revisionOf(old), "modules": p.modules,
	}
	attrs := []any{"source", e.source, "trigger", trigger, "revision", p.revision, "previous_revision", revisionOf(old)}
	if p.signature != nil {
		payload["signer_key_id"], payload["signed_revision"] = p.signature.KeyID, p.signature.Revision
		attrs = append(attrs, "signer_key_id", p.signature.KeyID, "signed_revision", p.signature.Revision)
	}
	e.logger().Info("policy loaded", attrs...)
	e.emit(sandgate.NewPolicyLoaded(sandgate.Subject{PolicyRevision: p.revision}, time.Time{}, payload))
	return true, nil
}

func revisionOf(p *policy) string {
	if p == nil {
		return ""
	}
	return p.revision
}

// testedRevisions holds the revisions whose Rego tests passed in this
// process. A revision digests every file of its bundle (rules, data and
// tests), so the same revision loaded again (a reload that changed
// nothing, another engine on the same bundle) passes the same tests:
// they are not run again.
var testedRevisions sync.Map

// prepare compiles b, runs its tests (unless the evaluator has run them:
// tests false; or they passed for this revision before) and prepares the
// decision query.
func (e *Engine) prepare(ctx context.Context, b *bundle, tests bool) (*policy, error) {
	compiler, err := b.compile()
	if err != nil {
		return nil, err
	}
	infos, err := ruleInfos(compiler)
	if err != nil {
		return nil, err
	}
	defaults, err := b.defaults()
	if err != nil {
		return nil, &loadError{[]string{err.Error()}}
	}
	mask, err := b.mask()
	if err != nil {
		return nil, &loadError{[]string{err.Error()}}
	}
	teams, err := b.teamConfig()
	if err != nil {
		return nil, &loadError{[]string{err.Error()}}
	}
	if err := b.checkCallbackHosts(); err != nil {
		return nil, &loadError{[]string{err.Error()}}
	}
	if err := b.checkEgressData(); err != nil {
		return nil, &loadError{[]string{err.Error()}}
	}
	approvals, err := b.approvalConfig()
	if err != nil {
		return nil, &loadError{[]string{err.Error()}}
	}
	secrets, err := b.secretBindings()
	if err != nil {
		return nil, &loadError{[]string{err.Error()}}
	}
	store := b.store()
	if _, passed := testedRevisions.Load(b.revision); tests && (!passed || b.revision == "") {
		results, err := b.runTests(ctx, store, false)
		if err != nil {
			return nil, err
		}
		if failed := testFailures(results); len(failed) > 0 {
			return nil, &loadError{failed}
		}
		testedRevisions.Store(b.revision, true)
	}
	query, err := rego.New(
		rego.Query(DecisionQuery),
		rego.Compiler(compiler),
		rego.Store(store),
		rego.GenerateJSON(func(t *ast.Term, _ *rego.EvalContext) (any, error) { return t.Value, nil }),
		// A builtin that fails (a malformed data document, a rule applied
		// to a value it cannot take) fails the evaluation, which denies,
		// instead of leaving its rule undefined, which could admit.
		rego.StrictBuiltinErrors(true),
	).PrepareForEval(ctx)
	if err != nil {
		return nil, &loadError{astErrors(err)}
	}
	egress, err := prepareEgress(ctx, compiler, rego.Store(store))
	if err != nil {
		return nil, &loadError{astErrors(err)}
	}
	authz, err := prepareAuthz(ctx, compiler, rego.Store(store))
	if err != nil {
		return nil, &loadError{astErrors(err)}
	}
	if !authz.defined {
		e.logger().Warn("the policy bundle has no " + AuthzQuery + ": every API request but health will be refused (copy authz.rego from the default bundle)")
	}
	if mask == nil {
		mask = []string{}
	}
	return &policy{
		egress:    egress,
		authz:     authz,
		approvals: approvals,
		query:     query,
		revision:  b.revision,
		modules:   b.modules,
		loadedAt:  e.now(),
		defaults:  defaults,
		mask:      mask,
		teams:     teams,
		secrets:   secrets,
		config:    b.config(),
		rules:     ruleMetas(infos),
		described: b.describeRules(infos),
		signature: b.signature,
	}, nil
}

func (e *Engine) setLastError(errs []string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(errs) == 0 {
		e.lastErr, e.lastErrAt = "", nil
		return
	}
	t := e.now()
	e.lastErr = strings.Join(errs, "; ")
	e.lastErrAt = &t
}

func (e *Engine) emit(ev sandgate.Event) {
	if e.events == nil {
		return
	}
	ev.Time = e.now()
	ev.Actor = "sandgate"
	e.events.Emit(ev)
}

// Watch reloads the bundle when a file in its directory changes (after
// Options.Debounce of quiet), until ctx ends. Failed reloads keep the
// policy in force and are reported through Status, the log and
// policy.load_failed events. The embedded bundle is never watched. Watch
// returns nil when ctx ends, or an error when the directory cannot be
// watched. Other reload triggers (a signal, an API call) belong to the
// program that runs the engine: see ReloadFor.
func (e *Engine) Watch(ctx context.Context) error {
	var fsEvents <-chan fsnotify.Event
	var fsErrors <-chan error
	if e.dir != "" {
		w, err := fsnotify.NewWatcher()
		if err != nil {
			return fmt.Errorf("watch policy directory %s: %w", e.dir, err)
		}
		defer w.Close()
		if err := w.Add(e.dir); err != nil {
			return fmt.Errorf("watch policy directory %s: %w", e.dir, err)
		}
		fsEvents, fsErrors = w.Events, w.Errors
	}
	debounce := e.debounce
	if debounce <= 0 {
		debounce = DefaultDebounce
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-fsEvents:
			if !ok {
				fsEvents = nil
				continue
			}
			e.logger().Debug("policy directory changed", "event", ev.String())
			timer.Reset(debounce)
		case err, ok := <-fsErrors:
			if !ok {
				fsErrors = nil
				continue
			}
			e.logger().Warn("watching the policy directory", "err", err)
		case <-timer.C:
			e.reloadFrom(ctx, "file_change")
		}
	}
}

// reloadFrom reloads for a watcher; the outcome is logged and recorded by
// load itself.
func (e *Engine) reloadFrom(ctx context.Context, trigger string) {
	if _, err := e.load(ctx, trigger); err != nil && ctx.Err() == nil {
		e.logger().Debug("reload refused", "trigger", trigger, "err", err)
	}
}

// Decide evaluates in against the policy in force. in.Request must be
// normalised (sandgate.Normalize with Defaults). The engine's settings
// replace in.Settings, except that in.Settings.AirGapped can only add
// air-gapped mode and in.Settings.MountRoots are used when the engine has
// none. Mutations the policy asks for are applied to the request, which is
// normalised and evaluated again; Decision.Spec is the result. Decide
// always returns a decision: with no policy, an undefined result, an
// evaluation error or malformed output it is a deny naming the problem
// (rules no_policy, policy_undefined, policy_error). The error is non-nil
// only when ctx is done.
func (e *Engine) Decide(ctx context.Context, in sandgate.AdmissionInput) (sandgate.Decision, error) {
	d := sandgate.Decision{
		DecisionID: e.newID(),
		Violations: []sandgate.Violation{},
		Warnings:   []sandgate.Violation{},
		Mutations:  []sandgate.Mutation{},
		Spec:       in.Request,
	}
	p := e.current.Load()
	if p == nil {
		d.Mask = slices.Clone(fallbackMask)
		return deny(d, RuleNoPolicy, "no policy is loaded; every request is denied until one is"), ctx.Err()
	}
	d.PolicyRevision = p.revision
	d.Mask = slices.Clone(p.mask)
	hostGroups := e.settings.HostGroups
	if len(hostGroups) == 0 {
		// A candidate has no settings of its own: the recorded input's.
		hostGroups = in.Settings.HostGroups
	}
	d.Enforcement = withHostGroups(p.teams.enforcement(in.Principal.Team), hostGroups)
	if err := ctx.Err(); err != nil {
		return deny(d, RulePolicyError, "the request was cancelled before it was decided"), err
	}
	if in.APIVersion == "" {
		in.APIVersion = sandgate.APIVersion
	}
	if in.Operation == "" {
		in.Operation = sandgate.OperationRun
	}
	airGapped := 0
	if in.Settings.AirGapped {
		airGapped = 1
	}
	settings := e.settingsTerms[airGapped]
	if (len(e.settings.MountRoots) == 0 && len(in.Settings.MountRoots) > 0) || (len(e.settings.HostGroups) == 0 && len(in.Settings.HostGroups) > 0) {
		st := e.settings
		st.AirGapped = st.AirGapped || in.Settings.AirGapped
		if len(st.MountRoots) == 0 {
			st.MountRoots = in.Settings.MountRoots
		}
		st.HostGroups = hostGroups
		settings = settingsTerm(st)
	}
	now := e.now()

	spec := in.Request
	for pass := 1; ; pass++ {
		input := withPort(withSecrets(withApproval(withSession(inputValue(in.APIVersion, in.Operation, in.Principal, spec.RunSpec, settings), in.Session), in.Approval), in.Secrets), in.Port)
		rs, err := p.eval(ctx, input, now)
		if err != nil {
			if ctxErr := ctx.Err(); ctxErr != nil {
				return deny(d, RulePolicyError, "the request was cancelled while it was being decided"), ctxErr
			}
			e.logger().Error("policy evaluation failed", "revision", p.revision, "decision_id", d.DecisionID, "err", err)
			return deny(d, RulePolicyError, "policy evaluation failed: "+err.Error()), nil
		}
		if len(rs) == 0 || len(rs[0].Expressions) == 0 {
			return deny(d, RulePolicyUndefined, DecisionQuery+" is undefined for this request"), nil
		}
		out, err := decodeResult(rs[0].Expressions[0].Value, p.rules)
		if err != nil {
			return deny(d, RulePolicyError, "the policy's decision is malformed: "+err.Error()), nil
		}
		d.Violations, d.Warnings = out.violations, out.warnings
		if len(out.approvals) > 0 {
			// None is nil, as a decision read back from JSON has it.
			d.Approvals = out.approvals
		}
		if len(out.mutations) == 0 {
			d.Allow = out.allow && len(out.violations) == 0 && len(out.approvals) == 0
			if !d.Allow && len(out.violations) == 0 && len(out.approvals) == 0 {
				d.Violations = append(d.Violations, failClosed(RulePolicyError, "the policy denied without naming a violation"))
			}
			d.Spec = spec
			d.Enforcement.Secrets = p.bindings(spec.Secrets)
			return d, nil
		}
		if pass == maxPasses {
			return deny(d, RulePolicyError, fmt.Sprintf("the policy's mutations did not settle after %d evaluations", maxPasses)), nil
		}
		next, changed, err := applyMutations(spec, out.mutations, p.defaults)
		if err != nil {
			return deny(d, RulePolicyError, "the policy's mutation cannot be applied: "+sandgate.ErrorMessageOf(err)), nil
		}
		d.Mutations = append(d.Mutations, changed...)
		if len(changed) == 0 {
			// Every mutation asked for what the request already says:
			// this evaluation's verdict stands.
			d.Allow = out.allow && len(out.violations) == 0 && len(out.approvals) == 0
			if !d.Allow && len(out.violations) == 0 && len(out.approvals) == 0 {
				d.Violations = append(d.Violations, failClosed(RulePolicyError, "the policy denied without naming a violation"))
			}
			d.Spec = spec
			d.Enforcement.Secrets = p.bindings(spec.Secrets)
			return d, nil
		}
		spec = next
	}
}

// eval evaluates the decision query for input at now.
//
// Without an external cancel, OPA starts a goroutine per evaluation to
// watch ctx: starting it, waking it and waiting for its exit is a quarter
// of the cheapest evaluation's cost, and it wakes the other processor.
// context.AfterFunc cancels the evaluation the same way without one (it
// starts a goroutine only if ctx ends while the evaluation runs), and a
// context that cannot end needs nothing at all.
func (p *policy) eval(ctx context.Context, input ast.Value, now time.Time) (rego.ResultSet, error) {
	cancel := evalNotCancellable
	if ctx.Done() != nil {
		c := topdown.NewCancel()
		stop := context.AfterFunc(ctx, c.Cancel)
		defer stop()
		cancel = rego.EvalExternalCancel(c)
	}
	return p.query.Eval(ctx, rego.EvalParsedInput(input), rego.EvalTime(now), evalNoMetrics, cancel)
}

// deny makes d a fail-closed deny with one violation of rule.
func deny(d sandgate.Decision, rule, message string) sandgate.Decision {
	d.Allow = false
	d.Violations = append(d.Violations, failClosed(rule, message))
	return d
}

func failClosed(rule, message string) sandgate.Violation {
	return sandgate.Violation{Rule: rule, Message: truncateMessage(message), Controls: []string{}, Severity: UnratedSeverity, Action: "deny", Count: 1}
}

// IsPolicyInvalid reports whether err is the POLICY-INVALID error of a
// refused bundle, and returns its problems.
func IsPolicyInvalid(err error) ([]string, bool) {
	var se *sandgate.Error
	if !errors.As(err, &se) || se.Code != sandgate.CodePolicyInvalid {
		return nil, false
	}
	errs, _ := se.Details["errors"].([]string)
	return errs, true
}
