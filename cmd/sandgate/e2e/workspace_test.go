package e2e

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/cmd/sandgate/cli"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/client"
)

// tarEntry is one entry of an archive a test builds.
type tarEntry struct {
	name, body, link string
	typ              byte
	mode             int64
}

// tarGz builds a tar.gz of entries.
func tarGz(t testing.TB, entries ...tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	gz := gzip.NewWriter(&buf)
	tw := tar.NewWriter(gz)
	for _, e := range entries {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		h := &tar.Header{Typeflag: typ, Name: e.name, Mode: mode, Linkname: e.link, ModTime: time.Unix(1700000000, 0)}
		if typ == tar.TypeReg {
			h.Size = int64(len(e.body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if typ == tar.TypeReg {
			if _, err := tw.Write([]byte(e.body)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := gz.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// multipartRun is the body and content type of a multipart run.
func multipartRun(t testing.TB, spec string, archive []byte) (*bytes.Buffer, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	sh := textproto.MIMEHeader{}
	sh.Set("Content-Disposition", `form-data; name="spec"`)
	sh.Set("Content-Type", "application/json")
	w, err := mw.CreatePart(sh)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(w, spec)
	if archive != nil {
		fw, err := mw.CreateFormFile("workspace", "ws.tar.gz")
		if err != nil {
			t.Fatal(err)
		}
		fw.Write(archive)
	}
	if err := mw.Close(); err != nil {
		t.Fatal(err)
	}
	return &buf, mw.FormDataContentType()
}

// postMultipart posts a multipart run and returns the status and body.
func (s *testServer) postMultipart(t *testing.T, query, spec string, archive []byte) (int, []byte) {
	t.Helper()
	body, ct := multipartRun(t, spec, archive)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/v1/runs"+query, body)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Content-Type", ct)
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := s.HTTP.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

func sha256Hex(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// dirEmpty fails the test when dir holds anything (a missing dir is empty).
func dirEmpty(t *testing.T, dir, what string) {
	t.Helper()
	var left []string
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			left = append(left, p)
		}
		return nil
	})
	if len(left) > 0 {
		t.Errorf("%s left behind: %v", what, left)
	}
}

// TestEndToEndWorkspaceAndArtifacts sends a workspace archive and inline
// files with a run, lets the run read them and write results (and plant
// symlinks out of its workspace), exits non-zero on purpose, and fetches
// the artifacts back: listed, one by one with ranges and digests, as tar,
// and through the CLI; the trail says what went in and what came out.
func TestEndToEndWorkspaceAndArtifacts(t *testing.T) {
	s := startServer(t)
	archive := tarGz(t,
		tarEntry{name: "src/", typ: tar.TypeDir, mode: 0o755},
		tarEntry{name: "src/input.txt", body: "from the archive\n"},
		tarEntry{name: "run.sh", body: "#!/bin/sh\ncat src/input.txt notes.txt > out/result.txt\n", mode: 0o755},
	)
	script := `set -e; id -u > uid; mkdir -p out/deep/er; ./run.sh; ` +
		`head -c 3000000 /dev/zero > out/deep/er/zeros.bin; ` +
		`ln -s /etc/passwd out/passwd; ln -s / out/root; ` +
		`echo done; exit 3`
	spec := fmt.Sprintf(`{"command":["sh","-c",%q],"files":[{"path":"notes.txt","content":"inline note\n"}],"artifacts":["out/**","uid","missing/*"],"timeout_seconds":60}`, script)
	status, body := s.postMultipart(t, "?wait=60s", spec, archive)
	if status != http.StatusOK {
		t.Fatalf("POST multipart = %d %s", status, body)
	}
	var run api.RunView
	if err := json.Unmarshal(body, &run); err != nil {
		t.Fatal(err)
	}
	if run.Outcome == nil || *run.Outcome != sandgate.OutcomeFailed || run.ExitCode == nil || *run.ExitCode != 3 {
		t.Fatalf("run ended %v %v: %+v", run.Outcome, run.ExitCode, run)
	}
	if run.Spec.Workdir != "/workspace" || run.Spec.Workspace == nil || run.Spec.Workspace.SHA256 != sha256Hex(archive) || run.Spec.Workspace.Entries != 3 {
		t.Errorf("spec workdir %q, workspace %+v", run.Spec.Workdir, run.Spec.Workspace)
	}
	if len(run.Spec.Files) != 1 || !strings.HasPrefix(run.Spec.Files[0].Content, sandgate.MaskPrefix) {
		t.Errorf("the stored spec shows the inline file's content: %+v", run.Spec.Files)
	}
	// Skipped: the two symlinks, and the pattern missing/* that matched
	// nothing.
	if a := run.Artifacts; a == nil || a.Count != 3 || a.Truncated || a.SkippedCount != 3 {
		t.Errorf("artifact summary %+v, want 3 files, 2 skipped symlinks and 1 pattern matching nothing", a)
	}

	ctx := context.Background()
	list, err := s.Client.Artifacts(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	var paths []string
	for _, a := range list.Artifacts {
		paths = append(paths, a.Path)
	}
	if want := []string{"out/deep/er/zeros.bin", "out/result.txt", "uid"}; !slices.Equal(paths, want) {
		t.Fatalf("artifacts %v, want %v", paths, want)
	}
	var result bytes.Buffer
	if _, err := s.Client.Artifact(ctx, run.ID, "out/result.txt", &result); err != nil {
		t.Fatal(err)
	}
	if got := result.String(); got != "from the archive\ninline note\n" {
		t.Errorf("result.txt = %q", got)
	}
	var uid bytes.Buffer
	if _, err := s.Client.Artifact(ctx, run.ID, "uid", &uid); err != nil || strings.TrimSpace(uid.String()) != "10001" {
		t.Errorf("the run wrote its workspace as uid %q (%v), want 10001", uid.String(), err)
	}

	// One range of a file, its digest as ETag, 304 for a matching ETag,
	// 416 past the end.
	zeros := list.Artifacts[0]
	get := func(header ...string) (int, http.Header, []byte) {
		return s.do(t, http.MethodGet, "/v1/runs/"+run.ID+"/artifacts/out/deep/er/zeros.bin", "", header...)
	}
	st, h, part := get("Range", "bytes=1000-1999")
	if st != http.StatusPartialContent || len(part) != 1000 || h.Get("Content-Range") != "bytes 1000-1999/3000000" {
		t.Errorf("range = %d, %d bytes, Content-Range %q", st, len(part), h.Get("Content-Range"))
	}
	if h.Get("ETag") != `"sha256:`+zeros.SHA256+`"` || zeros.SHA256 != sha256Hex(make([]byte, 3000000)) {
		t.Errorf("ETag %q, listed digest %s", h.Get("ETag"), zeros.SHA256)
	}
	if st, _, _ := get("If-None-Match", h.Get("ETag")); st != http.StatusNotModified {
		t.Errorf("If-None-Match = %d, want 304", st)
	}
	if st, h, body := get("Range", "bytes=3000000-"); st != http.StatusRequestedRangeNotSatisfiable || apiError(body).Error.Code != sandgate.CodeRangeNotSatisfiable || h.Get("Content-Range") != "bytes */3000000" {
		t.Errorf("range past the end = %d %s (Content-Range %q)", st, body, h.Get("Content-Range"))
	}
	if st, _, body := s.do(t, http.MethodGet, "/v1/runs/"+run.ID+"/artifacts/out/passwd", ""); st != http.StatusNotFound {
		t.Errorf("a symlink the run planted = %d %s, want 404", st, body)
	}

	// All of them as tar, each entry's bytes and digest.
	var tarBuf bytes.Buffer
	if err := s.Client.ArtifactsTar(ctx, run.ID, &tarBuf); err != nil {
		t.Fatal(err)
	}
	tr := tar.NewReader(&tarBuf)
	n := 0
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		data, _ := io.ReadAll(tr)
		if sha256Hex(data) != hdr.PAXRecords["SANDGATE.sha256"] {
			t.Errorf("tar entry %s: digest differs", hdr.Name)
		}
		n++
	}
	if n != 3 {
		t.Errorf("tar has %d entries, want 3", n)
	}

	// The trail: what went in (run.requested: the archive's digest), what
	// was written (container.created), what came out (artifacts.collected).
	events := s.waitAuditEvents(t, s.Token, url.Values{"run_id": {run.ID}}, func(evs []sandgate.AuditRecord) bool {
		return hasEvent(evs, sandgate.EventArtifactsCollected) && hasEvent(evs, sandgate.EventContainerRemoved)
	})
	for _, ev := range events {
		switch ev.Type {
		case sandgate.EventRunRequested:
			ws, _ := ev.Payload["spec"].(map[string]any)["workspace"].(map[string]any)
			if ws["sha256"] != sha256Hex(archive) {
				t.Errorf("run.requested workspace = %v", ws)
			}
		case sandgate.EventArtifactsCollected:
			files, _ := ev.Payload["files"].([]any)
			if len(files) != 3 {
				t.Errorf("artifacts.collected files = %v", ev.Payload)
			}
		case sandgate.EventContainerCreated:
			if _, ok := ev.Payload["workspace"]; !ok {
				t.Errorf("container.created has no workspace: %v", ev.Payload)
			}
		}
	}
	dirEmpty(t, s.Env["SANDGATE_UPLOAD_DIR"], "uploads")
	dirEmpty(t, s.Env["SANDGATE_WORKSPACE_DIR"], "workspaces")

	// The CLI packs a directory (without what .sandgateignore names),
	// downloads the artifacts and exits with the run's code.
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "main.sh"), []byte("cp data.txt out.txt; exit 7\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "data.txt"), []byte("cli data\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "secret.env"), []byte("TOKEN=x\n"), 0o600)
	os.WriteFile(filepath.Join(dir, ".sandgateignore"), []byte("*.env\n"), 0o644)
	down := filepath.Join(t.TempDir(), "out")
	res := runCLIAgainst(t, s, "run", "--workspace", dir, "--artifact", "*", "--download", down, "--", "sh", "-c", "test ! -e secret.env && ./main.sh")
	if res.code != 7 {
		t.Fatalf("sandgate run exited %d, want 7\n%s", res.code, res.stderr)
	}
	if got, _ := os.ReadFile(filepath.Join(down, "out.txt")); string(got) != "cli data\n" {
		t.Errorf("downloaded out.txt = %q\n%s", got, res.stderr)
	}
	if _, err := os.Stat(filepath.Join(down, "secret.env")); err == nil {
		t.Errorf("secret.env went into the workspace despite .sandgateignore")
	}

	// sandgate runs artifacts: the list, one file to stdout.
	res = runCLIAgainst(t, s, "runs", "artifacts", run.ID)
	if res.code != 0 || !strings.Contains(res.stdout, "out/result.txt") || !strings.Contains(res.stdout, zeros.SHA256) {
		t.Errorf("runs artifacts = %d\n%s", res.code, res.stdout)
	}
	res = runCLIAgainst(t, s, "runs", "artifacts", run.ID, "out/result.txt")
	if res.code != 0 || res.stdout != "from the archive\ninline note\n" {
		t.Errorf("runs artifacts RUN PATH = %d %q", res.code, res.stdout)
	}
}

// TestEndToEndHostileArchives sends each kind of hostile archive: each is
// refused with 400 naming the entry, before anything is decided, recorded
// or run, and nothing is left in the upload directory.
func TestEndToEndHostileArchives(t *testing.T) {
	s := startServer(t)
	zipOf := func(names ...string) []byte {
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		for _, n := range names {
			w, _ := zw.Create(n)
			w.Write([]byte("x"))
		}
		zw.Close()
		return buf.Bytes()
	}
	// bomb is a tar.gz of one 5 GiB file of zeros in about 5 MB: gzip
	// members concatenated (a valid gzip stream), the 1 MiB of zeros
	// compressed once and repeated, so the test does not spend minutes
	// compressing 5 GiB.
	bomb := func() []byte {
		member := func(p []byte) []byte {
			var buf bytes.Buffer
			gz := gzip.NewWriter(&buf)
			gz.Write(p)
			gz.Close()
			return buf.Bytes()
		}
		var hdr bytes.Buffer
		tw := tar.NewWriter(&hdr)
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "zeros", Size: 5 << 30, Mode: 0o644}); err != nil {
			t.Fatal(err)
		}
		tw.Flush()
		out := member(hdr.Bytes())
		zeros := member(make([]byte, 1<<20))
		for i := 0; i < 5<<10; i++ {
			out = append(out, zeros...)
		}
		return append(out, member(make([]byte, 1024))...) // the end of the tar
	}
	cases := []struct {
		name    string
		archive []byte
		entry   string
	}{
		{"absolute path", tarGz(t, tarEntry{name: "/etc/cron.d/x", body: "x"}), "/etc/cron.d/x"},
		{"dot-dot", tarGz(t, tarEntry{name: "a/../../x", body: "x"}), "a/../../x"},
		{"symlink out", tarGz(t, tarEntry{name: "l", typ: tar.TypeSymlink, link: "/"}), "l"},
		{"hard link out", tarGz(t, tarEntry{name: "h", typ: tar.TypeLink, link: "/etc/shadow"}), "h"},
		{"device node", tarGz(t, tarEntry{name: "dev", typ: tar.TypeChar}), "dev"},
		{"fifo", tarGz(t, tarEntry{name: "fifo", typ: tar.TypeFifo}), "fifo"},
		{"setuid", tarGz(t, tarEntry{name: "suid", body: "x", mode: 0o4755}), "suid"},
		{"duplicate", tarGz(t, tarEntry{name: "a", body: "1"}, tarEntry{name: "a", body: "2"}), "a"},
		{"zip dot-dot", zipOf("../escape"), "../escape"},
		{"bomb", bomb(), "zeros"},
		{"not an archive", []byte("just some text, not an archive at all"), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body := s.postMultipart(t, "", `{"command":["true"],"task_id":"hostile"}`, c.archive)
			e := apiError(body).Error
			if status != http.StatusBadRequest || e.Code != sandgate.CodeInvalidRequest || e.Details["field"] != "workspace" {
				t.Fatalf("= %d %s, want 400 naming the workspace", status, body)
			}
			if c.entry != "" && !strings.Contains(e.Message, c.entry) {
				t.Errorf("message %q does not name the entry %q", e.Message, c.entry)
			}
		})
	}
	if runs, err := s.Client.Runs(context.Background(), client.ListOptions{TaskID: "hostile"}); err != nil || len(runs.Runs) != 0 {
		t.Errorf("runs made of hostile archives: %v %v", runs.Runs, err)
	}
	evs := s.auditEvents(t, s.Token, url.Values{"type": {string(sandgate.EventRunRequested)}})
	if len(evs) != 0 {
		t.Errorf("hostile archives reached the trail: %s", eventTypes(evs))
	}
	dirEmpty(t, s.Env["SANDGATE_UPLOAD_DIR"], "uploads")
}

