package e2e

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/secrets"
)

// The secret of the tests: what no byte the sandbox, the trail, the
// database or the gateway's log hold may show, in clear or in base64.
const e2eSecret = "sk-test-7d9f2b41c0e84a6f9b3e5d1c"

// sandboxPy runs in the Python image: it prints its environment, every
// process's environment and command line it can read, its trust file
// and the files it can write, then sends requests through the proxy
// (urllib, with the proxy variables) and prints what it got back.
const sandboxPy = `
import glob, gzip, json, os, sys, urllib.error, urllib.request
api, other, plain = sys.argv[1:4]
tok = os.environ["DEMO_TOKEN"]
print("DEMO_TOKEN=" + tok)
print("TRUST=" + os.environ.get("SSL_CERT_FILE", "") + " " + os.environ.get("REQUESTS_CA_BUNDLE", ""))
for p in sorted(glob.glob("/proc/[0-9]*/environ") + glob.glob("/proc/[0-9]*/cmdline")):
    try:
        print("PROC", p, open(p, "rb").read().replace(b"\0", b" ").decode(errors="replace"))
    except Exception as e:
        print("PROC", p, "unreadable", type(e).__name__)
for root in ("/etc/sandgate", "/tmp", "/workspace"):
    for d, _, files in os.walk(root):
        for f in files:
            path = os.path.join(d, f)
            try:
                print("FILE", path, open(path, "rb").read(65536).decode(errors="replace").replace("\n", " "))
            except Exception as e:
                print("FILE", path, "unreadable", type(e).__name__)
def get(u, headers):
    try:
        with urllib.request.urlopen(urllib.request.Request(u, headers=headers), timeout=30) as r:
            body = r.read()
            if r.headers.get("Content-Encoding") == "gzip":
                body = gzip.decompress(body)
            return r.status, dict(r.headers), body.decode(errors="replace")
    except urllib.error.HTTPError as e:
        return e.code, dict(e.headers), e.read().decode(errors="replace")
    except Exception as e:
        return 0, {}, repr(e)
for name, u, hdrs in [
    ("api", "https://localhost:%s/echo" % api, {"Authorization": "Bearer " + tok}),
    ("api-gzip", "https://localhost:%s/gzip" % api, {"Authorization": "Bearer " + tok, "Accept-Encoding": "gzip"}),
    ("plain", "http://localhost:%s/echo" % plain, {"X-Key": tok}),
    ("other", "https://127.0.0.1:%s/echo" % other, {"Authorization": "Bearer " + tok}),
    ("url", "https://localhost:%s/echo?key=%s" % (api, tok), {}),
]:
    status, headers, body = get(u, hdrs)
    print("RESULT", name, status, json.dumps(headers), body.replace("\n", " "))
`

// sandboxJS runs in the Node image: a CONNECT through the proxy and TLS
// over it (Node's https ignores the proxy variables), trusting what
// NODE_EXTRA_CA_CERTS adds.
const sandboxJS = `
const http = require('http'), tls = require('tls');
const api = process.argv[1], tok = process.env.DEMO_TOKEN;
console.log('DEMO_TOKEN=' + tok + ' EXTRA=' + process.env.NODE_EXTRA_CA_CERTS);
const proxy = new URL(process.env.HTTPS_PROXY);
const req = http.request({host: proxy.hostname, port: proxy.port, method: 'CONNECT', path: 'localhost:' + api});
req.on('connect', (res, socket) => {
  if (res.statusCode !== 200) { console.log('CONNECT ' + res.statusCode); process.exit(1); }
  const s = tls.connect({socket, servername: 'localhost'}, () => {
    s.write('GET /node HTTP/1.1\r\nHost: localhost:' + api + '\r\nAuthorization: Bearer ' + tok + '\r\nConnection: close\r\n\r\n');
  });
  let out = '';
  s.on('data', d => { out += d; });
  s.on('end', () => { console.log('RESPONSE ' + out.replace(/\r?\n/g, ' ')); });
  s.on('error', e => { console.log('TLSERROR ' + e.message); process.exit(2); });
});
req.on('error', e => { console.log('PROXYERROR ' + e.message); process.exit(3); });
req.end();
`

