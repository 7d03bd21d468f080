package gateway

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"os"
	"sort"
	"sync"
	"testing"

	"github.com/sandgate/sandgate"
)

// fakeArtifacts keeps blobs and runs' artifacts in memory.
type fakeArtifacts struct {
	mu    sync.Mutex
	blobs map[string][]byte
	runs  map[string][]sandgate.Artifact
}

func newFakeArtifacts() *fakeArtifacts {
	return &fakeArtifacts{blobs: map[string][]byte{}, runs: map[string][]sandgate.Artifact{}}
}

func (f *fakeArtifacts) PutBlob(_ context.Context, r io.Reader) (string, int64, error) {
	b, err := io.ReadAll(r)
	if err != nil {
		return "", 0, err
	}
	sum := sha256.Sum256(b)
	h := hex.EncodeToString(sum[:])
	f.mu.Lock()
	f.blobs[h] = b
	f.mu.Unlock()
	return h, int64(len(b)), nil
}

func (f *fakeArtifacts) WriteBlob(_ context.Context, sum string, off, n int64, w io.Writer) error {
	f.mu.Lock()
	b, ok := f.blobs[sum]
	f.mu.Unlock()
	if !ok {
		return sandgate.Errorf(sandgate.CodeNotFound, "no blob")
	}
	if n < 0 {
		n = int64(len(b)) - off
	}
	_, err := w.Write(b[off : off+n])
	return err
}

func (f *fakeArtifacts) SaveArtifacts(_ context.Context, runID string, files []sandgate.Artifact) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.runs[runID] = append(f.runs[runID], files...)
	sort.Slice(f.runs[runID], func(i, j int) bool { return f.runs[runID][i].Path < f.runs[runID][j].Path })
	return nil
}

func (f *fakeArtifacts) RunArtifacts(_ context.Context, runID string) ([]sandgate.Artifact, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]sandgate.Artifact{}, f.runs[runID]...), nil
}

// addArtifact stores data as runID's artifact p.
func (e *testEnv) addArtifact(runID, p string, data []byte) sandgate.Artifact {
	sum, n, _ := e.arts.PutBlob(context.Background(), bytes.NewReader(data))
	a := sandgate.Artifact{Path: p, Size: n, SHA256: sum, Mode: 0o644}
	e.arts.SaveArtifacts(context.Background(), runID, []sandgate.Artifact{a})
	return a
}

// TestArtifactRoutes: the list, one file (whole, ranges, ETag, 304, 416,
// a missing path), the tar; another team's run is 404.
func TestArtifactRoutes(t *testing.T) {
	e := newEnv(t)
	run := e.submit(tokAlice, "echo", "hi")
	data := bytes.Repeat([]byte("0123456789"), 100)
	a := e.addArtifact(run.ID, "out/report.txt", data)
	e.addArtifact(run.ID, "a.txt", []byte("a"))

	r := e.do("GET", "/v1/runs/"+run.ID+"/artifacts", tokAlice, "")
	if r.status != 200 || !bytes.Contains(r.body, []byte(`"path":"a.txt"`)) || bytes.Index(r.body, []byte("a.txt")) > bytes.Index(r.body, []byte("out/report.txt")) {
		t.Fatalf("list = %d %s", r.status, r.body)
	}
	if r := e.do("GET", "/v1/runs/"+run.ID+"/artifacts", tokBob, ""); r.status != 404 {
		t.Errorf("another team's list = %d", r.status)
	}
	one := "/v1/runs/" + run.ID + "/artifacts/out/report.txt"
	r = e.do("GET", one, tokAuditor, "")
	if r.status != 200 || !bytes.Equal(r.body, data) || r.header.Get("ETag") != `"sha256:`+a.SHA256+`"` {
		t.Errorf("one = %d, %d bytes, ETag %q", r.status, len(r.body), r.header.Get("ETag"))
	}
	tests := []struct {
		name, header string
		status       int
		body         []byte
		contentRange string
	}{
		{"first-last", "bytes=10-19", 206, data[10:20], "bytes 10-19/1000"},
		{"open end", "bytes=990-", 206, data[990:], "bytes 990-999/1000"},
		{"suffix", "bytes=-5", 206, data[995:], "bytes 995-999/1000"},
		{"last past the end", "bytes=995-5000", 206, data[995:], "bytes 995-999/1000"},
		{"several ranges", "bytes=0-1,5-6", 200, data, ""},
		{"another unit", "items=0-1", 200, data, ""},
		{"past the end", "bytes=1000-", 416, nil, "bytes */1000"},
		{"malformed", "bytes=x-y", 400, nil, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := e.do("GET", one, tokAlice, "", "Range: "+tt.header)
			if r.status != tt.status || (tt.body != nil && !bytes.Equal(r.body, tt.body)) || r.header.Get("Content-Range") != tt.contentRange {
				t.Errorf("= %d %q (Content-Range %q)", r.status, r.body, r.header.Get("Content-Range"))
			}
		})
	}
	if r := e.do("GET", one, tokAlice, "", "If-None-Match: W/\"x\", \"sha256:"+a.SHA256+"\""); r.status != 304 {
		t.Errorf("If-None-Match = %d", r.status)
	}
	if r := e.do("GET", "/v1/runs/"+run.ID+"/artifacts/nope", tokAlice, ""); r.status != 404 {
		t.Errorf("missing artifact = %d", r.status)
	}
	r = e.do("GET", "/v1/runs/"+run.ID+"/artifacts.tar", tokAdmin, "")
	if r.status != 200 {
		t.Fatalf("tar = %d %s", r.status, r.body)
	}
	tr := tar.NewReader(bytes.NewReader(r.body))
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, h.Name)
	}
	if len(names) != 2 || names[0] != "a.txt" || names[1] != "out/report.txt" {
		t.Errorf("tar entries %v", names)
	}
}

