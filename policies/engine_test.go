package policies_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/policies"
	"github.com/sandgate/sandgate/sandgatetest"
)

func TestDecisionFields(t *testing.T) {
	e := newEngine(t, policies.Options{IDs: func() string { return "d-1" }})
	d := decide(t, e, baseSpec())
	st := e.Status()
	if !d.Allow {
		t.Fatalf("default spec denied: %+v", d.Violations)
	}
	if d.DecisionID != "d-1" {
		t.Errorf("DecisionID = %q, want d-1", d.DecisionID)
	}
	if d.PolicyRevision != st.Revision || !strings.HasPrefix(st.Revision, "sha256:") || len(st.Revision) != len("sha256:")+64 {
		t.Errorf("PolicyRevision = %q, status revision %q", d.PolicyRevision, st.Revision)
	}
	if diff := cmp.Diff([]string{"env", "stdin"}, d.Mask); diff != "" {
		t.Errorf("Mask (-want +got):\n%s", diff)
	}
	if d.Violations == nil || d.Warnings == nil || d.Mutations == nil {
		t.Errorf("nil lists in %+v: they must encode as []", d)
	}
	if d.Spec.Image != "sandgate/sandbox:latest" || d.Spec.User != "10001:10001" {
		t.Errorf("Spec = %+v, want the normalised request", d.Spec)
	}
	if st.Source != policies.EmbeddedSource || st.LastError != "" || !st.LoadedAt.Equal(fixedNow) {
		t.Errorf("Status = %+v", st)
	}
	var names []string
	for _, m := range st.Modules {
		names = append(names, m.Name)
		if len(m.SHA256) != 64 {
			t.Errorf("module %s sha256 %q", m.Name, m.SHA256)
		}
	}
	for _, want := range []string{"data.json", "decision.rego", "mounts.rego", "mounts_test.rego"} {
		if !contains(names, want) {
			t.Errorf("modules %v lack %s", names, want)
		}
	}
}

// TestConcurrentDecisions runs decisions side by side (under -race in make
// test): their inputs share the terms the engine makes once.
func TestConcurrentDecisions(t *testing.T) {
	e := newEngine(t, policies.Options{IDs: func() string { return "d" }})
	violating, bridged := baseSpec(), baseSpec()
	violating.Privileged, violating.Network, violating.CapAdd = true, "host", []string{"SYS_ADMIN"}
	bridged.Network, bridged.PullPolicy = "bridge", sandgate.PullAlways
	type job struct {
		spec      sandgate.Normalized
		airGapped bool
	}
	var jobs []job
	var want []sandgate.Decision
	for _, s := range []sandgate.RunSpec{baseSpec(), violating, bridged} {
		for _, airGapped := range []bool{false, true} {
			n, err := sandgate.Normalize(s, e.Defaults())
			if err != nil {
				t.Fatal(err)
			}
			d, err := e.Decide(context.Background(), sandgate.AdmissionInput{Request: n, Settings: sandgate.Settings{AirGapped: airGapped}})
			if err != nil {
				t.Fatal(err)
			}
			jobs = append(jobs, job{n, airGapped})
			want = append(want, d)
		}
	}
	errs := make(chan error, 4)
	for g := range 4 {
		go func() {
			for i := range 50 {
				k := (g + i) % len(jobs)
				ctx, cancel := context.WithCancel(context.Background())
				d, err := e.Decide(ctx, sandgate.AdmissionInput{Request: jobs[k].spec, Settings: sandgate.Settings{AirGapped: jobs[k].airGapped}})
				cancel()
				if err == nil && !cmp.Equal(want[k], d) {
					err = errors.New(cmp.Diff(want[k], d))
				}
				if err != nil {
					errs <- err
					return
				}
			}
			errs <- nil
		}()
	}
	for range 4 {
		if err := <-errs; err != nil {
			t.Errorf("concurrent decision differs (-sequential +concurrent):\n%v", err)
		}
	}
}

