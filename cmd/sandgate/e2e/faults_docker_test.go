package e2e

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/executortest"
	"github.com/sandgate/sandgate/executor/images"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/client"
	"github.com/sandgate/sandgate/sandgatetest"
)

// slowDocker is a loopback proxy in front of a Docker daemon that delays
// every request and keeps a log of them.
type slowDocker struct {
	URL string

	mu  sync.Mutex
	log []string
}

// startSlowDocker proxies the test's daemon on a loopback port, adding
// delay before each request is passed on.
func startSlowDocker(t *testing.T, delay time.Duration) *slowDocker {
	t.Helper()
	host := executortest.DockerHost()
	if host == "" {
		host = "unix:///var/run/docker.sock"
	}
	u, err := url.Parse(host)
	if err != nil {
		t.Fatal(err)
	}
	transport := &http.Transport{DisableCompression: true}
	target := &url.URL{Scheme: "http", Host: u.Host}
	if u.Scheme == "unix" {
		sock := u.Path
		transport.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			var d net.Dialer
			return d.DialContext(ctx, "unix", sock)
		}
		target.Host = "docker"
	}
	proxy := httputil.NewSingleHostReverseProxy(target)
	proxy.Transport = transport
	proxy.FlushInterval = -1
	sd := &slowDocker{}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sd.mu.Lock()
		sd.log = append(sd.log, r.Method+" "+r.URL.Path)
		sd.mu.Unlock()
		time.Sleep(delay)
		proxy.ServeHTTP(w, r)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	sd.URL = "tcp://" + ln.Addr().String()
	return sd
}

// requests returns the logged requests that match method and whose path
// contains part.
func (sd *slowDocker) requests(method, part string) []string {
	sd.mu.Lock()
	defer sd.mu.Unlock()
	var out []string
	for _, l := range sd.log {
		m, p, _ := strings.Cut(l, " ")
		if (method == "" || m == method) && strings.Contains(p, part) {
			out = append(out, l)
		}
	}
	return out
}

// TestFaultSlowDockerAirGapped puts 200 ms of latency in front of every
// Docker API request of an air-gapped gateway: concurrent runs still end
// with their exact exit codes and one container each, and a run of an
// image that is not present fails with SBX-002 without any pull.
func TestFaultSlowDockerAirGapped(t *testing.T) {
	t.Parallel()
	sd := startSlowDocker(t, 200*time.Millisecond)
	s := startServer(t, withEnv("DOCKER_HOST", sd.URL), withEnv("SANDGATE_AIR_GAPPED", "true"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const runs = 4
	var wg sync.WaitGroup
	views := make([]api.RunView, runs)
	errs := make([]error, runs)
	for i := range runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			views[i], errs[i] = s.Client.Submit(ctx, sandgate.RunSpec{Command: []string{"sh", "-c", fmt.Sprintf("echo run-%d; exit %d", i, i)}},
				client.SubmitOptions{Wait: time.Minute})
		}()
	}
	wg.Wait()
	for i, v := range views {
		if errs[i] != nil {
			t.Errorf("run %d: %v", i, errs[i])
			continue
		}
		want := sandgate.OutcomeFailed
		if i == 0 {
			want = sandgate.OutcomeSucceeded
		}
		if v.State != sandgate.StateFinished || v.Outcome == nil || *v.Outcome != want || v.ExitCode == nil || *v.ExitCode != i {
			t.Errorf("run %d = %s %v exit %v, want %s exit %d", i, v.State, v.Outcome, v.ExitCode, want, i)
		}
		if v.Stdout.Data != fmt.Sprintf("run-%d\n", i) {
			t.Errorf("run %d stdout = %q", i, v.Stdout.Data)
		}
	}
	if creates := sd.requests(http.MethodPost, "/containers/create"); len(creates) != runs {
		t.Errorf("%d container creates for %d runs: %v", len(creates), runs, creates)
	}

	missing := "sandgate/sandbox:not-loaded-" + sandgatetest.RandomHex(t, 4)
	v, err := s.Client.Submit(ctx, sandgate.RunSpec{Image: missing, Command: []string{"true"}}, client.SubmitOptions{Wait: time.Minute})
	if err != nil {
		t.Fatalf("submit %s: %v", missing, err)
	}
	if v.Outcome == nil || *v.Outcome != sandgate.OutcomeError || v.Error == nil || v.Error.Code != sandgate.CodeImageUnavailable {
		t.Errorf("run of a missing image = %v %+v, want error %s", v.Outcome, v.Error, sandgate.CodeImageUnavailable)
	}
	if pulls := sd.requests("", "/images/create"); len(pulls) > 0 {
		t.Errorf("air-gapped gateway tried to pull: %v", pulls)
	}
	var counts map[sandgate.EventType]int
	sandgatetest.WaitFor(t, "the failed run's end in the trail", 30*time.Second, func() bool {
		counts = eventCounts(s.runEvents(t, v.ID))
		return counts[sandgate.EventRunFailed] > 0
	})
	if counts[sandgate.EventImageUnavailable] != 1 || counts[sandgate.EventContainerCreated] != 0 {
		t.Errorf("events of the missing image's run: %v, want one image.unavailable and no container", counts)
	}
}