// secretForms are the forms of the secret no output may hold: itself and
// the middle of its base64, at each offset and in both alphabets.
func secretForms() []string {
	forms := []string{e2eSecret}
	for k := range 3 {
		for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.URLEncoding} {
			e := enc.EncodeToString([]byte(strings.Repeat("x", k) + e2eSecret))
			forms = append(forms, e[4:len(e)-4])
		}
	}
	return forms
}

// leaked names the first form of the secret in s, "" when none is.
func leaked(s string) string {
	for _, f := range secretForms() {
		if strings.Contains(s, f) {
			return f
		}
	}
	return ""
}

// secretsServer is a gateway with SANDGATE_SECRETS_KEY_FILE (key k1),
// egress to the upstream's three ports and secret demo for team alpha,
// bound to its ports 8443 (by name, localhost) and 8080; its tokens are
// authPrincipals'. It returns the key file too.
func secretsServer(t *testing.T, u *echoUpstream) (*testServer, map[string]string, string) {
	t.Helper()
	env := egressEnv(t, 0)
	api, other, plain := "localhost:"+portOf(u.api), "127.0.0.1:"+portOf(u.other), "localhost:"+portOf(u.plain)
	env["SANDGATE_POLICY_DIR"] = bundleWith(t, func(c map[string]any) {
		c["egress_destinations"] = map[string]any{"default": []any{api, other, plain}, "teams": map[string]any{}}
		c["egress_private_cidrs"] = map[string]any{"default": []any{"127.0.0.1/32"}, "teams": map[string]any{}}
		c["secrets"] = map[string]any{"demo": map[string]any{"teams": []any{"alpha"}, "destinations": []any{api, plain},
			"header": "Authorization", "format": "Bearer {value}", "env": "DEMO_TOKEN"}}
	})
	keyFile := filepath.Join(t.TempDir(), "secrets.keys")
	line, err := secrets.NewKeyLine("k1")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tokensFile, tok := writeTokensFile(t, authPrincipals)
	env["SANDGATE_SECRETS_KEY_FILE"] = keyFile
	env["SANDGATE_EGRESS_UPSTREAM_CA_FILE"] = u.caFile
	env["SANDGATE_TOKENS_FILE"] = tokensFile
	env["SANDGATE_DEV"] = "0"
	var opts []serverOption
	for k, v := range env {
		opts = append(opts, withEnv(k, v))
	}
	return startServer(t, opts...), tok, keyFile
}

// secretSpec is a run of image with secret demo and the upstream's three
// ports as its egress.
func secretSpec(u *echoUpstream, image string, command ...string) string {
	spec := map[string]any{"image": image, "command": command, "network": "egress", "secrets": []string{"demo"},
		"egress": []string{"localhost:" + portOf(u.api), "127.0.0.1:" + portOf(u.other), "localhost:" + portOf(u.plain)}}
	b, _ := json.Marshal(spec)
	return string(b)
}

var placeholderRE = regexp.MustCompile(`DEMO_TOKEN=sandgate-secret:demo:[0-9a-f]{32}\b`)