func TestDefaultsFromData(t *testing.T) {
	dir := copyBundle(t)
	editData(t, dir, `"user": "10001:10001"`, `"user": "20000:20000"`)
	e := newEngine(t, policies.Options{Dir: dir})
	want := sandgate.Defaults{
		Image: "sandgate/sandbox:latest", User: "20000:20000", Network: "none",
		Resources:      sandgate.Resources{MemoryMB: 512, CPUs: 1, Pids: 256, TmpfsMB: 64, Nofile: 1024, WorkspaceMB: 256},
		TimeoutSeconds: 300, OutputLimitBytes: 1 << 20, PullPolicy: sandgate.PullNever,
		ArtifactLimitBytes: 64 << 20, WorkspaceWorkdir: "/workspace",
		EgressLimits:              sandgate.EgressLimits{Connections: 256, Bytes: 1 << 30, BytesPerSecond: 64 << 20},
		SessionIdleTimeoutSeconds: 600, SessionMaxLifetimeSeconds: 3600,
		SessionKeepalive: map[string][]string{
			"*":               {"sleep", "infinity"},
			"sandgate/python": {"python3", "-c", "import signal\nwhile True: signal.pause()"},
			"sandgate/node":   {"node", "-e", "setInterval(() => {}, 1 << 30)"},
		},
		Languages: map[string]string{
			"shell": "sandgate/sandbox:latest", "python": "sandgate/python:3",
			"node": "sandgate/node:20", "toolchain": "sandgate/toolchain:1",
		},
	}
	if diff := cmp.Diff(want, e.Defaults()); diff != "" {
		t.Errorf("Defaults (-want +got):\n%s", diff)
	}
	if d := decide(t, e, baseSpec()); !d.Allow || *d.Spec.UID != 20000 {
		t.Errorf("allow=%v uid=%v", d.Allow, d.Spec.UID)
	}
}

func TestRevisionIsContentHash(t *testing.T) {
	a := newEngine(t, policies.Options{Dir: copyBundle(t)})
	b := newEngine(t, policies.Options{Dir: copyBundle(t)})
	emb := newEngine(t, policies.Options{})
	if a.Status().Revision != b.Status().Revision || a.Status().Revision != emb.Status().Revision {
		t.Errorf("same files, different revisions: %s %s %s", a.Status().Revision, b.Status().Revision, emb.Status().Revision)
	}
	dir := copyBundle(t)
	writeFile(t, dir, "ports.rego", readFile(t, dir, "ports.rego")+"\n")
	c := newEngine(t, policies.Options{Dir: dir})
	if c.Status().Revision == a.Status().Revision {
		t.Errorf("a changed file kept revision %s", a.Status().Revision)
	}
}

