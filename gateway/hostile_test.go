package gateway

import (
	"net/http"
	"strings"
	"testing"

	"github.com/sandgate/sandgate"
)

// TestHostileBodies sends malformed and hostile run specs: each is answered
// 4xx with a SANDGATE- code, and none reaches the executor.
func TestHostileBodies(t *testing.T) {
	huge := `{"command":["echo"],"stdin":"` + strings.Repeat("A", sandgate.MaxSpecBytes) + `"}`
	deep := strings.Repeat(`{"a":`, 5000) + `1` + strings.Repeat(`}`, 5000)
	tests := []struct {
		name        string
		body        string
		contentType string
		wantStatus  int
		wantCode    sandgate.ErrorCode
	}{
		{"empty body", "", "", 400, sandgate.CodeInvalidRequest},
		{"whitespace only", "   \n\t", "", 400, sandgate.CodeInvalidRequest},
		{"not JSON", "hello", "", 400, sandgate.CodeInvalidRequest},
		{"JSON null", "null", "", 400, sandgate.CodeInvalidRequest},
		{"JSON array", `[{"command":["echo"]}]`, "", 400, sandgate.CodeInvalidRequest},
		{"JSON string", `"echo"`, "", 400, sandgate.CodeInvalidRequest},
		{"JSON number", `42`, "", 400, sandgate.CodeInvalidRequest},
		{"truncated", `{"command":["echo"`, "", 400, sandgate.CodeInvalidRequest},
		{"trailing data", `{"command":["echo"]} {"command":["rm"]}`, "", 400, sandgate.CodeInvalidRequest},
		{"trailing garbage", `{"command":["echo"]}xyz`, "", 400, sandgate.CodeInvalidRequest},
		{"unknown field", `{"command":["echo"],"priviledged":true}`, "", 400, sandgate.CodeInvalidRequest},
		{"server-owned uid", `{"command":["echo"],"uid":0}`, "", 400, sandgate.CodeInvalidRequest},
		{"server-owned gid", `{"command":["echo"],"gid":0}`, "", 400, sandgate.CodeInvalidRequest},
		{"server-owned security", `{"command":["echo"],"security":{"seccomp":"unconfined"}}`, "", 400, sandgate.CodeInvalidRequest},
		{"server-owned resolved mount", `{"command":["echo"],"mounts":[{"source":"/tmp","target":"/w","resolved":"/"}]}`, "", 400, sandgate.CodeInvalidRequest},
		{"command missing", `{"image":"sandgate/sandbox:latest"}`, "", 400, sandgate.CodeInvalidRequest},
		{"command empty", `{"command":[]}`, "", 400, sandgate.CodeInvalidRequest},
		{"command wrong type", `{"command":"echo hi"}`, "", 400, sandgate.CodeInvalidRequest},
		{"command NUL", `{"command":["echo","a\u0000b"]}`, "", 400, sandgate.CodeInvalidRequest},
		{"image with whitespace", `{"image":"a b","command":["echo"]}`, "", 400, sandgate.CodeInvalidRequest},
		{"env bad name", `{"command":["echo"],"env":{"A-B":"x"}}`, "", 400, sandgate.CodeInvalidRequest},
		{"env NUL value", `{"command":["echo"],"env":{"A":"x\u0000"}}`, "", 400, sandgate.CodeInvalidRequest},
		{"env not object", `{"command":["echo"],"env":["A=1"]}`, "", 400, sandgate.CodeInvalidRequest},
		{"relative workdir", `{"command":["echo"],"workdir":"work"}`, "", 400, sandgate.CodeInvalidRequest},
		{"bad user", `{"command":["echo"],"user":"a:b:c"}`, "", 400, sandgate.CodeInvalidRequest},
		{"uid out of range", `{"command":["echo"],"user":"99999999999"}`, "", 400, sandgate.CodeInvalidRequest},
		{"negative memory", `{"command":["echo"],"resources":{"memory_mb":-1}}`, "", 400, sandgate.CodeInvalidRequest},
		{"fractional memory", `{"command":["echo"],"resources":{"memory_mb":1.5}}`, "", 400, sandgate.CodeInvalidRequest},
		{"memory as string", `{"command":["echo"],"resources":{"memory_mb":"512"}}`, "", 400, sandgate.CodeInvalidRequest},
		{"negative cpus", `{"command":["echo"],"resources":{"cpus":-2}}`, "", 400, sandgate.CodeInvalidRequest},
		{"huge number", `{"command":["echo"],"timeout_seconds":1e400}`, "", 400, sandgate.CodeInvalidRequest},
		{"negative timeout", `{"command":["echo"],"timeout_seconds":-5}`, "", 400, sandgate.CodeInvalidRequest},
		{"negative output limit", `{"command":["echo"],"output_limit_bytes":-1}`, "", 400, sandgate.CodeInvalidRequest},
		{"bad pull policy", `{"command":["echo"],"pull_policy":"sometimes"}`, "", 400, sandgate.CodeInvalidRequest},
		{"relative mount source", `{"command":["echo"],"mounts":[{"source":"etc","target":"/w"}]}`, "", 400, sandgate.CodeInvalidRequest},
		{"missing mount source", `{"command":["echo"],"mounts":[{"source":"/no/such/dir/sandgate","target":"/w"}]}`, "", 400, sandgate.CodeInvalidRequest},
		{"mount target root", `{"command":["echo"],"mounts":[{"source":"/tmp","target":"/"}]}`, "", 400, sandgate.CodeInvalidRequest},
		{"mount target on /tmp", `{"command":["echo"],"mounts":[{"source":"/tmp","target":"/tmp"}]}`, "", 400, sandgate.CodeInvalidRequest},
		{"volume without name", `{"command":["echo"],"volumes":[{"target":"/c"}]}`, "", 400, sandgate.CodeInvalidRequest},
		{"unknown security opt", `{"command":["echo"],"security_opt":["bogus=1"]}`, "", 400, sandgate.CodeInvalidRequest},
		{"reserved label", `{"command":["echo"],"labels":{"sandgate.managed":"false"}}`, "", 400, sandgate.CodeInvalidRequest},
		{"privileged (policy)", `{"command":["echo"],"privileged":true}`, "", 403, sandgate.CodePolicyDenied},
		{"disallowed image (policy)", `{"image":"evil/miner","command":["echo"]}`, "", 403, sandgate.CodePolicyDenied},
		{"form content type", `command=echo`, "application/x-www-form-urlencoded", 400, sandgate.CodeInvalidRequest},
		{"deeply nested", deep, "", 400, sandgate.CodeInvalidRequest},
		{"invalid UTF-8", "{\"command\":[\"\xff\xfe\"],\"x\":1}", "", 400, sandgate.CodeInvalidRequest},
		{"over 1 MiB", huge, "", 413, sandgate.CodeTooLarge},
	}
	e := newEnv(t)
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			headers := []string{}
			if tc.contentType != "" {
				headers = append(headers, "Content-Type: "+tc.contentType)
			}
			req, err := http.NewRequest(http.MethodPost, e.ts.URL+"/v1/runs", strings.NewReader(tc.body))
			if err != nil {
				t.Fatal(err)
			}
			req.Header.Set("Authorization", "Bearer "+tokAlice)
			for _, h := range headers {
				k, v, _ := strings.Cut(h, ": ")
				req.Header.Set(k, v)
			}
			resp, err := e.ts.Client().Do(req)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			r := readResponse(t, resp)
			if r.status != tc.wantStatus {
				t.Errorf("status = %d, want %d: %s", r.status, tc.wantStatus, r.body)
			}
			if got := r.errorCode(); got != string(tc.wantCode) {
				t.Errorf("code = %q, want %q", got, tc.wantCode)
			}
			if !strings.HasPrefix(r.errorCode(), "SANDGATE-") {
				t.Errorf("no SANDGATE- code: %s", r.body)
			}
			if r.errorBody().Error.CorrelationID == "" {
				t.Errorf("error without correlation_id")
			}
		})
	}
	if n := e.exec.calls.Load(); n != 0 {
		t.Errorf("%d hostile bodies reached the executor", n)
	}
	if len(tests) < 30 {
		t.Fatalf("only %d cases", len(tests))
	}
}

