package executor_test

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/image"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor"
	"github.com/sandgate/sandgate/sandgatetest"
)

// Pulls from a real registry: Debian's docker-registry, started by the
// test on loopback with a storage directory of its own (127.0.0.0/8 is an
// insecure registry to the Docker daemon by default), behind a proxy of
// the test's that can cut or stall the transfer of the image's big layer
// once.

// registry is a docker-registry the test started, and the proxy in front
// of it.
type registry struct {
	addr  string // the registry's own
	proxy string // the proxy's
	// fault is what the proxy does to the next GET of a blob larger than
	// 1 MiB (or the rest of one, resumed) once it has passed faultAfter bytes of it: "" nothing,
	// "cut" close the connection, "stall" send nothing more until the
	// client goes or stallFor passes.
	mu       sync.Mutex
	fault    string
	stallFor time.Duration
	bigGets  atomic.Int64
}

// startRegistry starts docker-registry on a free loopback port with its
// own storage, and the proxy, both stopped with the test.
func startRegistry(t *testing.T) *registry {
	t.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("docker-registry is not installed (deploy/bootstrap.sh installs it): %v", err)
		}
		t.Skip("docker-registry is not installed (deploy/bootstrap.sh installs it)")
	}
	dir := t.TempDir()
	r := &registry{addr: freeLoopback(t)}
	config := fmt.Sprintf("version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n",
		filepath.Join(dir, "storage"), r.addr)
	cfg := filepath.Join(dir, "config.yml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "serve", cfg)
	var logs bytes.Buffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			l := logs.String()
			t.Logf("docker-registry's log (its end):\n%s", l[max(0, len(l)-4000):])
		}
	})
	for i := 0; ; i++ {
		resp, err := http.Get("http://" + r.addr + "/v2/")
		if err == nil {
			resp.Body.Close()
			break
		}
		if i == 200 {
			t.Fatalf("docker-registry did not answer: %v\n%s", err, logs.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r.proxy = ln.Addr().String()
	srv := &http.Server{Handler: r.handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return r
}

// freeLoopback is a loopback address whose port was free a moment ago.
func freeLoopback(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// faultAfter is how much of the big layer the proxy passes before its
// fault.
const faultAfter = 1 << 20

func (r *registry) setFault(fault string, stallFor time.Duration) {
	r.mu.Lock()
	r.fault, r.stallFor = fault, stallFor
	r.mu.Unlock()
}

func (r *registry) handler() http.Handler {
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: r.addr})
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Method != http.MethodGet || !strings.Contains(req.URL.Path, "/blobs/") {
			rp.ServeHTTP(w, req)
			return
		}
		r.mu.Lock()
		fault, stallFor := r.fault, r.stallFor
		r.mu.Unlock()
		rp.ServeHTTP(&faultyWriter{ResponseWriter: w, r: r, req: req, fault: fault, stallFor: stallFor}, req)
	})
}

// faultyWriter passes a response through, and does its fault to the
// first big blob past faultAfter bytes.
type faultyWriter struct {
	http.ResponseWriter
	r        *registry
	req      *http.Request
	fault    string
	stallFor time.Duration
	big      bool
	n        int
}

