package e2e

import (
	"context"
	"database/sql"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/audit/audittest"
	"github.com/sandgate/sandgate/sandgatetest"
)

// A serve that fails to start leaves no trace in the database that a
// serving gateway could act on: it binds its socket and checks its
// configuration, files, keys, database and policy first, and registers
// (its chain and key, its node, its warm pool and reaper) last.

// startTraces counts what a node left in the database: its row in the
// node registry, its chains, its registered keys, its events (on any
// chain) and its run slots.
func startTraces(t *testing.T, db *sql.DB, node string) map[string]int {
	t.Helper()
	queries := map[string]string{
		"node":   `SELECT count(*) FROM nodes WHERE name = $1`,
		"chains": `SELECT count(*) FROM audit_chains WHERE node = $1 OR node = $1 || '-decisions'`,
		"keys":   `SELECT count(*) FROM audit_keys WHERE node = $1 OR node = $1 || '-decisions'`,
		"events": `SELECT count(*) FROM audit_events WHERE node = $1 OR node = $1 || '-decisions'`,
		"slots":  `SELECT count(*) FROM run_slots WHERE node = $1`,
	}
	got := map[string]int{}
	for what, q := range queries {
		var n int
		if err := db.QueryRow(q, node).Scan(&n); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
		if n > 0 {
			got[what] = n
		}
	}
	return got
}

// secondServe runs `sandgate serve` with env until it returns, which it
// must: it is expected to refuse to start.
func secondServe(t *testing.T, env map[string]string) (logs string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out syncBuffer
	listening := make(chan string, 1)
	err = runApp(ctx, []string{"serve"}, env, &out, func(addr, _ string) {
		listening <- addr
		cancel() // it started after all: stop it, the test fails below
	})
	select {
	case addr := <-listening:
		t.Errorf("the second serve started, on %s", addr)
	default:
	}
	return out.String(), err
}

// TestServeFailedStartLeavesNoTrace is the attack of #28 item 9: with a
// gateway serving, a second `sandgate serve` (a node of another name,
// state of its own) on the same port and database fails to bind. It must
// fail with the reason, and leave no node row, chain, key registration,
// event or slot; the first gateway is never taken over and keeps serving.
func TestServeFailedStartLeavesNoTrace(t *testing.T) {
	first := startServer(t,
		withEnv("SANDGATE_NODE_HEARTBEAT", "100ms"),
		withEnv("SANDGATE_NODE_LAPSE", "1s"))
	db := audittest.OpenDB(t, first.DSN)
	addr := strings.TrimPrefix(first.URL, "http://")

	env := secondNodeEnv(t, first.Env, "second-"+sandgatetest.RandomHex(t, 4))
	env["SANDGATE_LISTEN"] = addr
	logs, err := secondServe(t, env)
	if err == nil || !strings.Contains(err.Error(), "listen on "+addr) || !strings.Contains(err.Error(), "address already in use") {
		t.Fatalf("second serve on %s = %v, want the listen error naming the address\n%s", addr, err, logs)
	}
	if got := startTraces(t, db, env["SANDGATE_NODE"]); len(got) > 0 {
		t.Errorf("the failed start left %v in the database", got)
	}

	// The first was not taken over: it is alive in the registry, nobody
	// took it over, and it still runs what it is sent.
	var state, takenBy string
	if err := db.QueryRow(`SELECT state, taken_over_by FROM nodes WHERE name = $1`, first.Node).Scan(&state, &takenBy); err != nil {
		t.Fatal(err)
	}
	if state != "active" || takenBy != "" {
		t.Errorf("the first node is %s, taken over by %q", state, takenBy)
	}
	if run := first.submitWait(t, first.Token, `{"command":["sh","-c","exit 3"]}`); run.ExitCode == nil || *run.ExitCode != 3 {
		t.Errorf("the first gateway after the failed start: %+v", run)
	}
}

