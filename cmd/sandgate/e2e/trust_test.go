package e2e

import (
	"crypto/ed25519"
	"crypto/rand"
	"database/sql"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
	"github.com/sandgate/sandgate/sandgatetest"
)

// Which checkpoint keys verify trusts (issue #26, #28 item 11): the CLI
// and GET /v1/audit/verify compute the same trust set from the same
// configuration, a key file that belongs to no node of the trail is never
// pinned behind the operator's back, and a cluster's nodes are trusted
// through its root key.

// trailCluster is two gateways of a cluster on one database, each having
// run one run.
type trailCluster struct {
	base    map[string]string
	envs    []map[string]string
	servers []*testServer
	names   []string // node-a-<hex> and node-b-<hex>
}

// twoNodeTrail starts node-a and node-b on one database (mod adjusts each
// node's environment first, given "node-a" or "node-b") and runs one run
// on each. The node names carry a random suffix: a node holds a lease on
// the docker daemon, which tests in other processes share.
func twoNodeTrail(t *testing.T, mod func(node string, env map[string]string)) *trailCluster {
	t.Helper()
	base, tok := clusterBase(t)
	// The trust tests set up (or leave out) the cluster's root themselves.
	delete(base, "SANDGATE_AUDIT_ROOT_PUBLIC_KEY_FILE")
	c := &trailCluster{base: base}
	suffix := sandgatetest.RandomHex(t, 3)
	for _, label := range []string{"node-a", "node-b"} {
		env := nodeEnv(t, base, label+"-"+suffix)
		if mod != nil {
			mod(label, env)
		}
		c.names = append(c.names, env["SANDGATE_NODE"])
		s := withToken(t, startServerWithEnv(t, env), tok)
		s.submitWait(t, s.Token, `{"command": ["true"]}`)
		c.servers = append(c.servers, s)
		c.envs = append(c.envs, env)
	}
	return c
}

// stop stops both gateways (each signs a final checkpoint).
func (c *trailCluster) stop(t *testing.T) {
	t.Helper()
	for _, s := range c.servers {
		if err := s.Stop(); err != nil {
			t.Fatalf("stop %s: %v", s.Node, err)
		}
	}
}