func (w *faultyWriter) WriteHeader(code int) {
	if (code == http.StatusOK || code == http.StatusPartialContent) && w.Header().Get("Content-Length") != "" {
		var size int
		fmt.Sscan(w.Header().Get("Content-Length"), &size)
		if w.big = size > faultAfter; w.big {
			w.r.bigGets.Add(1)
		}
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *faultyWriter) Write(b []byte) (int, error) {
	if !w.big || w.fault == "" || w.n+len(b) <= faultAfter {
		w.n += len(b)
		return w.ResponseWriter.Write(b)
	}
	w.r.setFault("", 0) // once
	_, _ = w.ResponseWriter.Write(b[:faultAfter-w.n])
	w.ResponseWriter.(http.Flusher).Flush()
	if w.fault == "stall" {
		select {
		case <-w.req.Context().Done():
		case <-time.After(w.stallFor):
		}
	}
	panic(http.ErrAbortHandler) // the connection is cut
}

func (w *faultyWriter) Flush() { w.ResponseWriter.(http.Flusher).Flush() }

// pushBigImage builds an image of the sandbox's with a layer of 6 MiB of
// random bytes (which no other image shares), pushes it to the registry
// as repo:v1, and removes it from the daemon: a run of it has to pull
// that layer. It returns the repository path within the registry.
func pushBigImage(t *testing.T, r *registry) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	repo := "pulltest/big-" + sandgatetest.RandomHex(t, 4)
	ref := r.addr + "/" + repo + ":v1"
	blob := make([]byte, 6<<20)
	_, _ = rand.Read(blob)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for name, body := range map[string][]byte{"Dockerfile": []byte("FROM " + executor.SandboxImage + "\nCOPY blob /blob\n"), "blob": blob} {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body))}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	resp, err := docker(t).ImageBuild(ctx, &buf, build.ImageBuildOptions{Tags: []string{ref}, Remove: true, ForceRemove: true, NetworkMode: "none", Version: build.BuilderV1})
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	out, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	push, err := docker(t).ImagePush(ctx, ref, image.PushOptions{RegistryAuth: "e30="})
	if err != nil {
		t.Fatalf("push %s: %v\n%s", ref, err, out)
	}
	pushed, _ := io.ReadAll(push)
	push.Close()
	if bytes.Contains(pushed, []byte(`"error"`)) {
		t.Fatalf("push %s: %s", ref, pushed)
	}
	if _, err := docker(t).ImageRemove(ctx, ref, image.RemoveOptions{Force: true, PruneChildren: true}); err != nil {
		t.Fatalf("remove %s: %v", ref, err)
	}
	return repo
}

// pullJob is a run of the image repo through the proxy, which its policy
// allows to be pulled from there.
func pullJob(t *testing.T, r *registry, repo string) sandgate.Job {
	ref := r.proxy + "/" + repo + ":v1"
	job := newJob(t, func(s *sandgate.RunSpec) { s.Image, s.PullPolicy = ref, sandgate.PullAlways }, "sh", "-c", "wc -c < /blob")
	job.Enforcement.PullRegistries = []string{r.proxy}
	t.Cleanup(func() {
		docker(t).ImageRemove(context.Background(), ref, image.RemoveOptions{Force: true, PruneChildren: true})
	})
	return job
}

// progressOf is the run's image.pull_progress events.
func progressOf(rec *recorder, runID string) []sandgate.Event {
	var out []sandgate.Event
	for _, ev := range rec.of(runID) {
		if ev.Type == sandgate.EventImagePullProgress {
			out = append(out, ev)
		}
	}
	return out
}