// TestInvalidFieldNamed checks that a decoding error names the field.
func TestInvalidFieldNamed(t *testing.T) {
	tests := []struct {
		body, field string
	}{
		{`{"command":["echo"],"priviledged":true}`, "priviledged"},
		{`{"command":["echo"],"resources":{"memory_mb":"x"}}`, "resources.memory_mb"},
		{`{"command":["echo"],"env":{"A-B":"x"}}`, "env.A-B"},
		{`{"command":["echo"],"uid":0}`, "uid"},
	}
	e := newEnv(t)
	for _, tc := range tests {
		t.Run(tc.field, func(t *testing.T) {
			r := e.do(http.MethodPost, "/v1/runs", tokAlice, tc.body)
			if got := r.errorBody().Error.Details["field"]; got != tc.field {
				t.Errorf("details.field = %v, want %q (%s)", got, tc.field, r.body)
			}
		})
	}
}

// TestNULInQueryRefused: a query parameter with a NUL or invalid UTF-8 is
// INVALID-REQUEST naming it, never a database error.
func TestNULInQueryRefused(t *testing.T) {
	e := newEnv(t)
	for _, path := range []string{
		"/v1/runs?session_id=a%00b",
		"/v1/runs?task_id=%ff",
		"/v1/audit/events?actor=x%00",
		"/v1/runs?a%00b=1",
	} {
		t.Run(path, func(t *testing.T) {
			r := e.do(http.MethodGet, path, tokAdmin, "")
			if r.status != http.StatusBadRequest || r.errorBody().Error.Code != sandgate.CodeInvalidRequest {
				t.Fatalf("GET %s = %d %s, want 400 INVALID-REQUEST", path, r.status, r.body)
			}
		})
	}
}