// TestEndToEndSecrets: a secret set through the API (400 naming the
// field for bad input) is used by runs of the Python and the Node image
// through the real egress proxy: the upstream, in a container of its own
// with its own authority, receives the value over TLS the proxy
// terminated with the run's authority and opened again verified against
// SANDGATE_EGRESS_UPSTREAM_CA_FILE, and in the clear; the sandbox's
// environment, processes and files show the placeholder only; its echo
// comes back without the value or its base64, compressed or not; the
// placeholder sent to another admitted destination, or in a URL, is
// refused and recorded as secret.misdirected; secret.set and secret.used
// are in the trail. Then: a run of another team is denied (secret_team);
// pg_dump of the whole database, the trail's export and the gateway's
// log hold the value nowhere, the secrets table its ciphertext; a new
// key-encryption key put first and re-encrypt, the old key removed, the
// proxy still writes the value; an air-gapped gateway denies the run.
func TestEndToEndSecrets(t *testing.T) {
	u := startEchoUpstream(t)
	s, tok, keyFile := secretsServer(t, u)
	putSecretChecks(t, s, tok)

	py := s.submitWait(t, tok["alice"], secretSpec(u, "sandgate/python:3", "python3", "-c", sandboxPy,
		portOf(u.api), portOf(u.other), portOf(u.plain)))
	checkPythonRun(t, py)
	js := s.submitWait(t, tok["alice"], secretSpec(u, "sandgate/node:18", "node", "-e", sandboxJS, portOf(u.api)))
	if outcomeOf(js) != sandgate.OutcomeSucceeded || !placeholderRE.MatchString(js.Stdout.Data) ||
		!strings.Contains(js.Stdout.Data, "EXTRA=/etc/sandgate/ca.pem") || !strings.Contains(js.Stdout.Data, "RESPONSE HTTP/1.1 200") ||
		!strings.Contains(js.Stdout.Data, `"Authorization": "Bearer ***`) {
		t.Errorf("node run: %s %q %q", outcomeOf(js), js.Stdout.Data, js.Stderr.Data)
	}
	if f := leaked(js.Stdout.Data + js.Stderr.Data); f != "" {
		t.Errorf("the node sandbox saw %q", f)
	}
	checkUpstreamSaw(t, u)
	checkSecretEvents(t, s, tok, py.ID, u)

	// Another team may not use it.
	status, _, body := s.doAs(t, tok["bob"], http.MethodPost, "/v1/runs", secretSpec(u, "sandgate/python:3", "true"))
	if status != http.StatusForbidden || !strings.Contains(string(body), "secret_team") {
		t.Errorf("another team's run: %d %s", status, body)
	}

	checkNoValueStored(t, s, tok)
	rotateKey(t, s, keyFile)
	again := startServerWithEnv(t, s.Env)
	py2 := again.submitWait(t, tok["alice"], secretSpec(u, "sandgate/python:3", "python3", "-c", sandboxPy,
		portOf(u.api), portOf(u.other), portOf(u.plain)))
	if !strings.Contains(py2.Stdout.Data, "RESULT api 200") || leaked(py2.Stdout.Data) != "" {
		t.Errorf("after the key's rotation: %q", py2.Stdout.Data)
	}
	if seen, _ := u.seen(); len(seen) == 0 || seen[len(seen)-1].Authorization != "Bearer "+e2eSecret {
		t.Errorf("after the key's rotation the upstream saw %+v", seen)
	}
	if err := again.Stop(); err != nil {
		t.Fatal(err)
	}

	airGapped := map[string]string{}
	for k, v := range s.Env {
		airGapped[k] = v
	}
	airGapped["SANDGATE_AIR_GAPPED"] = "true"
	ag := startServerWithEnv(t, airGapped)
	status, _, body = ag.doAs(t, tok["alice"], http.MethodPost, "/v1/runs", secretSpec(u, "sandgate/python:3", "true"))
	if status != http.StatusForbidden || !strings.Contains(string(body), "air_gapped_egress") || !strings.Contains(string(body), "secret_network") {
		t.Errorf("air-gapped: %d %s", status, body)
	}
}