// privateDocker is a Docker daemon of one test, with its own data, exec
// root and socket, that the test may stop and start without disturbing
// the daemon other tests use.
type privateDocker struct {
	dir  string
	Host string
	// args are further flags of dockerd (--add-runtime, --userns-remap).
	args []string
	// hideCgroup2, on a host of hybrid cgroups, starts dockerd in a mount
	// namespace of its own (slave: the host's later mounts still reach
	// it) without the cgroup v2 mount, which crun refuses to run beside
	// v1 controllers; the host's mounts are untouched.
	hideCgroup2 bool
	cmd         *exec.Cmd
	exit        chan error
}

// startPrivateDocker starts a private dockerd with the sandbox image
// loaded. Without dockerd the test is skipped, or fails under CI=true.
func startPrivateDocker(t *testing.T) *privateDocker {
	t.Helper()
	return startPrivateDockerWith(t)
}

// startPrivateDockerWith is startPrivateDocker with further dockerd flags.
func startPrivateDockerWith(t *testing.T, args ...string) *privateDocker {
	t.Helper()
	return startPrivateDockerOpts(t, false, args...)
}

// startPrivateDockerOpts is startPrivateDockerWith, hiding the cgroup v2
// mount from the daemon when hideCgroup2 is set.
func startPrivateDockerOpts(t *testing.T, hideCgroup2 bool, args ...string) *privateDocker {
	t.Helper()
	executortest.RequireDocker(t)
	_, err := exec.LookPath("dockerd")
	if err == nil {
		_, err = exec.LookPath("unshare")
	}
	if err != nil || os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatalf("a private dockerd needs dockerd, unshare and root (CI=true): %v, euid %d", err, os.Geteuid())
		}
		t.Skipf("a private dockerd needs dockerd, unshare and root: %v, euid %d", err, os.Geteuid())
	}
	// Short path: the sockets' paths must fit in 107 bytes.
	dir, err := os.MkdirTemp("", "sgd")
	if err != nil {
		t.Fatal(err)
	}
	// A remapped daemon's root reaches its data through this directory.
	if err := os.Chmod(dir, 0o711); err != nil {
		t.Fatal(err)
	}
	d := &privateDocker{dir: dir, Host: "unix://" + filepath.Join(dir, "d.sock"), args: args, hideCgroup2: hideCgroup2}
	t.Cleanup(func() {
		d.Stop(t)
		_ = exec.Command("umount", "-R", filepath.Join(dir, "data")).Run()
		os.RemoveAll(dir)
	})
	d.Start(t)
	// docker save reads the test's daemon (DOCKER_HOST as inherited).
	load := exec.Command("sh", "-c", fmt.Sprintf("docker save %s | docker -H %s load", images.SandboxImage, d.Host))
	if out, err := load.CombinedOutput(); err != nil {
		t.Fatalf("load %s into the private daemon: %v\n%s", images.SandboxImage, err, out)
	}
	return d
}

