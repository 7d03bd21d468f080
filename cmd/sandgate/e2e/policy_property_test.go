package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor"
	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/policies"
	"github.com/sandgate/sandgate/sandgatetest"
)

// The property test's sizes: specs judged by the policy, and admitted
// ones the executor creates.
const (
	propertySeed    = 20260601
	propertySpecs   = 6000
	propertyCreated = 300
)

// TestPolicyAdmitsWhatTheExecutorCreates holds the default policy and the
// executor to one rule: whatever the policy admits, the executor creates
// as admitted. Thousands of seeded specs, biased toward the edges of what
// the policy allows (limits at their minima and maxima, every spelling of
// the confinement options, numeric users at the ends of their range,
// names and labels of every shape), go through normalisation and the
// default bundle; a few hundred of the admitted ones, the edgiest first,
// are created by the real executor against the real daemon (created, not
// started) and inspected, and must be created without an SBX error and
// without a setting changed on the way.
//
// The executor is driven through its public API alone: the test's event
// sink inspects each container when its container.created event arrives
// and then cancels the run, so Execute removes the container before it
// would attach and start it.
//
// Bind mounts and cache volumes are created too when the test runs as
// root (make test does): each mount source is pinned and each volume made,
// and the container must hold them as admitted; the volumes are removed at
// the end.
func TestPolicyAdmitsWhatTheExecutorCreates(t *testing.T) {
	executortest.RequireDocker(t)
	ctx := context.Background()

	root := t.TempDir()
	for _, d := range []string{"payments/proj", "search/proj"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	roots, err := filepath.EvalSymlinks(root)
	if err != nil {
		t.Fatal(err)
	}
	engine, err := policies.New(ctx, policies.Options{
		Dir:      propertyBundle(t),
		Settings: sandgate.Settings{MountRoots: []string{roots}},
	})
	if err != nil {
		t.Fatal(err)
	}
	principal := sandgate.Principal{Name: "alice", Team: "payments", Roles: []sandgate.Role{sandgate.RoleSubmitter}}

	// Judge every spec; keep the admitted ones the executor can create
	// here, with how many edge values each holds.
	type candidate struct {
		spec  sandgate.Normalized
		edges int
	}
	var admitted []candidate
	var normalisedAway, denied, withMounts int
	byRule := map[string]int{}
	gen := specGenerator{
		r: rand.New(rand.NewPCG(propertySeed, propertySeed>>1)), root: roots,
		minima: limitsOf(t, engine, "minima"), maxima: limitsOf(t, engine, "maxima"),
	}
	for range propertySpecs {
		spec, edges := gen.spec()
		n, err := sandgate.Normalize(spec, engine.Defaults())
		if err != nil {
			if sandgate.ErrorCodeOf(err) != sandgate.CodeInvalidRequest {
				t.Fatalf("Normalize(%+v) = %v, want INVALID-REQUEST or a spec", spec, err)
			}
			normalisedAway++
			continue
		}
		d, err := engine.Decide(ctx, sandgate.AdmissionInput{Operation: sandgate.OperationRun, Principal: principal, Request: n})
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range d.Violations {
			byRule[v.Rule]++
		}
		switch {
		case !d.Allow:
			denied++
		case len(d.Spec.Mounts)+len(d.Spec.Volumes) > 0:
			withMounts++
			if os.Geteuid() == 0 {
				admitted = append(admitted, candidate{d.Spec, edges})
			}
		default:
			admitted = append(admitted, candidate{d.Spec, edges})
		}
	}
	t.Logf("%d specs: %d refused by normalisation, %d denied, %d admitted to create (%d of all admitted have mounts or volumes)",
		propertySpecs, normalisedAway, denied, len(admitted), withMounts)
	t.Logf("denials by rule: %v", byRule)
	if len(admitted) < propertyCreated || denied < propertySpecs/10 {
		t.Fatalf("the generator admits %d specs without mounts and denies %d: it must give at least %d to create and deny a tenth", len(admitted), denied, propertyCreated)
	}
	sort.SliceStable(admitted, func(i, j int) bool { return admitted[i].edges > admitted[j].edges })
	sample := admitted[:propertyCreated]
	sampledMounts := 0
	for _, c := range sample {
		if len(c.spec.Mounts)+len(c.spec.Volumes) > 0 {
			sampledMounts++
		}
	}
	t.Logf("creating the %d edgiest, %d of them with mounts or volumes", len(sample), sampledMounts)

	node := "proptest-" + sandgatetest.RandomHex(t, 4)
	rec := &createRecorder{
		cancels: map[string]context.CancelFunc{}, checks: map[string]func(string) error{},
		created: map[string]string{}, errs: map[string]error{}, counts: map[sandgate.EventType]int{},
	}
	ex, err := executor.New(executor.Config{DockerHost: executortest.DockerHost(), Node: node, MaxConcurrent: 2,
		VolumeDir: t.TempDir()}, rec)
	if err != nil {
		t.Fatal(err)
	}
	defer ex.Close()
	t.Cleanup(func() {
		assertNoContainers(t, node)
		vols, err := ex.CacheVolumes(context.Background())
		if err != nil {
			t.Error(err)
		}
		for _, v := range vols {
			if err := ex.RemoveCacheVolume(context.Background(), v.Team, v.Name); err != nil {
				t.Errorf("remove cache volume %s: %v", v.DockerVolume, err)
			}
		}
	})

	type failure struct {
		spec sandgate.Normalized
		err  error
	}
	var (
		mu       sync.Mutex
		failures []failure
		next     = make(chan int)
		wg       sync.WaitGroup
	)
	fail := func(spec sandgate.Normalized, err error) {
		mu.Lock()
		defer mu.Unlock()
		failures = append(failures, failure{spec, err})
	}
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				spec := sample[i].spec
				runID := fmt.Sprintf("proptest-%06d", i)
				rctx, cancel := context.WithCancel(ctx)
				rec.expect(runID, cancel, func(id string) error { return inspectAsAdmitted(id, principal.Team, spec.RunSpec) })
				res, err := ex.Execute(rctx, sandgate.Job{
					RunID: runID, CorrelationID: runID, DecisionID: runID, Principal: principal.Name, Team: principal.Team, Spec: spec,
					// The count of a team's volumes is the executor's to
					// hold, not the policy's; here every one is made.
					Enforcement: sandgate.Enforcement{MaxVolumes: 1 << 20},
				})
				cancel()
				id, checkErr := rec.result(runID)
				switch {
				case err != nil:
					fail(spec, err)
				case id == "":
					fail(spec, fmt.Errorf("no container was created: outcome %s, error %+v", res.Outcome, res.Error))
				case checkErr != nil:
					fail(spec, checkErr)
				case res.Outcome != sandgate.OutcomeCancelled:
					fail(spec, fmt.Errorf("outcome %s, want cancelled right after the create", res.Outcome))
				}
			}
		}()
	}
	for i := range sample {
		next <- i
	}
	close(next)
	wg.Wait()

	for _, f := range failures {
		doc, _ := json.Marshal(f.spec)
		if len(doc) > 1500 {
			doc = append(doc[:1500:1500], "…"...)
		}
		t.Errorf("admitted but not created as admitted: %v\nspec: %s", f.err, doc)
	}
	created, removed := rec.count(sandgate.EventContainerCreated), rec.count(sandgate.EventContainerRemoved)
	if (len(failures) == 0 && created != len(sample)) || removed != created {
		t.Errorf("%d containers created and %d removed, for %d specs", created, removed, len(sample))
	}
}