// putSecretChecks sets demo as security (alpha's sam) after the refusals
// of bad input and of a submitter.
func putSecretChecks(t *testing.T, s *testServer, tok map[string]string) {
	t.Helper()
	for name, tc := range map[string]struct{ path, body, field string }{
		"empty value":       {"/v1/secrets/demo", `{"value": ""}`, "value"},
		"value over 64 KiB": {"/v1/secrets/demo", `{"value": "` + strings.Repeat("v", 64<<10+1) + `"}`, "value"},
		"bad name":          {"/v1/secrets/Bad.Name", `{"value": "x"}`, "name"},
		"long name":         {"/v1/secrets/" + strings.Repeat("n", 65), `{"value": "x"}`, "name"},
	} {
		status, _, body := s.doAs(t, tok["sam"], http.MethodPut, tc.path, tc.body)
		if status != http.StatusBadRequest || !strings.HasPrefix(apiError(body).Error.Message, tc.field+": ") {
			t.Errorf("%s: %d %s", name, status, body)
		}
	}
	if status, _, body := s.doAs(t, tok["alice"], http.MethodPut, "/v1/secrets/demo", `{"value": "`+e2eSecret+`"}`); status != http.StatusForbidden {
		t.Errorf("a submitter sets a secret: %d %s", status, body)
	}
	status, _, body := s.doAs(t, tok["sam"], http.MethodPut, "/v1/secrets/demo", `{"value": "`+e2eSecret+`"}`, "X-Correlation-ID", "corr-secret-set")
	if status != http.StatusCreated || leaked(string(body)) != "" {
		t.Fatalf("set the secret: %d %s", status, body)
	}
}

func checkPythonRun(t *testing.T, py api.RunView) {
	t.Helper()
	out := py.Stdout.Data + py.Stderr.Data
	if outcomeOf(py) != sandgate.OutcomeSucceeded || !placeholderRE.MatchString(out) {
		t.Fatalf("python run: %s %q", outcomeOf(py), out)
	}
	if f := leaked(out); f != "" {
		t.Errorf("the python sandbox saw %q:\n%s", f, out)
	}
	if !strings.Contains(out, "TRUST=/etc/sandgate/ca.pem /etc/sandgate/ca.pem") || !strings.Contains(out, "FILE /etc/sandgate/ca.pem -----BEGIN CERTIFICATE-----") {
		t.Errorf("the trust: %q", out)
	}
	if !strings.Contains(out, "PROC /proc/1/environ") {
		t.Errorf("no process environment read: %q", out)
	}
	for _, want := range []string{
		`RESULT api 200`, `RESULT api-gzip 200`, `RESULT plain 200`, `RESULT other 403`, `RESULT url 403`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in %q", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "RESULT api"):
			// The echo of the request's Authorization, in the body
			// and the answer's header, with the value removed.
			if strings.Count(line, "Bearer "+strings.Repeat("*", len(e2eSecret))) < 2 {
				t.Errorf("the echo was not scrubbed in place: %s", line)
			}
		case strings.HasPrefix(line, "RESULT other"), strings.HasPrefix(line, "RESULT url"):
			if !strings.Contains(line, "placeholder of secret demo") {
				t.Errorf("the refusal: %s", line)
			}
		}
	}
}

// checkUpstreamSaw: the upstream was sent the value on the ports it is
// bound to, and nothing on the other.
func checkUpstreamSaw(t *testing.T, u *echoUpstream) {
	t.Helper()
	seen, err := u.seen()
	if err != nil {
		t.Fatal(err)
	}
	by := map[int]int{}
	for _, r := range seen {
		by[r.Port]++
		if r.Port == 8444 || r.Authorization != "Bearer "+e2eSecret {
			t.Errorf("the upstream was sent %+v", r)
		}
	}
	if by[8443] != 3 || by[8080] != 1 {
		t.Errorf("the upstream's requests by port: %v (want 3 on 8443: python twice, node once; 1 on 8080)", by)
	}
}