// TestPullFromRegistry: a run whose image is in a registry has it pulled,
// its progress recorded (the last event final, every layer done, the
// big layer's bytes fetched); a pull whose transfer is cut midway is
// retried and the run runs; a pull that stalls past the pull timeout is
// given up and retried (an executor.retry of op "pull", the first
// attempt's final progress naming the deadline), and the run runs.
func TestPullFromRegistry(t *testing.T) {
	r := startRegistry(t)
	repo := pushBigImage(t, r)

	t.Run("progress", func(t *testing.T) {
		ex, rec := newTestExecutor(t, nil)
		job := pullJob(t, r, repo)
		res := execute(t, ex, job)
		if exitCode(res) != 0 || strings.TrimSpace(text(res.Stdout)) != "6291456" {
			t.Fatalf("run: exit %d, stdout %q, stderr %q", exitCode(res), text(res.Stdout), text(res.Stderr))
		}
		evs := progressOf(rec, job.RunID)
		if len(evs) == 0 {
			t.Fatalf("no image.pull_progress events: %v", rec.typesOf(job.RunID))
		}
		last := evs[len(evs)-1].Payload
		if last["final"] != true || last["error"] != nil || last["layers"] != last["layers_done"] || last["layers"].(int) < 2 ||
			last["bytes_fetched"].(int64) < 6<<20 || last["image"] != job.Spec.Image {
			t.Errorf("last progress = %v, want final, every layer done, at least the big layer's 6 MiB fetched", last)
		}
		resolved := rec.of(job.RunID)
		for _, ev := range resolved {
			if ev.Type == sandgate.EventImageResolved && ev.Payload["pulled"] != true {
				t.Errorf("image.resolved = %v, want pulled", ev.Payload)
			}
		}
	})

	t.Run("cut midway", func(t *testing.T) {
		ex, _ := newTestExecutor(t, nil)
		job := pullJob(t, r, repo)
		before := r.bigGets.Load()
		r.setFault("cut", 0)
		res := execute(t, ex, job)
		if exitCode(res) != 0 || strings.TrimSpace(text(res.Stdout)) != "6291456" {
			t.Fatalf("run after a cut pull: exit %d, stdout %q, stderr %q, error %+v", exitCode(res), text(res.Stdout), text(res.Stderr), res.Error)
		}
		if got := r.bigGets.Load() - before; got < 2 {
			t.Errorf("the big layer was fetched %d time(s), want the cut transfer retried", got)
		}
	})

	t.Run("stalled past the pull timeout", func(t *testing.T) {
		ex, rec := newTestExecutor(t, func(c *executor.Config) { c.PullTimeout = 3 * time.Second })
		job := pullJob(t, r, repo)
		r.setFault("stall", 20*time.Second)
		res := execute(t, ex, job)
		if exitCode(res) != 0 || strings.TrimSpace(text(res.Stdout)) != "6291456" {
			t.Fatalf("run after a stalled pull: exit %d, stdout %q, stderr %q, error %+v", exitCode(res), text(res.Stdout), text(res.Stderr), res.Error)
		}
		var retried bool
		for _, ev := range rec.of(job.RunID) {
			if ev.Type == sandgate.EventExecutorRetry && ev.Payload["operation"] == "pull" {
				retried = true
			}
		}
		if !retried {
			t.Errorf("no executor.retry of op pull: %v", rec.typesOf(job.RunID))
		}
		evs := progressOf(rec, job.RunID)
		var timedOut bool
		for _, ev := range evs {
			if e, _ := ev.Payload["error"].(string); ev.Payload["final"] == true && ev.Payload["attempt"] == 1 && strings.Contains(e, "deadline exceeded") {
				timedOut = true
			}
		}
		if !timedOut {
			t.Errorf("no final progress of attempt 1 naming the deadline: %v", payloads(evs))
		}
	})
}

// TestPullRefusedIsNotRetried: a registry that answers that the image is
// not there is not asked again: the run fails with image unavailable,
// after one attempt and no executor.retry of op pull.
func TestPullRefusedIsNotRetried(t *testing.T) {
	r := startRegistry(t)
	ex, rec := newTestExecutor(t, nil)
	job := pullJob(t, r, "pulltest/none-"+sandgatetest.RandomHex(t, 4))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	res, err := ex.Execute(ctx, job)
	if sandgate.ErrorCodeOf(err) != sandgate.CodeImageUnavailable {
		t.Fatalf("Execute = %v (%+v), want image unavailable", err, res.Error)
	}
	var unavailable bool
	for _, ev := range rec.of(job.RunID) {
		unavailable = unavailable || ev.Type == sandgate.EventImageUnavailable && strings.Contains(fmt.Sprint(ev.Payload["reason"]), "pull")
	}
	if !unavailable {
		t.Errorf("no image.unavailable naming the pull: %v", rec.typesOf(job.RunID))
	}
	for _, ev := range rec.of(job.RunID) {
		if ev.Type == sandgate.EventExecutorRetry && ev.Payload["operation"] == "pull" {
			t.Errorf("a refused pull was retried: %v", ev.Payload)
		}
		if ev.Type == sandgate.EventImagePullProgress && ev.Payload["attempt"] != 1 {
			t.Errorf("progress of attempt %v: %v", ev.Payload["attempt"], ev.Payload)
		}
	}
}

func payloads(evs []sandgate.Event) []map[string]any {
	out := make([]map[string]any, len(evs))
	for i, ev := range evs {
		out[i] = ev.Payload
	}
	return out
}
