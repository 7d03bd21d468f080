package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/client"
	"github.com/sandgate/sandgate/sandgatetest"
)

// TestEndToEndHostileBodies sends malformed and hostile run requests to the
// real stack (real normalisation with symlinks resolved on the host, the
// real policy bundle): each is answered 4xx with a SANDGATE- code and the
// request's correlation ID, and none creates a container or stores a run.
func TestEndToEndHostileBodies(t *testing.T) {
	// A mount root holding a project directory, a symlink that escapes to
	// /etc and one to the Docker socket's directory.
	root := t.TempDir()
	if err := os.Mkdir(filepath.Join(root, "proj"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range map[string]string{"escape": "/etc", "sock": "/var/run"} {
		if err := os.Symlink(target, filepath.Join(root, name)); err != nil {
			t.Fatal(err)
		}
	}
	s := startServer(t, withEnv("SANDGATE_MOUNT_ROOTS", root))

	mount := func(source string) string {
		b, _ := json.Marshal(source)
		return `{"command":["true"],"mounts":[{"source":` + string(b) + `,"target":"/w"}]}`
	}
	huge := `{"command":["true"],"stdin":"` + strings.Repeat("A", sandgate.MaxSpecBytes) + `"}`
	deepObject := strings.Repeat(`{"a":`, 10000) + `1` + strings.Repeat(`}`, 10000)
	deepArray := `{"command":` + strings.Repeat(`[`, 10000) + strings.Repeat(`]`, 10000) + `}`

	const (
		invalid  = sandgate.CodeInvalidRequest
		denied   = sandgate.CodePolicyDenied
		tooLarge = sandgate.CodeTooLarge
	)
	tests := []struct {
		name string
		// path defaults to /v1/runs?wait=30s.
		path string
		body string
		// header overrides request headers (Content-Type defaults to
		// application/json).
		header map[string]string
		// chunked hides the body's length, so only reading finds it too
		// large.
		chunked    bool
		wantStatus int
		wantCode   sandgate.ErrorCode
	}{
		// Not a JSON object.
		{name: "empty body", body: "", wantStatus: 400, wantCode: invalid},
		{name: "whitespace", body: " \r\n\t ", wantStatus: 400, wantCode: invalid},
		{name: "invalid JSON", body: `{"command":["true"]`, wantStatus: 400, wantCode: invalid},
		{name: "not JSON", body: `command=true`, wantStatus: 400, wantCode: invalid},
		{name: "JSON null", body: `null`, wantStatus: 400, wantCode: invalid},
		{name: "JSON array", body: `[{"command":["true"]}]`, wantStatus: 400, wantCode: invalid},
		{name: "JSON string", body: `"true"`, wantStatus: 400, wantCode: invalid},
		{name: "trailing object", body: `{"command":["true"]}{"command":["rm","-rf","/"]}`, wantStatus: 400, wantCode: invalid},
		{name: "trailing garbage", body: `{"command":["true"]} xyz`, wantStatus: 400, wantCode: invalid},
		{name: "invalid UTF-8 in a field name", body: "{\"comm\xff\xfeand\":[\"true\"]}", wantStatus: 400, wantCode: invalid},
		{name: "deeply nested object", body: deepObject, wantStatus: 400, wantCode: invalid},
		{name: "deeply nested command", body: deepArray, wantStatus: 400, wantCode: invalid},
		{name: "over 1 MiB", body: huge, wantStatus: 413, wantCode: tooLarge},
		{name: "over 1 MiB chunked", body: huge, chunked: true, wantStatus: 413, wantCode: tooLarge},

		// Unknown and server-owned fields.
		{name: "unknown field", body: `{"command":["true"],"priviledged":true}`, wantStatus: 400, wantCode: invalid},
		{name: "unknown resources field", body: `{"command":["true"],"resources":{"gpus":1}}`, wantStatus: 400, wantCode: invalid},
		{name: "unknown mount field", body: `{"command":["true"],"mounts":[{"source":"` + root + `/proj","target":"/w","mode":"rw"}]}`, wantStatus: 400, wantCode: invalid},
		{name: "server field uid", body: `{"command":["true"],"uid":0}`, wantStatus: 400, wantCode: invalid},
		{name: "server field gid", body: `{"command":["true"],"gid":0}`, wantStatus: 400, wantCode: invalid},
		{name: "server field security", body: `{"command":["true"],"security":{"no_new_privileges":false}}`, wantStatus: 400, wantCode: invalid},
		{name: "server field resolved", body: `{"command":["true"],"mounts":[{"source":"` + root + `/proj","target":"/w","resolved":"/"}]}`, wantStatus: 400, wantCode: invalid},
		{name: "reserved label", body: `{"command":["true"],"labels":{"sandgate.node":"elsewhere"}}`, wantStatus: 400, wantCode: invalid},

		// Wrong types and values.
		{name: "command missing", body: `{"image":"sandgate/sandbox:latest"}`, wantStatus: 400, wantCode: invalid},
		{name: "command empty", body: `{"command":[]}`, wantStatus: 400, wantCode: invalid},
		{name: "command a string", body: `{"command":"rm -rf /"}`, wantStatus: 400, wantCode: invalid},
		{name: "command of numbers", body: `{"command":[1,2]}`, wantStatus: 400, wantCode: invalid},
		{name: "env a list", body: `{"command":["true"],"env":["A=1"]}`, wantStatus: 400, wantCode: invalid},
		{name: "env bad name", body: `{"command":["true"],"env":{"A=B":"x"}}`, wantStatus: 400, wantCode: invalid},
		{name: "privileged a string", body: `{"command":["true"],"privileged":"false"}`, wantStatus: 400, wantCode: invalid},
		{name: "NUL in command", body: `{"command":["sh","-c","true\u0000; reboot"]}`, wantStatus: 400, wantCode: invalid},
		{name: "NUL in env value", body: `{"command":["true"],"env":{"A":"x\u0000y"}}`, wantStatus: 400, wantCode: invalid},
		{name: "NUL in image", body: `{"image":"sandgate/sandbox:latest\u0000","command":["true"]}`, wantStatus: 400, wantCode: invalid},
		// NUL anywhere: Postgres cannot hold it, so it is refused at
		// decode, not admitted and answered 503 by the database.
		{name: "NUL in a label value", body: `{"command":["true"],"labels":{"a":"x\u0000"}}`, wantStatus: 400, wantCode: invalid},
		{name: "NUL in a label key", body: `{"command":["true"],"labels":{"a\u0000b":"x"}}`, wantStatus: 400, wantCode: invalid},
		{name: "NUL in session_id", body: `{"command":["true"],"session_id":"s\u0000"}`, wantStatus: 400, wantCode: invalid},
		{name: "NUL in a sysctl", body: `{"command":["true"],"sysctls":{"net.ipv4.tcp_syncookies":"1\u0000"}}`, wantStatus: 400, wantCode: invalid},
		{name: "NUL in a mount source", body: mount(root + "/proj\u0000"), wantStatus: 400, wantCode: invalid},
		{name: "lone surrogate", body: `{"command":["echo","\ud800"]}`, wantStatus: 400, wantCode: invalid},
		// Lists past their maxima, refused before policy sees them.
		{name: "95,000 capabilities", body: `{"command":["true"],"cap_add":[` + strings.Repeat(`"x",`, 95000) + `"x"]}`, wantStatus: 400, wantCode: invalid},
		{name: "too many env entries", body: `{"command":["true"],"env":{` + manyEnv(300) + `}}`, wantStatus: 400, wantCode: invalid},
		{name: "image with spaces", body: `{"image":"sandgate/sandbox latest","command":["true"]}`, wantStatus: 400, wantCode: invalid},
		{name: "relative workdir", body: `{"command":["true"],"workdir":"../.."}`, wantStatus: 400, wantCode: invalid},
		{name: "bad user", body: `{"command":["true"],"user":"a:b:c"}`, wantStatus: 400, wantCode: invalid},
		{name: "uid out of range", body: `{"command":["true"],"user":"99999999999"}`, wantStatus: 400, wantCode: invalid},
		{name: "negative memory", body: `{"command":["true"],"resources":{"memory_mb":-512}}`, wantStatus: 400, wantCode: invalid},
		{name: "negative cpus", body: `{"command":["true"],"resources":{"cpus":-1}}`, wantStatus: 400, wantCode: invalid},
		{name: "negative pids", body: `{"command":["true"],"resources":{"pids":-1}}`, wantStatus: 400, wantCode: invalid},
		{name: "fractional pids", body: `{"command":["true"],"resources":{"pids":1.5}}`, wantStatus: 400, wantCode: invalid},
		{name: "memory a string", body: `{"command":["true"],"resources":{"memory_mb":"512"}}`, wantStatus: 400, wantCode: invalid},
		{name: "timeout 1e400", body: `{"command":["true"],"timeout_seconds":1e400}`, wantStatus: 400, wantCode: invalid},
		{name: "negative timeout", body: `{"command":["true"],"timeout_seconds":-1}`, wantStatus: 400, wantCode: invalid},
		{name: "negative output limit", body: `{"command":["true"],"output_limit_bytes":-1}`, wantStatus: 400, wantCode: invalid},
		{name: "bad pull policy", body: `{"command":["true"],"pull_policy":"sometimes"}`, wantStatus: 400, wantCode: invalid},
		{name: "bad security opt", body: `{"command":["true"],"security_opt":["seccomp"]}`, wantStatus: 400, wantCode: invalid},

		// Mounts that try to leave the mount roots: by traversal, by a
		// symlink, by a path outside, by a relative or missing source.
		{name: "traversal mount", body: mount(root + "/proj/../../../../etc"), wantStatus: 403, wantCode: denied},
		{name: "symlink escape mount", body: mount(root + "/escape"), wantStatus: 403, wantCode: denied},
		{name: "symlink to the docker socket", body: mount(root + "/sock/docker.sock"), wantStatus: 403, wantCode: denied},
		{name: "mount outside the roots", body: mount("/usr/share"), wantStatus: 403, wantCode: denied},
		{name: "relative mount source", body: mount("proj"), wantStatus: 400, wantCode: invalid},
		{name: "missing mount source", body: mount(root + "/no-such-dir"), wantStatus: 400, wantCode: invalid},
		{name: "mount over /tmp", body: `{"command":["true"],"mounts":[{"source":"` + root + `/proj","target":"/tmp"}]}`, wantStatus: 400, wantCode: invalid},

		// Valid JSON the policy refuses.
		{name: "root user", body: `{"command":["true"],"user":"root"}`, wantStatus: 403, wantCode: denied},
		{name: "memory over the maximum", body: `{"command":["true"],"resources":{"memory_mb":1048576}}`, wantStatus: 403, wantCode: denied},
		{name: "image not allowed", body: `{"image":"evil/miner:latest","command":["true"]}`, wantStatus: 403, wantCode: denied},

		// Headers and query.
		{name: "wrong content type", body: `{"command":["true"]}`, header: map[string]string{"Content-Type": "text/plain"}, wantStatus: 400, wantCode: invalid},
		{name: "form content type", body: `command=true`, header: map[string]string{"Content-Type": "application/x-www-form-urlencoded"}, wantStatus: 400, wantCode: invalid},
		{name: "bad content type syntax", body: `{"command":["true"]}`, header: map[string]string{"Content-Type": "application/json; charset"}, wantStatus: 400, wantCode: invalid},
		{name: "bad wait", path: "/v1/runs?wait=forever", body: `{"command":["true"]}`, wantStatus: 400, wantCode: invalid},
		{name: "unknown query parameter", path: "/v1/runs?privileged=true", body: `{"command":["true"]}`, wantStatus: 400, wantCode: invalid},
		{name: "idempotency key with a tab", body: `{"command":["true"]}`, header: map[string]string{"Idempotency-Key": "a\tb"}, wantStatus: 400, wantCode: invalid},
		{name: "idempotency key too long", body: `{"command":["true"]}`, header: map[string]string{"Idempotency-Key": strings.Repeat("k", 256)}, wantStatus: 400, wantCode: invalid},
	}
	if len(tests) < 30 {
		t.Fatalf("only %d hostile bodies; the issue asks for at least 30", len(tests))
	}

	before := s.nodeContainers(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := tc.path
			if path == "" {
				path = "/v1/runs?wait=30s"
			}
			corr := "e2e-hostile-" + sandgatetest.RandomHex(t, 6)
			status, body := s.postRaw(t, path, tc.body, tc.chunked, corr, tc.header)
			if status != tc.wantStatus {
				t.Errorf("status = %d, want %d: %.300s", status, tc.wantStatus, body)
			}
			e := apiError(body)
			if e.Error.Code != tc.wantCode {
				t.Errorf("code = %q, want %q: %.300s", e.Error.Code, tc.wantCode, body)
			}
			if !strings.HasPrefix(string(e.Error.Code), "SANDGATE-") || e.Error.Message == "" {
				t.Errorf("not the error shape with a SANDGATE- code: %.300s", body)
			}
			if e.Error.CorrelationID != corr {
				t.Errorf("correlation_id = %q, want %q", e.Error.CorrelationID, corr)
			}
			if status >= 500 || strings.Contains(string(body), "goroutine ") {
				t.Errorf("server error or stack trace: %.300s", body)
			}
		})
	}

	if after := s.nodeContainers(t); after != before {
		t.Errorf("containers of the node: %d before the table, %d after", before, after)
	}
	runs, err := s.Client.Runs(context.Background(), client.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(runs.Runs) != 0 {
		t.Errorf("%d runs stored from hostile bodies, want none", len(runs.Runs))
	}
	// The server is still healthy after all that.
	if _, err := s.Client.Submit(context.Background(), sandgate.RunSpec{Command: []string{"true"}},
		client.SubmitOptions{Wait: 30 * time.Second}); err != nil {
		t.Errorf("a good run after the hostile bodies: %v", err)
	}
}

// postRaw POSTs body to path with the dev token, exactly as given: header
// overrides the JSON Content-Type, chunked hides the length.
func (s *testServer) postRaw(t *testing.T, path, body string, chunked bool, corr string, header map[string]string) (int, []byte) {
	t.Helper()
	var r io.Reader = strings.NewReader(body)
	if chunked {
		r = io.MultiReader(r) // not a type http.NewRequest takes the length of
	}
	req, err := http.NewRequest(http.MethodPost, s.URL+path, r)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Correlation-ID", corr)
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := s.httpClient().Do(req)
	if err != nil {
		t.Fatalf("POST %s: %v", path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("POST %s: read body: %v", path, err)
	}
	return resp.StatusCode, data
}

// manyEnv is n distinct env entries as JSON members.
func manyEnv(n int) string {
	parts := make([]string, n)
	for i := range parts {
		parts[i] = fmt.Sprintf(`"E%d":"v"`, i)
	}
	return strings.Join(parts, ",")
}
