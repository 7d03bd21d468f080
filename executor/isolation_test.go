package executor_test

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/api/types/volume"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor"
	"github.com/sandgate/sandgate/executor/images"
	"github.com/sandgate/sandgate/sandgatetest"
)

// TestMountSwapNeverEscapes attacks bind mounts as a run with the team
// directory mounted read-write could: while runs that mount the admitted
// directory "proj" are created, a loop keeps replacing it with a symlink
// to a directory outside the mount root and back. Every run must see the
// admitted directory or fail with SBX-003 before anything is mounted;
// none may see what the symlink points to.
func TestMountSwapNeverEscapes(t *testing.T) {
	if os.Geteuid() != 0 && os.Getenv("CI") != "true" {
		t.Skip("bind mounts are pinned with mount(2), which needs root")
	}
	ex, rec := newTestExecutor(t, func(c *executor.Config) { c.MaxConcurrent = 4 })
	base := t.TempDir()
	team := filepath.Join(base, "root", "payments")
	proj, real, outside := filepath.Join(team, "proj"), filepath.Join(team, "proj.real"), filepath.Join(base, "host")
	for _, d := range []string{proj, outside} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(proj, "marker"), []byte("inside"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(outside, "marker"), []byte("ESCAPED"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Admitted while the path was the real directory.
	admitted := newJob(t, func(s *sandgate.RunSpec) {
		s.Mounts = []sandgate.Mount{{Source: proj, Target: "/workspace", ReadOnly: true}}
	}, "cat", "/workspace/marker")

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var swaps atomic.Int64
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			if os.Rename(proj, real) != nil {
				continue
			}
			_ = os.Symlink(outside, proj)
			time.Sleep(time.Millisecond)
			_ = os.Remove(proj)
			_ = os.Rename(real, proj)
			swaps.Add(1)
			time.Sleep(time.Millisecond)
		}
	}()

	const runs = 40
	results := make(chan sandgate.Result, runs)
	var rwg sync.WaitGroup
	for i := range runs {
		job := admitted
		job.RunID = "0193" + sandgatetest.RandomHex(t, 14)
		job.Spec.TaskID = "swap-" + string(rune('a'+i%26))
		rwg.Add(1)
		go func() {
			defer rwg.Done()
			res, _ := ex.Execute(t.Context(), job)
			results <- res
		}()
	}
	rwg.Wait()
	close(stop)
	wg.Wait()
	close(results)

	var inside, refused int
	for res := range results {
		switch {
		case strings.Contains(text(res.Stdout), "ESCAPED"):
			t.Errorf("a run saw the symlink's target: stdout %q", text(res.Stdout))
		case res.Outcome == sandgate.OutcomeSucceeded && text(res.Stdout) == "inside":
			inside++
		case res.Outcome == sandgate.OutcomeError && res.Error != nil && res.Error.Code == sandgate.CodeMountError:
			refused++
		default:
			t.Errorf("unexpected result: outcome %s, error %+v, stdout %q, stderr %q", res.Outcome, res.Error, text(res.Stdout), text(res.Stderr))
		}
	}
	t.Logf("%d runs: %d saw the admitted directory, %d were refused; %d swaps", runs, inside, refused, swaps.Load())
	if inside == 0 {
		t.Errorf("no run mounted the admitted directory: the race was not exercised")
	}
	// The trail records what was mounted: the pinned directory's inode.
	st, err := os.Stat(proj)
	if err != nil {
		t.Fatal(err)
	}
	wantIno := inodeOf(st)
	found := false
	for _, ev := range rec.all() {
		if ev.Type != sandgate.EventContainerCreated || ev.Payload["mounts"] == nil {
			continue
		}
		ms, _ := ev.Payload["mounts"].([]any)
		if len(ms) != 1 {
			t.Fatalf("container.created mounts = %v", ev.Payload["mounts"])
		}
		m := ms[0].(map[string]any)
		if m["source"] != proj || m["target"] != "/workspace" || m["inode"] != wantIno {
			t.Errorf("container.created mount = %v, want source %s and inode %d", m, proj, wantIno)
		}
		found = true
	}
	if !found {
		t.Error("no container.created event records its mounts")
	}
}

// inodeOf is the inode of a file, as the trail records it.
func inodeOf(fi os.FileInfo) uint64 {
	return fi.Sys().(*syscall.Stat_t).Ino
}