// TestServeRefusesBeforeRegistering attacks the order itself: a serve
// whose port is free but that cannot start for any other reason found in
// its configuration, files, policy or mounts leaves no trace either, and
// says why.
func TestServeRefusesBeforeRegistering(t *testing.T) {
	first := startServer(t)
	db := audittest.OpenDB(t, first.DSN)
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	brokenPolicy := filepath.Join(dir, "policy")
	if err := os.MkdirAll(brokenPolicy, 0o755); err != nil {
		t.Fatal(err)
	}
	write("policy/broken.rego", "package sandgate.admission\n\ndecision := {\n")
	tests := []struct {
		name string
		env  map[string]string
		want string
	}{
		{"a policy that does not compile", map[string]string{"SANDGATE_POLICY_DIR": brokenPolicy}, "load policy"},
		{"a sinks file that does not parse", map[string]string{"SANDGATE_SINKS_FILE": write("sinks.yaml", "sinks: [{name: x, type: carrier-pigeon}]\n")}, "SANDGATE_SINKS_FILE"},
		{"an unreadable cluster secret", map[string]string{"SANDGATE_CLUSTER_SECRET_FILE": filepath.Join(dir, "missing.secret")}, "missing.secret"},
		{"an agent binary that cannot serve", map[string]string{"SANDGATE_AGENT_BINARY": write("agent", "#!/bin/sh\n")}, "SANDGATE_AGENT_BINARY"},
		{"a trusted keys file with no key", map[string]string{"SANDGATE_TRUSTED_KEYS_FILE": write("trusted", "not a key\n")}, "SANDGATE_TRUSTED_KEYS_FILE"},
		{"a mount root that is not a directory", map[string]string{"SANDGATE_MOUNT_ROOTS": write("not-a-dir", "")}, "not-a-dir"},
		{"a signing key that is not a key", map[string]string{"SANDGATE_SIGNING_KEY_FILE": write("checkpoint.key", "-----BEGIN PRIVATE KEY-----\nnot a key\n-----END PRIVATE KEY-----\n")}, "SANDGATE_SIGNING_KEY_FILE"},
		{"a tokens file that does not parse", map[string]string{"SANDGATE_DEV": "0", "SANDGATE_TOKENS_FILE": write("tokens.yaml", "principals: {alice: 1}\n")}, "SANDGATE_TOKENS_FILE"},
		{"a database that does not answer", map[string]string{"SANDGATE_DATABASE_URL": "host=" + dir + " dbname=none connect_timeout=5"}, "database"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := secondNodeEnv(t, first.Env, "refused-"+sandgatetest.RandomHex(t, 4))
			maps.Copy(env, tt.env)
			logs, err := secondServe(t, env)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("serve = %v, want an error naming %q\n%s", err, tt.want, logs)
			}
			if got := startTraces(t, db, env["SANDGATE_NODE"]); len(got) > 0 {
				t.Errorf("the refused start (%v) left %v in the database", err, got)
			}
		})
	}
	if status, _, body := first.do(t, http.MethodGet, "/v1/nodes", ""); status != http.StatusOK || strings.Count(string(body), `"name"`) != 1 {
		t.Errorf("GET /v1/nodes after the refused starts = %d %s, want the first node alone", status, body)
	}
}

// secondNodeEnv is the first server's environment for another node on
// the same database: its own name, state directories and a free port.
func secondNodeEnv(t *testing.T, first map[string]string, node string) map[string]string {
	t.Helper()
	env := maps.Clone(first)
	state := t.TempDir()
	env["SANDGATE_LISTEN"] = "127.0.0.1:0"
	env["SANDGATE_NODE"] = node
	env["SANDGATE_SPOOL_DIR"] = state + "/spool"
	env["SANDGATE_VOLUME_DIR"] = state + "/volumes"
	env["SANDGATE_WORKSPACE_DIR"] = state + "/workspaces"
	env["SANDGATE_UPLOAD_DIR"] = state + "/uploads"
	env["SANDGATE_MIGRATE"] = "false"
	return env
}