// propertyBundle is the default bundle, with maxima.cpus lowered to the
// CPUs of the daemon's host when it has fewer: Docker refuses a container
// more CPUs than its host has, so a deployment's maxima.cpus must not
// exceed its smallest node's (docs/policies.md). Everything else is the
// default data.
func propertyBundle(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	files, err := filepath.Glob("../../../policies/*.rego")
	if err != nil || len(files) == 0 {
		t.Fatalf("the policy bundle: %v", err)
	}
	for _, f := range append(files, "../../../policies/data.json") {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if filepath.Base(f) == "data.json" {
			data = lowerMaxCPUs(t, data, daemonCPUs(t))
		}
		if err := os.WriteFile(filepath.Join(dir, filepath.Base(f)), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// limitsOf reads the bundle's minima or maxima.
func limitsOf(t *testing.T, e *policies.Engine, key string) map[string]float64 {
	t.Helper()
	raw, ok := e.PolicyConfig()[key].(map[string]any)
	if !ok {
		t.Fatalf("the bundle's data has no %s", key)
	}
	out := map[string]float64{}
	for k, v := range raw {
		n, err := strconv.ParseFloat(fmt.Sprint(v), 64)
		if err != nil {
			t.Fatalf("%s.%s = %v: %v", key, k, v, err)
		}
		out[k] = n
	}
	return out
}

// daemonCPUs is how many CPUs the Docker daemon's host has.
func daemonCPUs(t *testing.T) int {
	t.Helper()
	out, err := exec.Command("docker", "info", "--format", "{{.NCPU}}").CombinedOutput()
	if err != nil {
		t.Fatalf("docker info: %v: %s", err, out)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(out)))
	if err != nil || n < 1 {
		t.Fatalf("docker info: NCPU %q", out)
	}
	return n
}

func lowerMaxCPUs(t *testing.T, data []byte, cpus int) []byte {
	t.Helper()
	var doc map[string]map[string]map[string]any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	maxima := doc["sandgate"]["config"]["maxima"].(map[string]any)
	if max := maxima["cpus"].(float64); max <= float64(cpus) {
		return data
	}
	t.Logf("maxima.cpus lowered to %d, the CPUs of the daemon's host", cpus)
	maxima["cpus"] = cpus
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// createRecorder is the executor's event sink: when a run's container is
// created it checks the container and cancels the run, which the executor
// then removes without starting it.
type createRecorder struct {
	mu      sync.Mutex
	cancels map[string]context.CancelFunc
	checks  map[string]func(id string) error
	created map[string]string
	errs    map[string]error
	counts  map[sandgate.EventType]int
}

func (c *createRecorder) expect(runID string, cancel context.CancelFunc, check func(id string) error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cancels[runID], c.checks[runID] = cancel, check
}

func (c *createRecorder) Emit(ev sandgate.Event) {
	c.mu.Lock()
	c.counts[ev.Type]++
	cancel, check := c.cancels[ev.RunID], c.checks[ev.RunID]
	c.mu.Unlock()
	if ev.Type != sandgate.EventContainerCreated || cancel == nil {
		return
	}
	err := check(ev.ContainerID)
	c.mu.Lock()
	c.created[ev.RunID], c.errs[ev.RunID] = ev.ContainerID, err
	c.mu.Unlock()
	cancel()
}

// result is the container created for runID and what checking it found.
func (c *createRecorder) result(runID string) (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.created[runID], c.errs[runID]
}

func (c *createRecorder) count(t sandgate.EventType) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[t]
}

// inspectAsAdmitted checks that the daemon holds container id as the
// admitted spec asks: the settings a policy judges arrive unchanged.
func inspectAsAdmitted(id, team string, s sandgate.RunSpec) error {
	out, err := exec.Command("docker", "inspect", id).Output()
	if err != nil {
		return fmt.Errorf("docker inspect %s: %w", id, err)
	}
	var got []struct {
		Config struct {
			User  string
			Image string
		}
		HostConfig struct {
			IpcMode, NetworkMode string
			Memory, NanoCpus     int64
			PidsLimit            *int64
			CapAdd               []string
			Sysctls              map[string]string
			Tmpfs                map[string]string
			ReadonlyRootfs       bool
			Privileged           bool
			Mounts               []struct {
				Type, Source, Target string
				ReadOnly             bool
			}
			Ulimits []struct {
				Name       string
				Soft, Hard int64
			}
		}
	}
	if err := json.Unmarshal(out, &got); err != nil || len(got) != 1 {
		return fmt.Errorf("docker inspect %s: %v", id, err)
	}
	c, h := got[0].Config, got[0].HostConfig
	wantIPC := "private"
	if s.IPCMode == "none" {
		wantIPC = "none"
	}
	wantCaps := []string{}
	for _, cap := range s.CapAdd {
		wantCaps = append(wantCaps, "CAP_"+cap)
	}
	// Docker keeps each capability once.
	gotCaps := append([]string{}, h.CapAdd...)
	slices.Sort(wantCaps)
	slices.Sort(gotCaps)
	wantCaps = slices.Compact(wantCaps)
	nofile := int64(-1)
	for _, u := range h.Ulimits {
		if u.Name == "nofile" && u.Soft == u.Hard {
			nofile = u.Soft
		}
	}
	var problems []string
	check := func(what string, ok bool, got, want any) {
		if !ok {
			problems = append(problems, fmt.Sprintf("%s is %v, want %v", what, got, want))
		}
	}
	check("user", c.User == s.User, c.User, s.User)
	// Each bind mount is a pin under the stage, each volume the team's.
	var wantMounts, gotMounts []string
	for _, m := range s.Mounts {
		wantMounts = append(wantMounts, fmt.Sprintf("bind %s ro=%t", m.Target, m.ReadOnly))
	}
	for _, v := range s.Volumes {
		wantMounts = append(wantMounts, fmt.Sprintf("volume %s%s.%s %s ro=%t", executor.VolumePrefix, team, v.Name, v.Target, v.ReadOnly))
	}
	for _, m := range h.Mounts {
		switch m.Type {
		case "bind":
			if !strings.HasPrefix(m.Source, executor.DefaultStageDir+"/") {
				problems = append(problems, fmt.Sprintf("bind mount %s is from %s, not a pin", m.Target, m.Source))
			}
			gotMounts = append(gotMounts, fmt.Sprintf("bind %s ro=%t", m.Target, m.ReadOnly))
		case "volume":
			gotMounts = append(gotMounts, fmt.Sprintf("volume %s %s ro=%t", m.Source, m.Target, m.ReadOnly))
		}
	}
	slices.Sort(wantMounts)
	slices.Sort(gotMounts)
	check("mounts", slices.Equal(wantMounts, gotMounts), gotMounts, wantMounts)
	check("ipc mode", h.IpcMode == wantIPC, h.IpcMode, wantIPC)
	// "bridge" is sandgate's own bridge network, never Docker's default.
	wantNetwork := s.Network
	if wantNetwork == "bridge" {
		wantNetwork = executor.DefaultBridgeNetwork
	}
	check("network", h.NetworkMode == wantNetwork, h.NetworkMode, wantNetwork)
	check("memory", h.Memory == s.Resources.MemoryMB<<20, h.Memory, s.Resources.MemoryMB<<20)
	check("nano CPUs", h.NanoCpus == int64(s.Resources.CPUs*1e9), h.NanoCpus, int64(s.Resources.CPUs*1e9))
	check("pids limit", h.PidsLimit != nil && *h.PidsLimit == s.Resources.Pids, h.PidsLimit, s.Resources.Pids)
	check("nofile", nofile == s.Resources.Nofile, nofile, s.Resources.Nofile)
	check("capabilities", slices.Equal(gotCaps, wantCaps), gotCaps, wantCaps)
	check("sysctls", len(h.Sysctls) == len(s.Sysctls), h.Sysctls, s.Sysctls)
	for k, v := range s.Sysctls {
		check("sysctl "+k, h.Sysctls[k] == v, h.Sysctls[k], v)
	}
	check("tmpfs", strings.Contains(h.Tmpfs["/tmp"], fmt.Sprintf("size=%dm", s.Resources.TmpfsMB)), h.Tmpfs["/tmp"], s.Resources.TmpfsMB)
	check("read-only rootfs", h.ReadonlyRootfs, h.ReadonlyRootfs, true)
	check("privileged", !h.Privileged, h.Privileged, false)
	if len(problems) > 0 {
		return fmt.Errorf("container %s: %s", id, strings.Join(problems, "; "))
	}
	return nil
}

// specGenerator makes run specs: mostly what the default policy admits,
// at its edges, with now and then a value it must deny.
type specGenerator struct {
	r    *rand.Rand
	root string
	// minima and maxima are the bundle's limits.
	minima, maxima map[string]float64
	// edges counts the edge values of the spec being made.
	edges int
}

// pick returns one of the usual values; or, with probability 1/4, one
// of the edge values (counted); or, with probability 1/40, one of the
// values the policy must deny.
func pick[T any](g *specGenerator, usual, edges, denied []T) T {
	switch n := g.r.IntN(200); {
	case n < 5 && len(denied) > 0:
		return denied[g.r.IntN(len(denied))]
	case n < 55 && len(edges) > 0:
		g.edges++
		return edges[g.r.IntN(len(edges))]
	}
	return usual[g.r.IntN(len(usual))]
}

// maybe is true with probability p/100.
func (g *specGenerator) maybe(p int) bool { return g.r.IntN(100) < p }

// spec makes one spec and says how many edge values it holds.
func (g *specGenerator) spec() (sandgate.RunSpec, int) {
	g.edges = 0
	s := sandgate.RunSpec{
		Image: pick(g, []string{"", "sandgate/sandbox:latest", "sandgate/sandbox"},
			[]string{"docker.io/sandgate/sandbox:latest", "index.docker.io/sandgate/sandbox", "docker.io/sandgate/sandbox"},
			[]string{"sandgate/sandbox:", "sandgate/other:latest", "busybox", "SANDGATE/sandbox", "library/sandgate/sandbox", "evil.example/sandgate/sandbox"}),
		Command: pick(g, [][]string{{"true"}, {"sh", "-c", "echo hello"}},
			[][]string{{""}, {"sh", "-c", strings.Repeat("x", 4096)}, {"ünïcödé", "\t", " "}, {"--", "-x"}}, nil),
		User: pick(g, []string{"", "10001:10001", "20000:20000"},
			[]string{"1:1", "2147483647:2147483647", "65534:65534", "10001:1", "1:2147483647"},
			[]string{"10001", "10001:0", "0:0", "0", "root", "nobody:nogroup", "10001:42", "10001:docker"}),
		Network:    pick(g, []string{"", "none", "bridge"}, []string{"NONE", " Bridge "}, []string{"host", "container:x", "my-net"}),
		PullPolicy: sandgate.PullPolicy(pick(g, []string{"", "never"}, nil, []string{"if-not-present", "always"})),
		Workdir:    pick(g, []string{"", "/workspace"}, []string{"/", "/a/b/../c", "/tmp", "/ünïcödé", "/" + strings.Repeat("d", 200)}, nil),
		SessionID:  pick(g, []string{"", "s1"}, []string{strings.Repeat("S", 300), "a/b c", "..", "-x-", "ünï"}, nil),
		TaskID:     pick(g, []string{"", "t1"}, []string{strings.Repeat("t", 100), "___", "a.b", "日本"}, nil),
		IPCMode:    pick(g, []string{""}, []string{"none", "private"}, []string{"NONE", "shareable", "host"}),
		PIDMode:    pick(g, []string{""}, nil, []string{"host", "private"}),
		UTSMode:    pick(g, []string{""}, nil, []string{"host"}),
		UsernsMode: pick(g, []string{""}, nil, []string{"host"}),
	}
	// Each limit at its minimum and maximum and just inside them, just
	// outside them, and values Docker itself refuses.
	lo, hi := g.minima, g.maxima
	edges := func(k string) []int64 {
		return []int64{int64(lo[k]), int64(lo[k]) + 1, int64(hi[k]), int64(hi[k]) - 1}
	}
	outside := func(k string, more ...int64) []int64 {
		return append([]int64{int64(lo[k]) - 1, int64(hi[k]) + 1}, more...)
	}
	s.Resources = sandgate.Resources{
		MemoryMB: pick(g, []int64{0, 256, 512}, edges("memory_mb"), outside("memory_mb", 1)),
		CPUs: pick(g, []float64{0, 0.5, 1},
			[]float64{lo["cpus"], lo["cpus"] + 0.001, 0.015, 0.333, hi["cpus"], hi["cpus"] - 0.01, hi["cpus"] - 0.001},
			[]float64{lo["cpus"] - 0.001, 0.001, hi["cpus"] + 1}),
		Pids:    pick(g, []int64{0, 64, 256}, edges("pids"), outside("pids")),
		TmpfsMB: pick(g, []int64{0, 16, 64}, edges("tmpfs_mb"), outside("tmpfs_mb")),
		Nofile:  pick(g, []int64{0, 256, 1024}, edges("nofile"), outside("nofile", 8)),
	}
	s.TimeoutSeconds = int(pick(g, []int64{0, 60}, edges("timeout_seconds"), outside("timeout_seconds")))
	s.OutputLimitBytes = pick(g, []int64{0, 4096}, edges("output_limit_bytes"), outside("output_limit_bytes"))
	if g.maybe(15) {
		s.Stdin = pick(g, []string{"input\n"}, []string{strings.Repeat("i", 64<<10), "\x01\x02"}, nil)
	}
	if g.maybe(40) {
		s.Env = map[string]string{}
		for range 1 + g.r.IntN(4) {
			k := pick(g, []string{"A", "PATH", "LANG", "_X"}, []string{"a" + strings.Repeat("B", 200), "X_1"}, nil)
			s.Env[k] = pick(g, []string{"1", "value"}, []string{"", "=", "a=b=c", "ünïcödé", strings.Repeat("v", 8192), " \t"}, nil)
		}
	}
	if g.maybe(40) {
		s.Labels = map[string]string{}
		for range 1 + g.r.IntN(3) {
			k := pick(g, []string{"ticket", "team.owner"}, []string{"", "a b", "ünï", strings.Repeat("k", 300), "com.example/x", "="}, nil)
			s.Labels[k] = pick(g, []string{"ENG-1", "x"}, []string{"", strings.Repeat("v", 4096), "ünï", "\n"}, nil)
		}
	}
	if g.maybe(30) {
		// Network capabilities ask for a network.
		s.Network = pick(g, []string{"bridge"}, nil, []string{"none"})
		for range 1 + g.r.IntN(3) {
			s.CapAdd = append(s.CapAdd, pick(g, []string{"NET_BIND_SERVICE"},
				[]string{"cap_net_bind_service", " Cap_Net_Bind_Service "}, []string{"NET_RAW", "SYS_ADMIN", "ALL"}))
		}
	}
	if g.maybe(25) {
		values := map[string][]string{
			"kernel.shm_rmid_forced":              {"0", "1"},
			"net.ipv4.ip_local_port_range":        {"32768 60999", "1024 65535"},
			"net.ipv4.ip_unprivileged_port_start": {"1024", "0", "65535"},
			"net.ipv4.tcp_syncookies":             {"1", "0"},
			"net.ipv4.ping_group_range":           {"10001 10001", "0 2147483647"},
			"kernel.sysrq":                        {"1"},
			"net.core.somaxconn":                  {"1024"},
		}
		s.Sysctls = map[string]string{}
		for range 1 + g.r.IntN(3) {
			k := pick(g, []string{"net.ipv4.tcp_syncookies", "kernel.shm_rmid_forced"},
				[]string{"net.ipv4.ip_local_port_range", "net.ipv4.ip_unprivileged_port_start", "net.ipv4.ping_group_range"},
				[]string{"kernel.sysrq", "net.core.somaxconn"})
			s.Sysctls[k] = values[k][g.r.IntN(len(values[k]))]
		}
	}
	if g.maybe(45) {
		for range 1 + g.r.IntN(3) {
			s.SecurityOpt = append(s.SecurityOpt, pick(g,
				[]string{"no-new-privileges", "no-new-privileges=true", "seccomp=default"},
				[]string{"seccomp:runtime/default", "apparmor=docker-default", "apparmor:docker-default", "no-new-privileges:true", "SECCOMP=DEFAULT"},
				[]string{"seccomp=unconfined", "seccomp=builtin", "apparmor=unconfined", "apparmor=my-profile", "label=disable",
					"label=type:spc_t", "label=level:s0", "no-new-privileges=false", "systempaths=unconfined"}))
		}
	}
	if g.maybe(3) {
		s.ReadOnlyRootfs = new(bool)
	}
	if g.maybe(2) {
		s.Privileged = true
	}
	if g.maybe(2) {
		s.Devices = []string{"/dev/fuse"}
	}
	if g.maybe(2) {
		s.Ports = []string{"8080:80"}
	}
	if g.maybe(10) {
		dir := pick(g, []string{"payments/proj", "payments"}, nil, []string{"search/proj", ".", "payments/../search"})
		s.Mounts = []sandgate.Mount{{Source: filepath.Join(g.root, dir), Target: "/workspace", ReadOnly: g.maybe(50),
			Propagation: pick(g, []string{"", "rprivate"}, []string{"private"}, []string{"slave", "rshared", "bogus"})}}
	}
	if g.maybe(10) {
		s.Volumes = []sandgate.Volume{{Name: pick(g, []string{"npm-cache"}, []string{"x", "A_b-9"}, []string{"a.b", "../x"}), Target: "/cache"}}
	}
	return s, g.edges
}