// buildTestImage builds tag FROM the sandbox image with files added, for
// tests that need an image that is hostile in some way.
func buildTestImage(t *testing.T, tag string, files map[string]string) {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dockerfile := "FROM " + images.SandboxImage + "\n"
	names := make([]string, 0, len(files))
	for name := range files {
		names = append(names, name)
	}
	sort.Strings(names)
	for i, name := range names {
		src := fmt.Sprintf("f%d", i)
		dockerfile += "COPY " + src + " " + name + "\n"
		add := func(n, body string) {
			if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(body))}); err != nil {
				t.Fatal(err)
			}
			if _, err := tw.Write([]byte(body)); err != nil {
				t.Fatal(err)
			}
		}
		add(src, files[name])
		if i == len(names)-1 {
			add("Dockerfile", dockerfile)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	resp, err := docker(t).ImageBuild(ctx, &buf, build.ImageBuildOptions{Tags: []string{tag}, Remove: true, ForceRemove: true})
	if err != nil {
		t.Fatalf("build %s: %v", tag, err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !bytes.Contains(out, []byte("Successfully tagged")) {
		t.Fatalf("build %s: %s", tag, out)
	}
	t.Cleanup(func() {
		_, _ = docker(t).ImageRemove(context.Background(), tag, image.RemoveOptions{Force: true, PruneChildren: true})
	})
}

// TestPrivilegedGroupsRefused: an image whose /etc/group makes the run's
// user a member of the Docker socket's group (or disk), and a request for
// gid 0, are refused before the container starts; the plain sandbox image
// runs. The groups the container would have are checked, not only the one
// the request names.
func TestPrivilegedGroupsRefused(t *testing.T) {
	ex, rec := newTestExecutor(t, nil)
	tag := "sandgate-test/groups:" + sandgatetest.RandomHex(t, 4)
	buildTestImage(t, tag, map[string]string{
		"/etc/passwd": "root:x:0:0:root:/root:/bin/sh\nsandbox:x:10001:10001::/workspace:/bin/sh\ntoor:x:0:10001::/:/bin/sh\n",
		"/etc/group":  "root:x:0:\nsandbox:x:10001:\ndisk:x:6:sandbox\ndocker:x:27:sandbox\n",
	})
	enforce := sandgate.Enforcement{PrivilegedGIDs: []int64{0, 6, 27}}
	for _, tc := range []struct {
		name, image, user string
		refused           string // a part of the refusal, "" when it runs
	}{
		{"sandbox image", images.SandboxImage, "10001:10001", ""},
		{"supplementary docker group", tag, "10001:10001", "supplementary group"},
		{"uid only takes passwd's groups", tag, "10001", "supplementary group"},
		{"gid 0", images.SandboxImage, "10001:0", "gid 0"},
		{"unknown uid gets gid 0", images.SandboxImage, "20000", "gid 0"},
		{"a name that is uid 0", tag, "toor:10001", "uid 0"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			job := newJob(t, func(s *sandgate.RunSpec) { s.Image, s.User = tc.image, tc.user }, "id")
			job.Enforcement = enforce
			ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
			defer cancel()
			res, err := ex.Execute(ctx, job)
			if tc.refused == "" {
				if err != nil || res.Outcome != sandgate.OutcomeSucceeded {
					t.Fatalf("Execute = %v, %+v; want success", err, res)
				}
				return
			}
			if sandgate.ErrorCodeOf(err) != sandgate.CodeContainerCreate || !strings.Contains(sandgate.ErrorMessageOf(err), tc.refused) {
				t.Fatalf("Execute error = %v; want SBX-001 naming %q", err, tc.refused)
			}
			for _, ev := range rec.of(job.RunID) {
				if ev.Type == sandgate.EventContainerStarted {
					t.Errorf("the container was started")
				}
			}
		})
	}
}

// volumeExecutor is a test executor for tests of cache volumes, which are
// loop-mounted file systems and need root.
func volumeExecutor(t *testing.T, tune func(*executor.Config)) (*executor.Executor, *recorder) {
	t.Helper()
	if os.Geteuid() != 0 && os.Getenv("CI") != "true" {
		t.Skip("cache volumes are loop-mounted file systems, which needs root")
	}
	return newTestExecutor(t, tune)
}

// TestCacheVolumesPerTeamWritableAndBounded: a run of team payments
// writes to its cache volume as uid 10001 and the next run of the team
// reads it; team web's volume of the same name is another one; a run
// that writes past the quota fills its volume, not the host's disk; and
// a team past its count of volumes is refused a new one.
func TestCacheVolumesPerTeamWritableAndBounded(t *testing.T) {
	ex, _ := volumeExecutor(t, nil)
	name := "cache-" + sandgatetest.RandomHex(t, 3)
	enforce := sandgate.Enforcement{VolumeQuotaMB: 16, MaxVolumes: 2, PrivilegedGIDs: []int64{0}}
	run := func(team string, command string) sandgate.Result {
		t.Helper()
		job := newJob(t, func(s *sandgate.RunSpec) {
			s.Volumes = []sandgate.Volume{{Name: name, Target: "/cache"}}
		}, "sh", "-c", command)
		job.Team, job.Enforcement = team, enforce
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		res, err := ex.Execute(ctx, job)
		if err != nil {
			t.Fatalf("Execute(%s, %q): %v", team, command, err)
		}
		return res
	}

	if res := run("payments", "echo from-payments > /cache/f && id -u"); res.Outcome != sandgate.OutcomeSucceeded {
		t.Fatalf("write to the cache: %+v", res)
	}
	if res := run("payments", "cat /cache/f"); text(res.Stdout) != "from-payments\n" {
		t.Errorf("the next run of the team reads %q (stderr %q), want what the first wrote", text(res.Stdout), text(res.Stderr))
	}
	if res := run("web", "cat /cache/f 2>&1; ls -A /cache"); strings.Contains(text(res.Stdout), "from-payments") {
		t.Errorf("team web sees team payments' cache: %q", text(res.Stdout))
	}

	res := run("payments", "dd if=/dev/zero of=/cache/big bs=1M count=64 2>&1; echo rc=$?")
	if !strings.Contains(text(res.Stdout), "No space left") {
		t.Errorf("writing 64 MiB into a 16 MiB volume: %q, want no space left", text(res.Stdout))
	}
	vols, err := ex.CacheVolumes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var teams []string
	for _, v := range vols {
		teams = append(teams, v.Team)
		if v.UsedBytes > 16<<20 || v.SizeMB != 16 {
			t.Errorf("volume %s: %d bytes used of %d MB", v.DockerVolume, v.UsedBytes, v.SizeMB)
		}
		if v.DockerVolume != executor.VolumePrefix+v.Team+"."+name {
			t.Errorf("docker volume %s does not carry team %s and name %s", v.DockerVolume, v.Team, name)
		}
	}
	sort.Strings(teams)
	if strings.Join(teams, ",") != "payments,web" {
		t.Errorf("volumes of teams %v, want payments and web", teams)
	}

	// A third volume for payments, then a fourth past the limit of 2.
	job := newJob(t, func(s *sandgate.RunSpec) {
		s.Volumes = []sandgate.Volume{{Name: name + "-b", Target: "/b"}, {Name: name + "-c", Target: "/c"}}
	}, "true")
	job.Team, job.Enforcement = "payments", enforce
	_, err = ex.Execute(t.Context(), job)
	if sandgate.ErrorCodeOf(err) != sandgate.CodeMountError || !strings.Contains(sandgate.ErrorMessageOf(err), "limit") {
		t.Errorf("a team past its count of volumes: %v, want SBX-003 naming the limit", err)
	}
}

// TestVolumeNamesNeverCollide: pairs of team and name that read alike
// get different Docker volumes, and a pair that cannot make one is
// refused.
func TestVolumeNamesNeverCollide(t *testing.T) {
	pairs := [][2]string{{"a-b", "c"}, {"a", "b-c"}, {"a.b", "c"}, {"a", "b_c"}, {"a_b", "c"}, {"payments", "npm"}, {"Payments", "npm"}}
	seen := map[string][2]string{}
	for _, p := range pairs {
		n, ok := executor.VolumeName(p[0], p[1])
		if !ok {
			t.Fatalf("VolumeName(%q, %q) refused", p[0], p[1])
		}
		if prev, ok := seen[n]; ok {
			t.Errorf("%v and %v share the docker volume %s", prev, p, n)
		}
		seen[n] = p
	}
	for _, p := range [][2]string{{"a", "b.c"}, {"a b", "c"}, {"", "c"}, {"a", ""}, {".a", "c"}, {"a", "../c"}} {
		if n, ok := executor.VolumeName(p[0], p[1]); ok {
			t.Errorf("VolumeName(%q, %q) = %s, want refused", p[0], p[1], n)
		}
	}
}

// TestBridgeRunsCannotReachEachOther: run A, admitted with network bridge,
// listens on a port; run B, also on the bridge, cannot connect to it, and
// cannot reach a service of the host's listening on every address
// through the bridge's gateway. Both still have a network of their own.
func TestBridgeRunsCannotReachEachOther(t *testing.T) {
	if os.Geteuid() != 0 && os.Getenv("CI") != "true" {
		t.Skip("closing the host to bridge runs needs root (iptables)")
	}
	ex, _ := newTestExecutor(t, nil)
	// A service of the host's, on every address.
	ln, err := net.Listen("tcp4", "0.0.0.0:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_, _ = c.Write([]byte("host-service\n"))
			c.Close()
		}
	}()
	hostPort := ln.Addr().(*net.TCPAddr).Port

	bridge := func(s *sandgate.RunSpec) { s.Network = "bridge" }
	listener := newJob(t, bridge, "sh", "-c", "ip -4 -o addr show eth0 | awk '{print $4}' | cut -d/ -f1; nc -l -p 8080 -e echo reached-A")
	addr := make(chan string, 1)
	var out strings.Builder
	var once sync.Once
	listener.Output = func(_ sandgate.Stream, p []byte) {
		out.Write(p)
		if s := out.String(); strings.HasSuffix(s, "\n") {
			once.Do(func() { addr <- strings.TrimSpace(s) })
		}
	}
	done := executeAsync(t, ex, listener)
	ip := await(t, addr, done, "run A's address")
	if net.ParseIP(ip) == nil {
		t.Fatalf("run A printed %q, not an address", ip)
	}
	probe := newJob(t, bridge, "sh", "-c", fmt.Sprintf(
		"gw=$(ip -4 route | awk '/default/ {print $3}'); echo gw=$gw; "+
			"nc -w 3 %s 8080 && echo A-REACHED; nc -w 3 $gw %d && echo HOST-REACHED; ip -4 -o addr show eth0 | grep -q inet && echo has-network", ip, hostPort))
	res := execute(t, ex, probe)
	if strings.Contains(text(res.Stdout), "reached-A") || strings.Contains(text(res.Stdout), "A-REACHED") {
		t.Errorf("run B reached run A's listener: %q", text(res.Stdout))
	}
	if strings.Contains(text(res.Stdout), "host-service") || strings.Contains(text(res.Stdout), "HOST-REACHED") {
		t.Errorf("run B reached a service of the host's through the bridge: %q", text(res.Stdout))
	}
	if !strings.Contains(text(res.Stdout), "has-network") || !strings.Contains(text(res.Stdout), "gw=1") {
		t.Errorf("run B has no bridge network: %q %q", text(res.Stdout), text(res.Stderr))
	}
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	if err := ex.Cancel(ctx, listener.RunID); err != nil {
		t.Fatal(err)
	}
	<-done
	c, err := docker(t).NetworkInspect(ctx, executor.DefaultBridgeNetwork, network.InspectOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if c.Options["com.docker.network.bridge.enable_icc"] != "false" {
		t.Errorf("network %s options %v: inter-container communication is not disabled", c.Name, c.Options)
	}
}

// TestStaleCacheVolumeReplaced: a Docker volume sandgate made for a
// volume directory that is gone (moved, wiped) is replaced, not an error;
// one that is not sandgate's is refused, never removed.
func TestStaleCacheVolumeReplaced(t *testing.T) {
	ex, _ := volumeExecutor(t, nil)
	name := "stale-" + sandgatetest.RandomHex(t, 3)
	stale := executor.VolumePrefix + "payments." + name
	ctx := t.Context()
	if _, err := docker(t).VolumeCreate(ctx, volume.CreateOptions{Name: stale, Driver: "local",
		DriverOpts: map[string]string{"type": "none", "o": "bind", "device": "/nonexistent/" + name},
		Labels:     map[string]string{"sandgate.cache": "true", "sandgate.team": "payments", "sandgate.volume": name}}); err != nil {
		t.Fatal(err)
	}
	job := newJob(t, func(s *sandgate.RunSpec) { s.Volumes = []sandgate.Volume{{Name: name, Target: "/cache"}} }, "sh", "-c", "echo ok > /cache/f && cat /cache/f")
	job.Team = "payments"
	if res := execute(t, ex, job); text(res.Stdout) != "ok\n" {
		t.Fatalf("a run of the stale volume: %+v", res)
	}

	foreign := "foreign-" + sandgatetest.RandomHex(t, 3)
	if _, err := docker(t).VolumeCreate(ctx, volume.CreateOptions{Name: executor.VolumePrefix + "payments." + foreign}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = docker(t).VolumeRemove(context.Background(), executor.VolumePrefix+"payments."+foreign, true)
	})
	job = newJob(t, func(s *sandgate.RunSpec) { s.Volumes = []sandgate.Volume{{Name: foreign, Target: "/cache"}} }, "true")
	job.Team = "payments"
	if _, err := ex.Execute(ctx, job); sandgate.ErrorCodeOf(err) != sandgate.CodeMountError || !strings.Contains(sandgate.ErrorMessageOf(err), "not sandgate's") {
		t.Errorf("a volume that is not sandgate's: %v, want SBX-003", err)
	}
	if _, err := docker(t).VolumeInspect(ctx, executor.VolumePrefix+"payments."+foreign); err != nil {
		t.Errorf("the foreign volume was removed: %v", err)
	}
}