// TestEndToEndWorkspaceLimits: a workspace is the size it was admitted
// with (a run cannot write past it), an archive that does not fit is
// denied by policy, the artifact limit truncates, and artifacts are
// collected from a run that timed out.
func TestEndToEndWorkspaceLimits(t *testing.T) {
	s := startServer(t)
	run := s.submitWait(t, s.Token, `{"command":["sh","-c","head -c 40000000 /dev/zero > big; echo rc=$?; wc -c < big"],"resources":{"workspace_mb":16},"artifacts":["nothing"]}`)
	var rc, size int64
	if _, err := fmt.Sscanf(run.Stdout.Data, "rc=%d\n%d", &rc, &size); err != nil || rc == 0 || size < 15<<20 || size > 21<<20 {
		t.Errorf("40 MB into a 16 MB workspace: rc %d, %d bytes written (%v): %q %q", rc, size, err, run.Stdout.Data, run.Stderr.Data)
	}

	big := tarGz(t, tarEntry{name: "blob", body: strings.Repeat("x", 9<<20)})
	status, body := s.postMultipart(t, "", `{"command":["true"],"resources":{"workspace_mb":8}}`, big)
	if e := apiError(body).Error; status != http.StatusForbidden || !strings.Contains(e.Message, "workspace_archive_fits") {
		t.Errorf("9 MB archive into an 8 MB workspace = %d %s", status, body)
	}

	run = s.submitWait(t, s.Token, `{"command":["sh","-c","for i in 1 2 3 4; do head -c 1000 /dev/zero > f$i; done"],"artifacts":["f*"],"artifact_limit_bytes":2500}`)
	if a := run.Artifacts; a == nil || a.Count != 2 || a.Bytes != 2000 || !a.Truncated {
		t.Errorf("artifact limit 2500 over 4 files of 1000: %+v", run.Artifacts)
	}

	run = s.submitWait(t, s.Token, `{"command":["sh","-c","echo partial > report.txt; sleep 30"],"artifacts":["report.txt"],"timeout_seconds":2}`)
	if run.Outcome == nil || *run.Outcome != sandgate.OutcomeTimedOut || run.Artifacts == nil || run.Artifacts.Count != 1 {
		t.Errorf("timed-out run: outcome %v, artifacts %+v", run.Outcome, run.Artifacts)
	}
	dirEmpty(t, s.Env["SANDGATE_WORKSPACE_DIR"], "workspaces")
}

// runCLIAgainst runs the sandgate command line against the test server,
// as its development principal.
func runCLIAgainst(t *testing.T, s *testServer, args ...string) cliResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var out syncBuffer
	env := map[string]string{"SANDGATE_URL": s.URL, "SANDGATE_TOKEN": s.Token}
	err := runApp(ctx, args, env, &out, nil)
	res := cliResult{stdout: out.String(), stderr: out.String()}
	if err != nil {
		var ee *cli.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("err = %v (%T), want an *cli.ExitError", err, err)
		}
		res.code, res.message = ee.Code, ee.Message
		res.stderr += ee.Message
	}
	return res
}