// TestMalformedDataRefused: a data.json whose lists, actions, maxima or
// exemptions have the wrong shape is refused at load, naming the bundle
// test that caught it, rather than loaded to fail (or admit) at decision
// time.
func TestMalformedDataRefused(t *testing.T) {
	tests := []struct {
		name, old, new, test string
	}{
		{"number among sensitive paths", `"sensitive_paths": ["/etc"`, `"sensitive_paths": [7, "/etc"`, "test_data_lists_hold_strings"},
		{"empty allowed image", `"allowed_images": [`, `"allowed_images": ["", `, "test_data_lists_hold_strings"},
		{"capabilities not a list", `"allowed_capabilities": ["NET_BIND_SERVICE"]`, `"allowed_capabilities": "NET_BIND_SERVICE"`, "test_data_lists_hold_strings"},
		{"unknown action", `"actions": {}`, `"actions": {"no_privileged": "allow"}`, "test_data_actions_are_deny_warn_or_require_approval"},
		{"maximum as a string", `"cpus": 4,`, `"cpus": "4",`, "test_data_maxima_are_positive_numbers"},
		{"require_digest as a string", `"require_digest": false`, `"require_digest": "no"`, "test_data_require_digest_is_boolean"},
		{"team directory out of the roots", `"team_mount_dirs": {}`, `"team_mount_dirs": {"payments": ["payments", "../search"]}`, "test_data_team_mount_dirs_are_relative"},
		{"absolute team directory", `"team_mount_dirs": {}`, `"team_mount_dirs": {"payments": ["/etc"]}`, "test_data_team_mount_dirs_are_relative"},
		{"glob within a Docker Hub namespace", `"allowed_images": ["sandgate/sandbox"`, `"allowed_images": ["sandgate/*"`, "test_data_allowed_images_are_exact_or_registry_qualified"},
		{"glob in the registry's name", `"allowed_images": ["sandgate/sandbox"`, `"allowed_images": ["*.example.com/sandgate/*"`, "test_data_allowed_images_are_exact_or_registry_qualified"},
		{"memory minimum below Docker's", `"memory_mb": 6,`, `"memory_mb": 1,`, "test_data_minima_cover_the_executor"},
		{"cpu minimum below Docker's", `"cpus": 0.01,`, `"cpus": 0.001,`, "test_data_minima_cover_the_executor"},
		{"capability Linux does not have", `"allowed_capabilities": ["NET_BIND_SERVICE"]`, `"allowed_capabilities": ["NET_BIND_SERVICE", "SUPERPOWERS"]`, "test_data_capabilities_are_linux_capabilities"},
		{"image digests of a name not allowed", `"image_digests": {}`, `"image_digests": {"sandgate/python:3.12": ["sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"]}`, "test_data_image_digests_are_allowed_names_and_digests"},
		{"image digest not sha256", `"image_digests": {}`, `"image_digests": {"sandgate/python:3": ["sha256:abc"]}`, "test_data_image_digests_are_allowed_names_and_digests"},
		{"exemption with a bad date", `"exemptions": []`, `"exemptions": [{"principal": "alice", "rule": "no_privileged", "expires": "next week", "reason": "r"}]`, "test_data_exemptions_are_well_formed"},
	}
	if testing.Short() {
		// Each case loads and tests the whole bundle (about a second);
		// the unit tier keeps two kinds of malformed data, make test all.
		tests = tests[:2]
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := copyBundle(t)
			editData(t, dir, tt.old, tt.new)
			_, err := policies.New(context.Background(), policies.Options{Dir: dir})
			errs, ok := policies.IsPolicyInvalid(err)
			if !ok || !strings.Contains(strings.Join(errs, " "), tt.test) {
				t.Fatalf("New = %v, want POLICY-INVALID naming %s", err, tt.test)
			}
		})
	}
}

func TestExemptions(t *testing.T) {
	dir := copyBundle(t)
	editData(t, dir, `"exemptions": []`, `"exemptions": [
		{"principal": "alice", "rule": "no_published_ports", "expires": "2026-06-01T13:00:00Z", "reason": "ENG-7 load test"},
		{"team": "payments", "rule": "memory_limit", "expires": "2026-06-01T11:00:00Z", "reason": "expired"}
	]`)
	tests := []struct {
		name      string
		now       time.Time
		principal sandgate.Principal
		spec      func(*sandgate.RunSpec)
		wantAllow bool
		wantWarn  []string
	}{
		{"principal exempt before expiry", fixedNow, sandgate.Principal{Name: "alice", Team: "payments"},
			func(s *sandgate.RunSpec) { s.Ports = []string{"8080"} }, true, []string{"no_published_ports"}},
		{"principal exempt after expiry", fixedNow.Add(2 * time.Hour), sandgate.Principal{Name: "alice", Team: "payments"},
			func(s *sandgate.RunSpec) { s.Ports = []string{"8080"} }, false, []string{}},
		{"someone else", fixedNow, sandgate.Principal{Name: "bob", Team: "payments"},
			func(s *sandgate.RunSpec) { s.Ports = []string{"8080"} }, false, []string{}},
		{"expired team exemption", fixedNow, sandgate.Principal{Name: "alice", Team: "payments"},
			func(s *sandgate.RunSpec) { s.Resources.MemoryMB = 8192 }, false, []string{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			now := tt.now
			e := newEngine(t, policies.Options{Dir: dir, Clock: func() time.Time { return now }})
			s := baseSpec()
			tt.spec(&s)
			n, err := sandgate.Normalize(s, e.Defaults())
			if err != nil {
				t.Fatal(err)
			}
			d, err := e.Decide(context.Background(), sandgate.AdmissionInput{Principal: tt.principal, Request: n})
			if err != nil {
				t.Fatal(err)
			}
			if d.Allow != tt.wantAllow {
				t.Errorf("Allow = %v, want %v: %+v", d.Allow, tt.wantAllow, d.Violations)
			}
			if diff := cmp.Diff(tt.wantWarn, ruleNames(d.Warnings)); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
			for _, w := range d.Warnings {
				if w.Action != "warn" || !strings.Contains(w.Message, "ENG-7 load test") {
					t.Errorf("warning %+v does not name its exemption", w)
				}
			}
		})
	}
}