// Start starts the daemon and waits until it answers.
func (d *privateDocker) Start(t *testing.T) {
	t.Helper()
	logf, err := os.OpenFile(filepath.Join(d.dir, "log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer logf.Close()
	// In a network namespace of its own: a dockerd without a bridge
	// deletes any docker0 it finds at start, which would be the host
	// daemon's. It is reached through its socket; its containers have no
	// network.
	dockerd := append([]string{"dockerd",
		"--data-root", filepath.Join(d.dir, "data"), "--exec-root", filepath.Join(d.dir, "x"),
		"-H", d.Host, "--pidfile", filepath.Join(d.dir, "d.pid"),
		"--bridge", "none", "--iptables=false", "--ip-masq=false"}, d.args...)
	d.cmd = exec.Command("unshare", append([]string{"--net"}, dockerd...)...)
	if d.hideCgroup2 {
		d.cmd = exec.Command("unshare", append([]string{"--net", "--mount", "--propagation", "slave",
			"sh", "-c", `if mountpoint -q /sys/fs/cgroup/unified; then umount /sys/fs/cgroup/unified || exit 1; fi; exec "$@"`, "sh"}, dockerd...)...)
	}
	d.cmd.Stdout, d.cmd.Stderr = logf, logf
	if err := d.cmd.Start(); err != nil {
		t.Fatalf("start dockerd: %v", err)
	}
	d.exit = make(chan error, 1)
	go func(cmd *exec.Cmd, exit chan error) { exit <- cmd.Wait() }(d.cmd, d.exit)
	sandgatetest.WaitFor(t, "the private dockerd to answer", 60*time.Second, func() bool {
		return exec.Command("docker", "-H", d.Host, "version").Run() == nil
	})
}

// Stop stops the daemon with SIGTERM, as a restart of its service does,
// and waits for it to exit.
func (d *privateDocker) Stop(t *testing.T) {
	t.Helper()
	if d.cmd == nil {
		return
	}
	_ = d.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-d.exit:
	case <-time.After(60 * time.Second):
		_ = d.cmd.Process.Kill()
		<-d.exit
	}
	d.cmd = nil
}

// TestFaultDockerRestart restarts a private Docker daemon under a serving
// gateway while runs are in flight: they end as error or lost with a
// reason, readiness fails while the daemon is away and recovers by
// itself, and new runs work afterwards.
func TestFaultDockerRestart(t *testing.T) {
	t.Parallel()
	d := startPrivateDocker(t)
	s := startServer(t, withEnv("DOCKER_HOST", d.Host))
	var ids []string
	for i := range 2 {
		ids = append(ids, s.submitNoWait(t, "docker-restart-"+strconv.Itoa(i), "sh", "-c", "sleep 60"))
	}
	for _, id := range ids {
		sandgatetest.WaitFor(t, "run "+id+" to be running", 30*time.Second, func() bool {
			v, ok := s.runState(t, id)
			return ok && v.State == sandgate.StateRunning
		})
	}

	d.Stop(t)
	if code, reason := readyz(t, s); code != http.StatusServiceUnavailable || !strings.Contains(reason, "docker") {
		t.Errorf("/readyz with the daemon away = %d %q, want 503 naming docker", code, reason)
	}
	for _, id := range ids {
		v := s.waitFinished(t, id, 90*time.Second)
		if v.Outcome == nil || (*v.Outcome != sandgate.OutcomeError && *v.Outcome != sandgate.OutcomeLost) || v.Error == nil || v.Error.Message == "" {
			t.Errorf("run %s after a daemon restart = %v %+v, want error or lost with a reason", id, v.Outcome, v.Error)
		}
		if evs := s.runEvents(t, id); eventCounts(evs)[sandgate.EventRunLost]+eventCounts(evs)[sandgate.EventRunFailed] != 1 {
			t.Errorf("run %s: want one run.lost or run.failed event, have %v", id, eventCounts(evs))
		}
	}

	d.Start(t)
	s.waitReady(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	v, err := s.Client.Submit(ctx, sandgate.RunSpec{Command: []string{"sh", "-c", "echo back; exit 2"}}, client.SubmitOptions{Wait: 30 * time.Second})
	if err != nil {
		t.Fatalf("a run after the daemon returned: %v", err)
	}
	if v.Outcome == nil || *v.Outcome != sandgate.OutcomeFailed || v.ExitCode == nil || *v.ExitCode != 2 || v.Stdout.Data != "back\n" {
		t.Errorf("a run after the daemon returned = %+v, want failed exit 2", v)
	}
	s.verifyTrail(t)
	if err := s.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if left := dockerCLI(t, d.Host, "ps", "-aq", "--filter", "label="+sandgate.LabelNode+"="+s.Node); left != "" {
		t.Errorf("containers left on the private daemon: %s", left)
	}
}