// apiVerify is GET /v1/audit/verify of s.
func apiVerify(t *testing.T, s *testServer) sandgate.VerifyReport {
	t.Helper()
	status, _, body := s.do(t, http.MethodGet, "/v1/audit/verify", "")
	if status != http.StatusOK {
		t.Fatalf("GET /v1/audit/verify on %s: %d %s", s.Node, status, body)
	}
	var rep sandgate.VerifyReport
	if err := json.Unmarshal(body, &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

// judgement is what a verification decided, without the row counts and
// times that differ between two runs of it: each problem's chain and
// kind, and each anchor's kind, key and use.
func judgement(rep sandgate.VerifyReport) (problems, anchors []string) {
	for _, p := range rep.Problems {
		problems = append(problems, p.ChainID+" "+p.Kind)
	}
	for _, a := range rep.Anchors {
		anchors = append(anchors, a.Kind+" "+a.KeyID+" "+map[bool]string{true: "used", false: "unused"}[a.Used])
	}
	slices.Sort(problems)
	slices.Sort(anchors)
	return problems, anchors
}

// TestAuditVerifyStrayLocalKey is issue #26: on a machine where something
// earlier (make run, the bundle test) left a checkpoint key at the
// default path, `sandgate audit verify` against a cluster's database
// pinned that key, which belongs to no node of the trail, and reported
// every node's checkpoints as untrusted_key. Now the stray key is named
// in the report as unused, and nothing is judged by it.
func TestAuditVerifyStrayLocalKey(t *testing.T) {
	c := twoNodeTrail(t, nil)
	c.stop(t)
	home := t.TempDir()
	stray := filepath.Join(home, "sandgate", "checkpoint.key")
	if _, err := proof.LoadSigningKey(stray, true); err != nil {
		t.Fatal(err)
	}
	// The auditor's shell: the database and nothing else of sandgate's.
	env := map[string]string{"SANDGATE_DATABASE_URL": c.base["SANDGATE_DATABASE_URL"], "XDG_STATE_HOME": home, "SANDGATE_NODE": "auditor-host"}
	out, _ := auditCLI(env, "audit", "verify")
	rep := verifyReport(t, out)
	for _, p := range rep.Problems {
		if p.Kind == proof.ProblemUntrustedKey {
			t.Errorf("verify judged a node's checkpoints by a key file that belongs to no node of this trail: %+v", p)
		}
	}
	if len(rep.Anchors) != 1 || rep.Anchors[0].Kind != proof.AnchorLocal || rep.Anchors[0].Used || rep.Anchors[0].Source != stray {
		t.Errorf("anchors = %+v, want the stray key named, unused", rep.Anchors)
	}
	// Its variant: the stray key's file under the name of a node of the
	// trail (SANDGATE_NODE=node-a) is no anchor either.
	env["SANDGATE_NODE"] = c.names[0]
	out, _ = auditCLI(env, "audit", "verify")
	if rep := verifyReport(t, out); len(rep.Anchors) != 1 || rep.Anchors[0].Used || hasKind(rep, proof.ProblemUntrustedKey) {
		t.Errorf("a stray key under a node's name: anchors %+v, problems %+v", rep.Anchors, rep.Problems)
	}
}

// TestAuditVerifyCLIAndAPIAgree: with the same configuration, `audit
// verify` on a node's host and GET /v1/audit/verify of that node trust
// the same keys and report the same problems. With nothing configured
// that is the node's own key: the other node's chains are untrusted_key,
// on both. With the cluster's root key (each node's key endorsed with
// `audit endorse-key`), both find the trail whole, and so does an
// auditor's host with the root's public key and a stray key file.
func TestAuditVerifyCLIAndAPIAgree(t *testing.T) {
	keys := t.TempDir()
	root, rootPub := filepath.Join(keys, "root.key"), filepath.Join(keys, "root.pub")
	for _, rooted := range []bool{false, true} {
		name := map[bool]string{false: "nothing configured", true: "the cluster's root key"}[rooted]
		t.Run(name, func(t *testing.T) {
			c := twoNodeTrail(t, func(node string, env map[string]string) {
				if !rooted {
					return
				}
				endorsement := filepath.Join(filepath.Dir(env["SANDGATE_SPOOL_DIR"]), "endorsement.json")
				if out, err := auditCLI(env, "audit", "endorse-key", "--root-key-file", root, "-o", endorsement); err != nil {
					t.Fatalf("endorse-key for %s: %v\n%s", node, err, out)
				}
				env["SANDGATE_AUDIT_KEY_ENDORSEMENT_FILE"] = endorsement
				env["SANDGATE_AUDIT_ROOT_PUBLIC_KEY_FILE"] = rootPub
				if _, err := os.Stat(rootPub); err != nil {
					out, err := auditCLI(map[string]string{}, "audit", "public-key", "--signing-key-file", root)
					if err != nil || os.WriteFile(rootPub, []byte(out), 0o600) != nil {
						t.Fatalf("root public key: %v\n%s", err, out)
					}
				}
			})
			// The nodes have signed no checkpoint yet: wait for one of
			// each chain, so that both verifications judge the same
			// checkpoints.
			waitChainsCheckpointed(t, "a checkpoint of each chain", c.base["SANDGATE_DATABASE_URL"])
			a := c.servers[0]
			api := apiVerify(t, a)
			out, _ := auditCLI(c.envs[0], "audit", "verify")
			cli := verifyReport(t, out).VerifyReport
			apiProblems, apiAnchors := judgement(api)
			cliProblems, cliAnchors := judgement(cli)
			if diff := cmp.Diff(apiProblems, cliProblems); diff != "" {
				t.Errorf("problems, API (-) and CLI (+) on node-a's host:\n%s", diff)
			}
			if diff := cmp.Diff(apiAnchors, cliAnchors); diff != "" {
				t.Errorf("anchors, API (-) and CLI (+) on node-a's host:\n%s", diff)
			}
			if api.OK != rooted || cli.OK != rooted {
				t.Errorf("ok: API %t, CLI %t; want %t\nAPI %+v\nCLI %+v", api.OK, cli.OK, rooted, api, cli)
			}
			if !rooted {
				for _, p := range api.Problems {
					if p.Kind != proof.ProblemUntrustedKey || !strings.HasPrefix(p.ChainID, c.names[1]) {
						t.Errorf("with node-a's own key the anchor, want untrusted_key on node-b's chains only: %+v", p)
					}
				}
				return
			}
			c.stop(t)
			home := t.TempDir()
			if _, err := proof.LoadSigningKey(filepath.Join(home, "sandgate", "checkpoint.key"), true); err != nil {
				t.Fatal(err)
			}
			auditor := map[string]string{"SANDGATE_DATABASE_URL": c.base["SANDGATE_DATABASE_URL"], "XDG_STATE_HOME": home,
				"SANDGATE_AUDIT_ROOT_PUBLIC_KEY_FILE": rootPub}
			if out, err := auditCLI(auditor, "audit", "verify"); err != nil {
				t.Errorf("an auditor with the root's public key: %v\n%s", err, out)
			}
			if out, err := auditCLI(map[string]string{"SANDGATE_DATABASE_URL": c.base["SANDGATE_DATABASE_URL"]}, "audit", "verify", "--root-key", rootPub); err != nil {
				t.Errorf("--root-key: %v\n%s", err, out)
			}
		})
	}
}

// TestAuditVerifyForgedEndorsement: the application role records an
// audit.key_endorsed event of its own key, signed by a root of its own,
// and a chain signed with that key: verifiers that trust the cluster's
// root do not trust it.
func TestAuditVerifyForgedEndorsement(t *testing.T) {
	keys := t.TempDir()
	root, rootPub := filepath.Join(keys, "root.key"), filepath.Join(keys, "root.pub")
	c := twoNodeTrail(t, func(node string, env map[string]string) {
		if node != "node-a" {
			return
		}
		endorsement := filepath.Join(filepath.Dir(env["SANDGATE_SPOOL_DIR"]), "endorsement.json")
		if out, err := auditCLI(env, "audit", "endorse-key", "--root-key-file", root, "-o", endorsement); err != nil {
			t.Fatalf("endorse-key: %v\n%s", err, out)
		}
		env["SANDGATE_AUDIT_KEY_ENDORSEMENT_FILE"] = endorsement
	})
	c.stop(t)
	out, err := auditCLI(map[string]string{}, "audit", "public-key", "--signing-key-file", root)
	if err != nil || os.WriteFile(rootPub, []byte(out), 0o600) != nil {
		t.Fatalf("root public key: %v\n%s", err, out)
	}
	dsn := c.base["SANDGATE_DATABASE_URL"]
	_, mallory, _ := ed25519.GenerateKey(rand.Reader)
	_, malloryRoot, _ := ed25519.GenerateKey(rand.Reader)
	forged := proof.Endorse(malloryRoot, "node-z", mallory.Public().(ed25519.PublicKey))
	forged.RootKeyID = proof.KeyID(mustReadRoot(t, rootPub)) // claims the cluster's root
	forgeSignedChain(t, dsn, "forged-endorsed", 3, mallory)
	forgeEvent(t, dsn, "forged-endorsed-2", sandgate.Event{Type: sandgate.EventAuditKeyEndorsed, Outcome: "endorsed", Payload: forged.Payload()})
	out, _ = auditCLI(map[string]string{"SANDGATE_DATABASE_URL": dsn}, "audit", "verify", "--root-key", rootPub)
	rep := verifyReport(t, out)
	var onForged []string
	for _, p := range rep.Problems {
		if p.ChainID == "forged-endorsed" {
			onForged = append(onForged, p.Kind)
		}
		if strings.HasPrefix(p.ChainID, c.names[0]) {
			t.Errorf("a problem on node-a's chains, whose key the root endorsed: %+v", p)
		}
	}
	if !slices.Contains(onForged, proof.ProblemUntrustedKey) {
		t.Errorf("the chain signed with the key of a forged endorsement: problems %v, want %s", onForged, proof.ProblemUntrustedKey)
	}
	if len(rep.Anchors) != 1 || rep.Anchors[0].Kind != proof.AnchorRoot || !rep.Anchors[0].Used {
		t.Errorf("anchors = %+v, want the root, used", rep.Anchors)
	}
}

func mustReadRoot(t *testing.T, path string) ed25519.PublicKey {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	k, err := proof.ParsePublicKey(data)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// forgeEvent inserts ev, as the application role, as the first row of a
// chain of its own with a hash that agrees with its body.
func forgeEvent(t *testing.T, dsn, chain string, ev sandgate.Event) {
	t.Helper()
	db, err := sql.Open("pgx", dsn+" role=sandgate_app")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ev.ID, ev.Time = uuid.Must(uuid.NewV7()).String(), time.Now()
	c, err := proof.Canonicalize(ev)
	if err != nil {
		t.Fatal(err)
	}
	body := c.Body(c.Time)
	prev := make([]byte, proof.HashSize)
	if _, err := db.Exec(`INSERT INTO audit_events (event_id, chain_id, seq, event_time, type, outcome, payload, body, prev_hash, hash)
		VALUES ($1, $2, 1, $3, $4, $5, $6, $7, $8, $9)`, c.ID, chain, c.Time, string(c.Type), c.Outcome, []byte(c.PayloadJSON()),
		body, prev, proof.ChainHash(prev, chain, 1, body)); err != nil {
		t.Fatalf("forge %s: %v", ev.Type, err)
	}
}