// TestMultipartRun: a multipart run's archive is checked and handed to
// the executor, then removed; a hostile one is refused naming the entry
// before anything is decided; parts are checked.
func TestMultipartRun(t *testing.T) {
	var uploadDir string
	e := newEnv(t, func(c *Config, _ *testEnv) { uploadDir = c.UploadDir })
	archive := func(name string, typ byte) []byte {
		var buf bytes.Buffer
		gz := gzip.NewWriter(&buf)
		tw := tar.NewWriter(gz)
		tw.WriteHeader(&tar.Header{Typeflag: typ, Name: name, Size: 2, Mode: 0o644, Linkname: "/"})
		if typ == tar.TypeReg {
			tw.Write([]byte("hi"))
		}
		tw.Close()
		gz.Close()
		return buf.Bytes()
	}
	post := func(parts ...[2]string) response {
		var body bytes.Buffer
		mw := multipart.NewWriter(&body)
		for _, p := range parts {
			h := textproto.MIMEHeader{}
			h.Set("Content-Disposition", `form-data; name="`+p[0]+`"`)
			if p[0] == "spec" {
				h.Set("Content-Type", "application/json")
			} else {
				h.Set("Content-Type", "application/octet-stream")
			}
			w, _ := mw.CreatePart(h)
			w.Write([]byte(p[1]))
		}
		mw.Close()
		return e.do("POST", "/v1/runs?wait=2s", tokAlice, body.String(), "Content-Type: "+mw.FormDataContentType())
	}
	r := post([2]string{"spec", `{"command":["echo","ok"]}`}, [2]string{"workspace", string(archive("main.py", tar.TypeReg))})
	if r.status != 200 || !bytes.Contains(r.body, []byte(`"workspace":{"format":"tar.gz"`)) || !bytes.Contains(r.body, []byte(`"workdir":"/workspace"`)) {
		t.Fatalf("multipart run = %d %s", r.status, r.body)
	}
	e.exec.mu.Lock()
	job := e.exec.jobs[len(e.exec.jobs)-1]
	e.exec.mu.Unlock()
	if job.Workspace == "" {
		t.Errorf("the executor got no workspace")
	}
	if _, err := os.Stat(job.Workspace); !os.IsNotExist(err) {
		t.Errorf("the upload outlived its run: %v", err)
	}
	decisions := e.admitter.calls.Load()
	for _, tc := range []struct {
		name   string
		parts  [][2]string
		status int
		field  string
	}{
		{"symlink", [][2]string{{"spec", `{"command":["true"]}`}, {"workspace", string(archive("l", tar.TypeSymlink))}}, 400, "workspace"},
		{"no spec", [][2]string{{"workspace", string(archive("a", tar.TypeReg))}}, 400, "spec"},
		{"unknown part", [][2]string{{"spec", `{"command":["true"]}`}, {"extra", "x"}}, 400, "extra"},
		{"spec twice", [][2]string{{"spec", `{"command":["true"]}`}, {"spec", `{"command":["true"]}`}}, 400, "spec"},
		{"bad spec", [][2]string{{"spec", `{"command":["true"],"nope":1}`}}, 400, "nope"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			parts := make([][2]string, len(tc.parts))
			copy(parts, tc.parts)
			r := post(parts...)
			if r.status != tc.status || r.errorBody().Error.Details["field"] != tc.field {
				t.Errorf("= %d %s, want %d naming %s", r.status, r.body, tc.status, tc.field)
			}
		})
	}
	if n := e.admitter.calls.Load(); n != decisions {
		t.Errorf("refused multipart requests reached the policy: %d decisions, want %d", n, decisions)
	}
	if left, _ := os.ReadDir(uploadDir); len(left) != 0 {
		t.Errorf("uploads left behind: %v", left)
	}
	if r := e.do("POST", "/v1/runs", tokAlice, `{"command":["true"],"artifacts":["a/[x"]}`); r.status != http.StatusBadRequest || r.errorBody().Error.Details["field"] != "artifacts[0]" {
		t.Errorf("bad glob = %d %s", r.status, r.body)
	}
}

// TestStaleUploadsRemoved: the archives a previous process left in the
// upload directory are removed when a gateway starts.
func TestStaleUploadsRemoved(t *testing.T) {
	dir := t.TempDir()
	stale := dir + "/workspace-123.upload"
	if err := os.WriteFile(stale, []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	other := dir + "/keep.txt"
	os.WriteFile(other, []byte("x"), 0o600)
	newEnv(t, func(c *Config, _ *testEnv) { c.UploadDir = dir })
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("a stale upload survived the start: %v", err)
	}
	if _, err := os.Stat(other); err != nil {
		t.Errorf("a file that is not an upload was removed: %v", err)
	}
}