func TestRequireDigest(t *testing.T) {
	dir := copyBundle(t)
	editData(t, dir, `"require_digest": false`, `"require_digest": true`)
	pinned := "sandgate/sandbox@sha256:" + strings.Repeat("ab", 32)
	// The bundle's own tests insist that the default image and each
	// language's image pass, so turning the switch on means pinning them
	// too.
	if _, err := policies.New(context.Background(), policies.Options{Dir: dir}); err == nil {
		t.Fatal("require_digest with an unpinned default image was accepted")
	}
	editData(t, dir, `"image": "sandgate/sandbox:latest"`, `"image": "`+pinned+`"`)
	if _, err := policies.New(context.Background(), policies.Options{Dir: dir}); err == nil || !strings.Contains(err.Error(), "test_data_language_images_are_allowed") {
		t.Fatalf("require_digest with unpinned language images = %v, want the bundle refused", err)
	}
	for _, l := range []string{`"shell": "sandgate/sandbox:latest"`, `"python": "sandgate/python:3"`, `"node": "sandgate/node:20"`, `"toolchain": "sandgate/toolchain:1"`} {
		name, image, _ := strings.Cut(l, ": ")
		editData(t, dir, l, name+`: "`+strings.Trim(image, `"`)+"@sha256:"+strings.Repeat("cd", 32)+`"`)
	}
	e := newEngine(t, policies.Options{Dir: dir})
	if d := decide(t, e, baseSpec()); !d.Allow {
		t.Errorf("pinned default image denied: %+v", d.Violations)
	}
	unpinned := baseSpec()
	unpinned.Image = "sandgate/sandbox:latest"
	if d := decide(t, e, unpinned); d.Allow || !contains(ruleNames(d.Violations), "image_digest") {
		t.Errorf("unpinned image: allow=%v %+v", d.Allow, d.Violations)
	}
}

func TestActionOverride(t *testing.T) {
	dir := copyBundle(t)
	editData(t, dir, `"actions": {}`, `"actions": {"read_only_rootfs": "warn"}`)
	e := newEngine(t, policies.Options{Dir: dir})
	s := baseSpec()
	s.ReadOnlyRootfs = boolPtr(false)
	d := decide(t, e, s)
	if !d.Allow || !cmp.Equal([]string{"read_only_rootfs"}, ruleNames(d.Warnings)) {
		t.Errorf("allow=%v warnings=%+v violations=%+v", d.Allow, d.Warnings, d.Violations)
	}
}

