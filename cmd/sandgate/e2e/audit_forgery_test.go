package e2e

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/audit/audittest"
	"github.com/sandgate/sandgate/audit/proof"
	"github.com/sandgate/sandgate/cmd/sandgate/cli"
)

// auditCLI runs sandgate with env and returns what it printed and its
// error.
func auditCLI(env map[string]string, args ...string) (string, error) {
	var out bytes.Buffer
	err := runApp(context.Background(), args, env, &out, nil)
	return out.String(), err
}

// verifyReport decodes the report verify printed first in out.
func verifyReport(t *testing.T, out string) proof.Report {
	t.Helper()
	i := strings.Index(out, "{")
	if i < 0 {
		t.Fatalf("no report in the output:\n%s", out)
	}
	var rep proof.Report
	if err := json.NewDecoder(strings.NewReader(out[i:])).Decode(&rep); err != nil {
		t.Fatalf("decode the report: %v\n%s", err, out)
	}
	return rep
}

// forgeSignedChain writes, as the application role, a chain of n
// admissions for mallory with hashes and columns that agree, and a final
// checkpoint over it signed with key.
func forgeSignedChain(t *testing.T, dsn, chain string, n int, key ed25519.PrivateKey) {
	t.Helper()
	db, err := sql.Open("pgx", dsn+" role=sandgate_app")
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	prev := make([]byte, proof.HashSize)
	var head []byte
	for seq := int64(1); seq <= int64(n); seq++ {
		id := uuid.Must(uuid.NewV7()).String()
		at := time.Now().UTC().Truncate(time.Microsecond).Format("2006-01-02T15:04:05.000000Z")
		body := fmt.Sprintf(`{"actor":"mallory","event_id":%q,"event_time":%q,"outcome":"allowed","recorded_at":%q,"type":"admission.allowed"}`, id, at, at)
		head = proof.ChainHash(prev, chain, seq, []byte(body))
		if _, err := db.Exec(`INSERT INTO audit_events (event_id, chain_id, seq, event_time, type, outcome, actor, body, prev_hash, hash)
			VALUES ($1, $2, $3, $4, 'admission.allowed', 'allowed', 'mallory', $5, $6, $7)`, id, chain, seq, at, []byte(body), prev, head); err != nil {
			t.Fatalf("forge row %d: %v", seq, err)
		}
		prev = head
	}
	created := time.Now().UTC().Truncate(time.Microsecond)
	sig := ed25519.Sign(key, proof.CheckpointMessage(chain, int64(n), head, created, true, nil))
	pub := key.Public().(ed25519.PublicKey)
	if _, err := db.Exec(`INSERT INTO audit_checkpoints (chain_id, seq, head_hash, created_at, final, signature, key_id, public_key)
		VALUES ($1, $2, $3, $4, true, $5, $6, $7)`, chain, n, head, created, sig, proof.KeyID(pub), []byte(pub)); err != nil {
		t.Fatalf("forge checkpoint: %v", err)
	}
}