func checkSecretEvents(t *testing.T, s *testServer, tok map[string]string, runID string, u *echoUpstream) {
	t.Helper()
	set := s.waitAuditEvents(t, tok["audrey"], url.Values{"type": {string(sandgate.EventSecretSet)}},
		func(ev []sandgate.AuditRecord) bool { return len(ev) == 1 })
	if ev := set[0]; ev.Actor != "sam" || ev.CorrelationID != "corr-secret-set" || ev.Payload["name"] != "demo" || ev.Payload["key_id"] != "k1" {
		t.Errorf("secret.set %+v", ev)
	}
	// The first use at each destination singly; the second connection
	// to the API in the aggregate recorded when the run ended.
	used := s.waitAuditEvents(t, tok["audrey"], url.Values{"run_id": {runID}, "type": {string(sandgate.EventSecretUsed)}},
		func(ev []sandgate.AuditRecord) bool { return len(ev) == 3 })
	hosts := map[string]bool{}
	for _, ev := range used {
		hosts[fmt.Sprintf("%v:%v", ev.Payload["host"], ev.Payload["port"])] = true
		if ev.Payload["secret"] != "demo" || ev.Payload["version"] != float64(1) || ev.Actor != "alice" {
			t.Errorf("secret.used %+v", ev)
		}
	}
	if !hosts["localhost:"+portOf(u.api)] || !hosts["localhost:"+portOf(u.plain)] {
		t.Errorf("secret.used at %v", hosts)
	}
	mis := s.waitAuditEvents(t, tok["audrey"], url.Values{"run_id": {runID}, "type": {string(sandgate.EventSecretMisdirected)}},
		func(ev []sandgate.AuditRecord) bool { return len(ev) == 2 })
	wheres := map[string]bool{}
	for _, ev := range mis {
		wheres[fmt.Sprintf("%v@%v", ev.Payload["where"], ev.Payload["host"])] = true
	}
	if !wheres["header@127.0.0.1"] || !wheres["url@localhost"] {
		t.Errorf("secret.misdirected %v", wheres)
	}
}

// checkNoValueStored: pg_dump of the whole database, the trail's export
// and the gateway's log hold the value in no form; the secrets table
// holds a ciphertext.
func checkNoValueStored(t *testing.T, s *testServer, tok map[string]string) {
	t.Helper()
	dump, err := exec.Command("pg_dump", "--dbname="+s.DSN).Output()
	if err != nil {
		t.Fatalf("pg_dump: %v", err)
	}
	if f := leaked(string(dump)); f != "" {
		t.Errorf("pg_dump holds %q", f)
	}
	if !regexp.MustCompile(`(?m)^demo\t1\tk1\t\\\\x01[0-9a-f]+\t\\\\x01[0-9a-f]+\thmac-sha256:`).Match(dump) {
		t.Errorf("pg_dump has no sealed row of demo:\n%s", grepLines(dump, "demo\t"))
	}
	status, _, export := s.doAs(t, tok["audrey"], http.MethodGet, "/v1/audit/export?format=jsonl", "")
	if status != http.StatusOK || !bytes.Contains(export, []byte("secret.used")) {
		t.Fatalf("export: %d", status)
	}
	if f := leaked(string(export)); f != "" {
		t.Errorf("the trail's export holds %q", f)
	}
	if f := leaked(s.logs.String()); f != "" {
		t.Errorf("the gateway's log holds %q", f)
	}
}

func grepLines(b []byte, sub string) string {
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// rotateKey stops s, puts a new key first in the key file, re-encrypts on
// the database, and leaves the new key alone in the file.
func rotateKey(t *testing.T, s *testServer, keyFile string) {
	t.Helper()
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	old, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	line, _ := secrets.NewKeyLine("k2")
	if err := os.WriteFile(keyFile, []byte(line+"\n"+string(old)), 0o600); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	env := map[string]string{"SANDGATE_DATABASE_URL": s.DSN, "SANDGATE_SECRETS_KEY_FILE": keyFile}
	if err := runApp(context.Background(), []string{"secrets", "re-encrypt"}, env, &out, nil); err != nil || !strings.Contains(out.String(), "1 secret(s) rewrapped under key k2") {
		t.Fatalf("re-encrypt: %v %s", err, out.String())
	}
	if err := os.WriteFile(keyFile, []byte(line+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
}