func TestReload(t *testing.T) {
	dir := copyBundle(t)
	rec := &events{}
	e := newEngine(t, policies.Options{Dir: dir, Events: rec})
	rev0 := e.Status().Revision
	big := baseSpec()
	big.Resources.MemoryMB = 6000
	if d := decide(t, e, big); d.Allow {
		t.Fatal("6000 MB admitted under the default maximum")
	}

	// A valid change is applied.
	editData(t, dir, `"memory_mb": 4096`, `"memory_mb": 8192`)
	st, err := e.Reload(context.Background())
	if err != nil {
		t.Fatalf("Reload: %v", err)
	}
	rev1 := st.Revision
	if rev1 == rev0 {
		t.Fatal("revision unchanged after a change")
	}
	if d := decide(t, e, big); !d.Allow || d.PolicyRevision != rev1 {
		t.Errorf("after raising the maximum: allow=%v revision=%s %+v", d.Allow, d.PolicyRevision, d.Violations)
	}
	if ev := rec.last(); ev.Type != sandgate.EventPolicyLoaded || ev.PolicyRevision != rev1 || ev.Outcome != "success" {
		t.Errorf("last event %+v, want policy.loaded with %s", ev, rev1)
	}

	// An unchanged bundle is a no-op.
	n := len(rec.types())
	if _, err := e.Reload(context.Background()); err != nil {
		t.Fatal(err)
	}
	if len(rec.types()) != n {
		t.Errorf("a no-op reload emitted %v", rec.types()[n:])
	}

	refused := []struct {
		name  string
		edit  func()
		undo  func()
		wants string
	}{
		{"compile error", func() { writeFile(t, dir, "broken.rego", "package sandgate.admission\n\nfinding contains x if {\n") },
			func() { os.Remove(filepath.Join(dir, "broken.rego")) }, "broken.rego"},
		{"unsafe variable", func() {
			writeFile(t, dir, "broken.rego", "package sandgate.admission\n\nfinding contains x if { y := 1 }\n")
		}, func() { os.Remove(filepath.Join(dir, "broken.rego")) }, "broken.rego"},
		{"failing Rego test", func() {
			writeFile(t, dir, "extra_test.rego", "package sandgate.extra_test\n\nimport data.sandgate.admission\n\ntest_fails if {\n\tadmission.decision.allow == false with input as {}\n\tfalse\n}\n")
		}, func() { os.Remove(filepath.Join(dir, "extra_test.rego")) }, "test_fails"},
		{"data breaks the bundle's tests", func() { editData(t, dir, `"memory_mb": 512`, `"memory_mb": 999999`) },
			func() { editData(t, dir, `"memory_mb": 999999`, `"memory_mb": 512`) }, "test_data_defaults_within_maxima"},
		{"malformed data", func() { writeFile(t, dir, "extra.json", "{") },
			func() { os.Remove(filepath.Join(dir, "extra.json")) }, "extra.json"},
		{"no decision", func() {
			writeFile(t, dir, "decision.rego.bak", readFile(t, dir, "decision.rego"))
			writeFile(t, dir, "decision.rego", "package sandgate.admission\n\nviolations := []\n")
		}, func() {
			writeFile(t, dir, "decision.rego", readFile(t, dir, "decision.rego.bak"))
			os.Remove(filepath.Join(dir, "decision.rego.bak"))
		}, "does not define data.sandgate.admission.decision"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			tt.edit()
			defer tt.undo()
			st, err := e.Reload(context.Background())
			errs, ok := policies.IsPolicyInvalid(err)
			if !ok {
				t.Fatalf("Reload error = %v, want POLICY-INVALID", err)
			}
			if !strings.Contains(strings.Join(errs, "\n"), tt.wants) {
				t.Errorf("errors %q do not mention %q", errs, tt.wants)
			}
			if st.Revision != rev1 || st.LastError == "" || st.LastErrorAt == nil {
				t.Errorf("status after refusal: %+v", st)
			}
			if d := decide(t, e, big); !d.Allow || d.PolicyRevision != rev1 {
				t.Errorf("the old policy no longer answers: allow=%v revision=%s", d.Allow, d.PolicyRevision)
			}
			ev := rec.last()
			if ev.Type != sandgate.EventPolicyLoadFailed || ev.PolicyRevision != rev1 || ev.Outcome != "failure" {
				t.Errorf("last event %+v, want policy.load_failed", ev)
			}
		})
	}

	// Once the directory is good again, the error clears.
	st, err = e.Reload(context.Background())
	if err != nil || st.LastError != "" || st.Revision != rev1 {
		t.Errorf("after undoing: err=%v status=%+v", err, st)
	}
}

func TestWatchFileChange(t *testing.T) {
	dir := copyBundle(t)
	e := newEngine(t, policies.Options{Dir: dir, Debounce: 20 * time.Millisecond})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- e.Watch(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Watch: %v", err)
		}
	}()
	rev0 := e.Status().Revision

	// A broken file is refused; the old revision stays.
	// Watch may not be watching yet: write until the change is seen.
	sandgatetest.WaitFor(t, "the broken file to be refused", 10*time.Second, func() bool {
		writeFile(t, dir, "broken.rego", "package sandgate.admission\n\nfinding contains {\n")
		return e.Status().LastError != ""
	})
	if e.Status().Revision != rev0 {
		t.Fatalf("broken bundle went into force")
	}
	// Fixing it and making a valid change is applied.
	os.Remove(filepath.Join(dir, "broken.rego"))
	editData(t, dir, `"pids": 1024`, `"pids": 2048`)
	sandgatetest.WaitFor(t, "the fixed bundle to be in force", 10*time.Second, func() bool { return e.Status().Revision != rev0 && e.Status().LastError == "" })
	s := baseSpec()
	s.Resources.Pids = 1500
	if d := decide(t, e, s); !d.Allow {
		t.Errorf("1500 pids still denied after the watched change: %+v", d.Violations)
	}
}