// TestAuditVerifyCLIReportsForgedChain: `sandgate audit verify` reports a
// chain the application role added with checkpoints of its own key,
// online with the gateway's key pinned (the default when the signing key
// is readable), online relying on the key registry, and offline on an
// export; it exits 1 and lists the keys it judged.
func TestAuditVerifyCLIReportsForgedChain(t *testing.T) {
	dsn := audittest.NewMigratedDatabase(t)
	state := t.TempDir()
	keyFile := filepath.Join(state, "checkpoint.key")
	env := map[string]string{
		"SANDGATE_DATABASE_URL":     dsn,
		"SANDGATE_SPOOL_DIR":        filepath.Join(state, "spool"),
		"SANDGATE_SIGNING_KEY_FILE": keyFile,
		"SANDGATE_NODE":             "gw-1",
	}
	// The gateway wrote its chain an hour ago.
	s, err := audit.Open(context.Background(), audit.Config{
		DSN: dsn, SpoolDir: env["SANDGATE_SPOOL_DIR"], SigningKeyFile: keyFile, Node: "gw-1",
		Clock: func() time.Time { return time.Now().Add(-time.Hour) },
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := s.Record(context.Background(), auditEvent(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if out, err := auditCLI(env, "audit", "verify"); err != nil {
		t.Fatalf("verify before the forgery: %v\n%s", err, out)
	}
	_, mallory, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	forgeSignedChain(t, dsn, "forged-cli", 3, mallory)

	exported := filepath.Join(state, "trail.jsonl")
	checkpoints := filepath.Join(state, "checkpoints.jsonl")
	if out, err := auditCLI(env, "audit", "export", "--database-url", env["SANDGATE_DATABASE_URL"], "-o", exported); err != nil {
		t.Fatalf("export: %v\n%s", err, out)
	}
	if out, err := auditCLI(env, "audit", "export", "--database-url", env["SANDGATE_DATABASE_URL"], "--checkpoints", "-o", checkpoints); err != nil {
		t.Fatalf("export --checkpoints: %v\n%s", err, out)
	}
	noKey := map[string]string{}
	for k, v := range env {
		noKey[k] = v
	}
	noKey["SANDGATE_SIGNING_KEY_FILE"] = filepath.Join(state, "no-such.key")
	tests := []struct {
		name string
		env  map[string]string
		args []string
		want []string // problem kinds on the forged chain
	}{
		{"online, the gateway's key pinned", env, nil, []string{proof.ProblemUntrustedKey}},
		{"online, the key registry", noKey, nil, []string{proof.ProblemUnknownKey}},
		{"offline, the gateway's key pinned", env, []string{"--offline", exported, "--checkpoints", checkpoints},
			[]string{proof.ProblemUntrustedKey, proof.ProblemUnsignedChain}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := auditCLI(tt.env, append([]string{"audit", "verify"}, tt.args...)...)
			var exit *cli.ExitError
			if !errors.As(err, &exit) || exit.Code != 1 {
				t.Fatalf("verify = %v, want exit status 1\n%s", err, out)
			}
			rep := verifyReport(t, out)
			got := map[string]bool{}
			for _, p := range rep.Problems {
				if p.ChainID == "forged-cli" {
					got[p.Kind] = true
				}
			}
			for _, kind := range tt.want {
				if !got[kind] {
					t.Errorf("no %s on the forged chain in %+v", kind, rep.Problems)
				}
			}
			if len(rep.Keys) != 1 || rep.Keys[0].Node != "gw-1" || rep.Keys[0].FirstUsedAt.IsZero() {
				t.Errorf("keys = %+v, want gw-1's with its first use", rep.Keys)
			}
		})
	}
}

// TestAuditRotateKeyCLI: `sandgate audit rotate-key` registers the node's
// new key endorsed by its previous one; verify on the node's host (its new
// key the local anchor) then accepts checkpoints of both, while a key the
// node started using without it is reported until pinned with
// --trusted-keys.
func TestAuditRotateKeyCLI(t *testing.T) {
	dsn := audittest.NewMigratedDatabase(t)
	state := t.TempDir()
	oldKey, newKey, rogueKey := filepath.Join(state, "old.key"), filepath.Join(state, "new.key"), filepath.Join(state, "rogue.key")
	env := func(key string) map[string]string {
		return map[string]string{
			"SANDGATE_DATABASE_URL":     dsn,
			"SANDGATE_SPOOL_DIR":        filepath.Join(state, "spool-"+filepath.Base(key)),
			"SANDGATE_SIGNING_KEY_FILE": key,
			"SANDGATE_NODE":             "gw-1",
		}
	}
	gateway := func(key string) ed25519.PublicKey {
		t.Helper()
		s, err := audit.Open(context.Background(), audit.Config{DSN: dsn, SpoolDir: env(key)["SANDGATE_SPOOL_DIR"], SigningKeyFile: key, Node: "gw-1"})
		if err != nil {
			t.Fatal(err)
		}
		if err := s.Record(context.Background(), auditEvent(0)); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(context.Background()); err != nil {
			t.Fatal(err)
		}
		return s.PublicKey()
	}
	oldPub := gateway(oldKey)
	out, err := auditCLI(env(newKey), "audit", "rotate-key", "--previous-key-file", oldKey)
	if err != nil {
		t.Fatalf("rotate-key: %v\n%s", err, out)
	}
	var reg proof.KeyRecord
	if err := json.NewDecoder(strings.NewReader(out[strings.Index(out, "{"):])).Decode(&reg); err != nil {
		t.Fatalf("rotate-key output: %v\n%s", err, out)
	}
	if reg.Replaces != proof.KeyID(oldPub) || reg.Endorsement == "" || reg.Node != "gw-1" {
		t.Fatalf("rotation = %+v, want gw-1's new key replacing %s, endorsed", reg, proof.KeyID(oldPub))
	}
	newPub := gateway(newKey)
	registry := env(filepath.Join(state, "no-such.key"))
	if out, err := auditCLI(env(newKey), "audit", "verify"); err != nil {
		t.Fatalf("verify after an endorsed rotation: %v\n%s", err, out)
	}
	if out, err := auditCLI(registry, "audit", "verify"); err == nil || !hasKind(verifyReport(t, out), proof.ProblemUnpinnedKeys) {
		t.Fatalf("verify with no anchor at all = %v, want %s\n%s", err, proof.ProblemUnpinnedKeys, out)
	}

	roguePub := gateway(rogueKey)
	out, err = auditCLI(env(newKey), "audit", "verify")
	if err == nil || verifyReport(t, out).OK {
		t.Fatalf("verify with a key nothing endorsed = %v, want a problem\n%s", err, out)
	}
	if rep := verifyReport(t, out); !hasKind(rep, proof.ProblemUnendorsedKey) {
		t.Errorf("problems = %+v, want %s", rep.Problems, proof.ProblemUnendorsedKey)
	}
	list := filepath.Join(state, "trusted.keys")
	var pems []byte
	for _, k := range []ed25519.PublicKey{oldPub, newPub, roguePub} {
		pems = append(pems, proof.EncodePublicKey(k)...)
	}
	if err := os.WriteFile(list, pems, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := auditCLI(registry, "audit", "verify", "--trusted-keys", list); err != nil {
		t.Fatalf("verify with every key pinned: %v\n%s", err, out)
	}
}

func hasKind(rep proof.Report, kind string) bool {
	for _, p := range rep.Problems {
		if p.Kind == kind {
			return true
		}
	}
	return false
}

// TestAuditVerifyAPIReportsForgedChain: GET /v1/audit/verify of a running
// gateway reports a chain the application role added with checkpoints of
// its own key, which none of the gateway's trust anchors (its own key)
// vouches for.
func TestAuditVerifyAPIReportsForgedChain(t *testing.T) {
	s := startServer(t)
	verify := func() sandgate.VerifyReport {
		t.Helper()
		status, _, body := s.do(t, http.MethodGet, "/v1/audit/verify", "")
		if status != http.StatusOK {
			t.Fatalf("verify: %d %s", status, body)
		}
		var rep sandgate.VerifyReport
		if err := json.Unmarshal(body, &rep); err != nil {
			t.Fatal(err)
		}
		return rep
	}
	if rep := verify(); !rep.OK {
		t.Fatalf("verify before the forgery = %+v", rep)
	}
	_, mallory, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	forgeSignedChain(t, s.DSN, "forged-api", 3, mallory)
	rep := verify()
	var kinds []string
	for _, p := range rep.Problems {
		if p.ChainID == "forged-api" {
			kinds = append(kinds, p.Kind)
		}
	}
	if rep.OK || !slices.Contains(kinds, proof.ProblemUntrustedKey) {
		t.Fatalf("verify after the forgery = %+v, want %s on forged-api", rep, proof.ProblemUntrustedKey)
	}
}

// TestServeTrustedKeysFile: the gateway's verify trusts its own key and
// the keys SANDGATE_TRUSTED_KEYS_FILE pins, not whatever the key registry
// holds: a chain signed by a key the application role registered for a
// new node name is untrusted_key with or without pins (it passed with the
// registry alone before trust needed an anchor), and trusted when pinned.
func TestServeTrustedKeysFile(t *testing.T) {
	other, _, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	_, mallory, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	pins, pinsMallory := filepath.Join(dir, "trusted.keys"), filepath.Join(dir, "mallory.keys")
	if err := os.WriteFile(pins, []byte(hex.EncodeToString(other)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pinsMallory, []byte(hex.EncodeToString(mallory.Public().(ed25519.PublicKey))+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name   string
		opts   []serverOption
		wantOK bool
	}{
		{"the gateway's own key", nil, false},
		{"pinned keys", []serverOption{withEnv("SANDGATE_TRUSTED_KEYS_FILE", pins)}, false},
		{"the forger's key pinned", []serverOption{withEnv("SANDGATE_TRUSTED_KEYS_FILE", pinsMallory)}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := startServer(t, tc.opts...)
			db, err := sql.Open("pgx", s.DSN+" role=sandgate_app")
			if err != nil {
				t.Fatal(err)
			}
			defer db.Close()
			pub := mallory.Public().(ed25519.PublicKey)
			if _, err := db.Exec(`SELECT * FROM audit_register_key($1, $2, $3, NULL)`, "gw-new", []byte(pub), "forged-pinned"); err != nil {
				t.Fatalf("register: %v", err)
			}
			forgeSignedChain(t, s.DSN, "forged-pinned", 3, mallory)
			status, _, body := s.do(t, http.MethodGet, "/v1/audit/verify", "")
			var rep sandgate.VerifyReport
			if err := json.Unmarshal(body, &rep); status != http.StatusOK || err != nil {
				t.Fatalf("verify: %d %s", status, body)
			}
			var kinds []string
			for _, p := range rep.Problems {
				if p.ChainID == "forged-pinned" {
					kinds = append(kinds, p.Kind)
				}
			}
			if tc.wantOK && len(kinds) != 0 {
				t.Errorf("with the key pinned, problems %v on the chain it signs", kinds)
			}
			if !tc.wantOK && !slices.Contains(kinds, proof.ProblemUntrustedKey) {
				t.Errorf("verify = %+v, want %s on the forged chain", rep, proof.ProblemUntrustedKey)
			}
		})
	}
}
