package e2e

import (
	"path/filepath"
	"testing"

	"github.com/sandgate/sandgate/audit/proof"
)

// Which checkpoint keys verify trusts (issue #26, #28 item 11): the CLI
// and GET /v1/audit/verify compute the same trust set from the same
// configuration, and a key file that belongs to no node of the trail is
// never pinned behind the operator's back.

// twoNodeTrail runs one run on each of two gateways of a cluster sharing
// a database, stops them (each signs a final checkpoint) and returns the
// cluster's shared environment and each node's.
func twoNodeTrail(t *testing.T, mod func(node string, env map[string]string)) (base map[string]string, nodes []map[string]string) {
	t.Helper()
	base, tok := clusterBase(t)
	var servers []*testServer
	for _, name := range []string{"node-a", "node-b"} {
		env := nodeEnv(t, base, name)
		if mod != nil {
			mod(name, env)
		}
		s := withToken(t, startServerWithEnv(t, env), tok)
		s.submitWait(t, s.Token, `{"command": ["true"]}`)
		servers = append(servers, s)
		nodes = append(nodes, env)
	}
	for _, s := range servers {
		if err := s.Stop(); err != nil {
			t.Fatalf("stop %s: %v", s.Node, err)
		}
	}
	return base, nodes
}

// TestAuditVerifyStrayLocalKey is issue #26: on a machine where something
// earlier (make run, the bundle test) left a checkpoint key at the
// default path, `sandgate audit verify` against a cluster's database
// pinned that key, which belongs to no node of the trail, and reported
// every node's checkpoints as untrusted_key.
func TestAuditVerifyStrayLocalKey(t *testing.T) {
	base, _ := twoNodeTrail(t, nil)
	home := t.TempDir()
	if _, err := proof.LoadSigningKey(filepath.Join(home, "sandgate", "checkpoint.key"), true); err != nil {
		t.Fatal(err)
	}
	// The auditor's shell: the database and nothing else of sandgate's.
	env := map[string]string{"SANDGATE_DATABASE_URL": base["SANDGATE_DATABASE_URL"], "XDG_STATE_HOME": home, "SANDGATE_NODE": "auditor-host"}
	out, _ := auditCLI(env, "audit", "verify")
	rep := verifyReport(t, out)
	for _, p := range rep.Problems {
		if p.Kind == proof.ProblemUntrustedKey {
			t.Errorf("verify judged a node's checkpoints by a key file that belongs to no node of this trail: %+v", p)
		}
	}
}