// TestReloadFor: a reload for a named trigger puts a changed bundle in
// force and records the trigger.
func TestReloadFor(t *testing.T) {
	dir := copyBundle(t)
	e := newEngine(t, policies.Options{Dir: dir})
	rev0 := e.Status().Revision
	editData(t, dir, `"pids": 1024`, `"pids": 2048`)
	st, err := e.ReloadFor(context.Background(), "sighup")
	if err != nil || st.Revision == rev0 {
		t.Fatalf("ReloadFor = %+v, %v; want a new revision", st, err)
	}
}

// TestFailClosed: whatever goes wrong, the answer is a deny with a reason.
func TestFailClosed(t *testing.T) {
	t.Run("empty bundle is refused", func(t *testing.T) {
		_, err := policies.New(context.Background(), policies.Options{Dir: t.TempDir()})
		if errs, ok := policies.IsPolicyInvalid(err); !ok || !strings.Contains(strings.Join(errs, " "), "does not define") {
			t.Errorf("New(empty dir) = %v, want POLICY-INVALID", err)
		}
	})
	t.Run("missing directory is refused", func(t *testing.T) {
		_, err := policies.New(context.Background(), policies.Options{Dir: filepath.Join(t.TempDir(), "nope")})
		if _, ok := policies.IsPolicyInvalid(err); !ok {
			t.Errorf("New(missing dir) = %v, want POLICY-INVALID", err)
		}
	})
	t.Run("no policy", func(t *testing.T) {
		var e policies.Engine
		d, err := e.Decide(context.Background(), sandgate.AdmissionInput{Request: sandgate.Normalized{RunSpec: baseSpec()}})
		if err != nil {
			t.Fatal(err)
		}
		assertDenied(t, d, policies.RuleNoPolicy)
		if d.DecisionID == "" || len(d.Mask) == 0 {
			t.Errorf("decision %+v lacks an ID or a mask", d)
		}
	})
	bundles := []struct {
		name string
		rego string
		rule string
	}{
		{"undefined decision", `package sandgate.admission

decision := {"allow": true} if input.never_set
`, policies.RulePolicyUndefined},
		{"evaluation error", `package sandgate.admission

decision := {"allow": true, "violations": []} if input.request.image
decision := {"allow": false, "violations": []} if input.request.command
`, policies.RulePolicyError},
		{"a builtin that fails", `package sandgate.admission

decision := {"allow": true, "violations": []} if not _too_big

# to_number fails on an image name: without strict builtin errors the
# rule would be undefined, so "not" would hold and the request be admitted.
_too_big if to_number(input.request.image) > 10
`, policies.RulePolicyError},
		{"malformed decision", `package sandgate.admission

decision := "yes"
`, policies.RulePolicyError},
		{"allow is not a boolean", `package sandgate.admission

decision := {"allow": "true", "violations": []}
`, policies.RulePolicyError},
		{"deny without a reason", `package sandgate.admission

decision := {"allow": false, "violations": []}
`, policies.RulePolicyError},
		{"allow with violations", `package sandgate.admission

decision := {"allow": true, "violations": [{"rule": "r", "message": "m", "controls": ["c"]}]}
`, "r"},
		{"mutations that never settle", `package sandgate.admission

decision := {"allow": true, "violations": [], "mutations": [{"op": "replace", "path": "/network", "value": concat("", [input.request.network, "x"]), "rule": "m"}]}
`, policies.RulePolicyError},
		{"mutation of an unknown field", `package sandgate.admission

decision := {"allow": true, "violations": [], "mutations": [{"op": "replace", "path": "/nope", "value": 1, "rule": "m"}]}
`, policies.RulePolicyError},
	}
	for _, tt := range bundles {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "policy.rego", tt.rego)
			e := newEngine(t, policies.Options{Dir: dir})
			d := decide(t, e, baseSpec())
			assertDenied(t, d, tt.rule)
			if d.PolicyRevision != e.Status().Revision {
				t.Errorf("PolicyRevision = %q", d.PolicyRevision)
			}
		})
	}
	t.Run("cancelled context", func(t *testing.T) {
		e := newEngine(t, policies.Options{})
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		n, err := sandgate.Normalize(baseSpec(), e.Defaults())
		if err != nil {
			t.Fatal(err)
		}
		d, err := e.Decide(ctx, sandgate.AdmissionInput{Request: n})
		if !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
		assertDenied(t, d, policies.RulePolicyError)
	})
	t.Run("context ends during the evaluation", func(t *testing.T) {
		// Without cancellation this decision takes minutes.
		dir := t.TempDir()
		writeFile(t, dir, "policy.rego", `package sandgate.admission

decision := {"allow": count(_pairs) == 0, "violations": []}

_pairs contains [i, j] if {
	some i in numbers.range(1, 20000)
	some j in numbers.range(1, 20000)
	i == j + 20000
}
`)
		e := newEngine(t, policies.Options{Dir: dir})
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		defer cancel()
		d, err := e.Decide(ctx, sandgate.AdmissionInput{Request: sandgate.Normalized{RunSpec: baseSpec()}})
		if !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want context.DeadlineExceeded", err)
		}
		assertDenied(t, d, policies.RulePolicyError)
	})
}

func assertDenied(t *testing.T, d sandgate.Decision, rule string) {
	t.Helper()
	if d.Allow {
		t.Fatalf("allowed: %+v", d)
	}
	if !contains(ruleNames(d.Violations), rule) {
		t.Errorf("violations %+v do not name %s", d.Violations, rule)
	}
	for _, v := range d.Violations {
		if v.Message == "" || v.Action != "deny" {
			t.Errorf("incomplete violation %+v", v)
		}
	}
}

func TestPolicyConfigReportsBundleData(t *testing.T) {
	e, err := policies.New(context.Background(), policies.Options{})
	if err != nil {
		t.Fatal(err)
	}
	cfg := e.PolicyConfig()
	maxima, ok := cfg["maxima"].(map[string]any)
	if !ok {
		t.Fatalf("PolicyConfig()[\"maxima\"] = %T, want an object", cfg["maxima"])
	}
	if _, ok := maxima["memory_mb"]; !ok {
		t.Errorf("maxima has no memory_mb: %v", maxima)
	}
	if images, ok := cfg["allowed_images"].([]any); !ok || len(images) == 0 {
		t.Errorf("PolicyConfig()[\"allowed_images\"] = %v, want a non-empty list", cfg["allowed_images"])
	}
	if got := (&policies.Engine{}).PolicyConfig(); got != nil {
		t.Errorf("zero Engine PolicyConfig() = %v, want nil", got)
	}
}

func TestTeamConfigFromData(t *testing.T) {
	e := newEngine(t, policies.Options{})
	got := e.Enforcement("payments")
	if !slices.Contains(got.PrivilegedGIDs, 0) || got.VolumeQuotaMB != 1024 || len(got.PullRegistries) != 0 {
		t.Errorf("Enforcement(payments) = %+v", got)
	}
	// The bundle leaves concurrent and sessions to the node's share.
	if l := e.TeamLimits("payments"); l.Concurrent != 0 || l.Sessions != 0 || l.Queued != 64 {
		t.Errorf("TeamLimits(payments) = %+v", l)
	}
	d := decide(t, e, baseSpec())
	if diff := cmp.Diff(got, d.Enforcement); diff != "" {
		t.Errorf("decision's enforcement differs from the engine's (-engine +decision):\n%s", diff)
	}
}

func TestTeamConfigMalformedRefused(t *testing.T) {
	for name, data := range map[string]string{
		"gid not a number":     `{"privileged_gids": ["docker"]}`,
		"negative quota":       `{"volume_quota_mb": {"default": -1}}`,
		"registry with a path": `{"pull_registries": ["registry.example.com/team"]}`,
		"unknown limit":        `{"team_limits": {"default": {"concurent": 3}}}`,
		"negative team limit":  `{"team_limits": {"default": {}, "teams": {"a": {"queued": -2}}}}`,
		"negative sessions":    `{"team_limits": {"default": {"sessions": -1}}}`,
	} {
		t.Run(name, func(t *testing.T) {
			dir := copyBundle(t)
			writeConfigOverride(t, dir, data)
			if _, err := policies.New(context.Background(), policies.Options{Dir: dir}); err == nil {
				t.Fatal("bundle with malformed team config loaded")
			}
		})
	}
}
