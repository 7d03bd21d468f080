package e2e

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"database/sql"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/audit/audittest"
	"github.com/sandgate/sandgate/audit/proof"
	"github.com/sandgate/sandgate/cmd/sandgate/cli"
)

// reviews records n admission.reviewed events on s's lifecycle chain.
func reviews(t *testing.T, s *testServer, n int) {
	t.Helper()
	for range n {
		status, _, body := s.do(t, http.MethodPost, "/v1/admission/review", `{"command":["echo","hi"]}`)
		if status != http.StatusOK {
			t.Fatalf("review: %d %s", status, body)
		}
	}
}

// witness runs `sandgate audit witness --once` against s and returns its
// output and error.
func witness(t *testing.T, s *testServer, state, key, gatewayKey string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	err := runApp(context.Background(), []string{"audit", "witness", "--once", "--gateway", s.URL, "--token", s.Token,
		"--state", state, "--key", key, "--gateway-key", gatewayKey, "--name", "witness.test"}, map[string]string{}, &out, nil)
	return out.String(), err
}

// rewriteHistory rewrites chain as a superuser who holds the node's key
// would: the first admission.reviewed event's outcome becomes "denied" in
// its body and column, every later hash is recomputed, the Merkle tree is
// rebuilt and every checkpoint (its sandgate-checkpoint-v1 signature and
// its note) re-signed with the real key. The result is a self-consistent
// log.
func rewriteHistory(t *testing.T, dsn, chain, keyFile string) {
	t.Helper()
	key, err := proof.LoadSigningKey(keyFile, false)
	if err != nil {
		t.Fatal(err)
	}
	db := audittest.OpenDB(t, dsn)
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	exec := func(q string, args ...any) {
		t.Helper()
		if _, err := tx.Exec(q, args...); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	for _, tbl := range []string{"audit_events", "audit_checkpoints", "audit_tree_hashes"} {
		exec("ALTER TABLE " + tbl + " DISABLE TRIGGER USER")
	}
	rows, err := tx.Query(`SELECT seq, type, body FROM audit_events WHERE chain_id = $1 ORDER BY seq`, chain)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		seq  int64
		typ  string
		body []byte
	}
	var all []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.seq, &r.typ, &r.body); err != nil {
			t.Fatal(err)
		}
		all = append(all, r)
	}
	rows.Close()
	target := -1
	for i, r := range all {
		if r.typ == "admission.reviewed" && bytes.Contains(r.body, []byte(`"outcome":"allowed"`)) {
			target = i
			break
		}
	}
	if target < 0 {
		t.Fatal("no allowed review to rewrite")
	}
	all[target].body = bytes.Replace(all[target].body, []byte(`"outcome":"allowed"`), []byte(`"outcome":"denied"`), 1)
	exec(`UPDATE audit_events SET body = $3, outcome = 'denied' WHERE chain_id = $1 AND seq = $2`, chain, all[target].seq, all[target].body)
	prev := make([]byte, proof.HashSize)
	hashes := make([][]byte, len(all))
	for i, r := range all {
		if i > 0 {
			prev = hashes[i-1]
		}
		hashes[i] = proof.ChainHash(prev, chain, r.seq, r.body)
		if i >= target {
			exec(`UPDATE audit_events SET prev_hash = $3, hash = $4 WHERE chain_id = $1 AND seq = $2`, chain, r.seq, prev, hashes[i])
		}
	}
	exec(`UPDATE audit_heads SET hash = $2 WHERE chain_id = $1`, chain, hashes[len(hashes)-1])
	// The tree, rebuilt from the new hashes.
	exec(`DELETE FROM audit_tree_hashes WHERE chain_id = $1`, chain)
	var stored []tlog.Hash
	reader := tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for i, x := range idx {
			out[i] = stored[x]
		}
		return out, nil
	})
	var run []byte
	for i, h := range hashes {
		hs, err := tlog.StoredHashesForRecordHash(int64(i), proof.LeafHash(h), reader)
		if err != nil {
			t.Fatal(err)
		}
		stored = append(stored, hs...)
		for _, sh := range hs {
			run = append(run, sh[:]...)
		}
	}
	exec(`INSERT INTO audit_tree_hashes (chain_id, start_index, end_index, hashes) VALUES ($1, 0, $2, $3)`, chain, len(stored), run)
	// Every checkpoint, re-signed with the real key.
	cps, err := tx.Query(`SELECT id, seq, created_at, final, note FROM audit_checkpoints WHERE chain_id = $1 ORDER BY id`, chain)
	if err != nil {
		t.Fatal(err)
	}
	type cpRow struct {
		id, seq int64
		created sql.NullTime
		final   bool
		note    sql.NullString
	}
	var list []cpRow
	for cps.Next() {
		var c cpRow
		if err := cps.Scan(&c.id, &c.seq, &c.created, &c.final, &c.note); err != nil {
			t.Fatal(err)
		}
		list = append(list, c)
	}
	cps.Close()
	var prevSig []byte
	for _, c := range list {
		head := hashes[c.seq-1]
		sig := signCheckpointForTest(key, chain, c.seq, head, c.created.Time, c.final, prevSig)
		var newNote any
		if c.note.Valid {
			root, err := tlog.TreeHash(c.seq, reader)
			if err != nil {
				t.Fatal(err)
			}
			n, err := proof.SignNote(key, proof.NoteOrigin(c.note.String), c.seq, root)
			if err != nil {
				t.Fatal(err)
			}
			newNote = n
		}
		exec(`UPDATE audit_checkpoints SET head_hash = $2, prev_signature = $3, signature = $4, note = $5 WHERE id = $1`,
			c.id, head, nilIfEmpty(prevSig), sig, newNote)
		prevSig = sig
	}
	for _, tbl := range []string{"audit_events", "audit_checkpoints", "audit_tree_hashes"} {
		exec("ALTER TABLE " + tbl + " ENABLE TRIGGER USER")
	}
	for _, q := range []string{
		"ALTER TABLE audit_events ENABLE ALWAYS TRIGGER audit_events_no_update",
		"ALTER TABLE audit_events ENABLE ALWAYS TRIGGER audit_events_no_truncate",
		"ALTER TABLE audit_checkpoints ENABLE ALWAYS TRIGGER audit_checkpoints_no_update",
		"ALTER TABLE audit_checkpoints ENABLE ALWAYS TRIGGER audit_checkpoints_no_truncate",
		"ALTER TABLE audit_tree_hashes ENABLE ALWAYS TRIGGER audit_tree_hashes_no_update",
		"ALTER TABLE audit_tree_hashes ENABLE ALWAYS TRIGGER audit_tree_hashes_no_truncate",
	} {
		exec(q)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
}

// signCheckpointForTest signs a sandgate-checkpoint-v1 message as the
// writer does.
func signCheckpointForTest(key ed25519.PrivateKey, chain string, seq int64, head []byte, at time.Time, final bool, prevSig []byte) []byte {
	return ed25519.Sign(key, proof.CheckpointMessage(chain, seq, head, at, final, prevSig))
}

func nilIfEmpty(b []byte) []byte {
	if len(b) == 0 {
		return nil
	}
	return b
}

// TestWitnessCatchesRewrittenHistory: a witness that saw the log's
// checkpoints cosigns each consistent one (the gateway serves the
// cosignature with its note), and refuses, with an alarm and exit status
// 2, the checkpoint of a history a superuser rewrote and re-signed with
// the real key, although audit verify, pinned to that key, finds nothing
// wrong with it.
func TestWitnessCatchesRewrittenHistory(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "checkpoint.key")
	s := startServer(t, withEnv("SANDGATE_SIGNING_KEY_FILE", keyFile))
	reviews(t, s, 3)
	if err := s.Stop(); err != nil { // a final checkpoint, with its note
		t.Fatal(err)
	}
	gwKey := filepath.Join(dir, "gateway.pub")
	out, err := auditCLI(s.Env, "audit", "public-key", "--signing-key-file", keyFile, "--hex")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(gwKey, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
	state, wkey := filepath.Join(dir, "witness"), filepath.Join(dir, "witness.key")
	// The gateway's operator pins the witness, whose key is made first.
	wpriv, err := proof.LoadSigningKey(wkey, true)
	if err != nil {
		t.Fatal(err)
	}
	pins := filepath.Join(dir, "witnesses")
	if err := os.WriteFile(pins, []byte(proof.NewCosigner("witness.test", wpriv).VerifierKey()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.Env["SANDGATE_AUDIT_WITNESS_KEYS_FILE"] = pins

	s = startServerWithEnv(t, s.Env)
	if out, err := witness(t, s, state, wkey, gwKey); err != nil {
		t.Fatalf("first look: %v\n%s", err, out)
	}
	cp, err := s.Client.Checkpoint(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(cp.Cosignatures) != 1 || !strings.HasPrefix(cp.Cosignatures[0], "— witness.test ") {
		t.Fatalf("cosignatures served: %q", cp.Cosignatures)
	}
	// The cosignature checks with the witness's key over the note.
	wv, err := proof.NewCosignatureVerifier(proof.NewCosigner("witness.test", wpriv).VerifierKey())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := note.Open([]byte(cp.Note), note.VerifierList(wv)); err != nil {
		t.Fatalf("served note's cosignature: %v\n%s", err, cp.Note)
	}
	// An inclusion proof through the Go client checks with tlog alone.
	evs := s.auditEvents(t, s.Token, url.Values{"type": {"admission.reviewed"}})
	p, err := s.Client.InclusionProof(context.Background(), evs[0].ID, cp.TreeSize)
	if err != nil {
		t.Fatal(err)
	}
	var path tlog.RecordProof
	for _, h := range p.Hashes {
		b, _ := base64.StdEncoding.DecodeString(h)
		path = append(path, tlog.Hash(b))
	}
	root, _ := base64.StdEncoding.DecodeString(cp.RootHash)
	leaf, _ := hex.DecodeString(p.EventHash)
	if err := tlog.CheckRecord(path, p.TreeSize, tlog.Hash(root), p.LeafIndex, tlog.RecordHash(leaf)); err != nil {
		t.Fatalf("tlog.CheckRecord of the client's proof: %v", err)
	}
	chain, seen := cp.ChainID, cp.TreeSize
	reviews(t, s, 3)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}

	s = startServerWithEnv(t, s.Env)
	if out, err := witness(t, s, state, wkey, gwKey); err != nil {
		t.Fatalf("second look (consistent): %v\n%s", err, out)
	}
	reviews(t, s, 3)
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}

	rewriteHistory(t, s.DSN, chain, keyFile)
	out, err = auditCLI(s.Env, "audit", "verify", "--public-key", gwKey)
	if err != nil {
		t.Fatalf("audit verify on the rewritten trail: %v\n%s", err, out)
	}
	if rep := verifyReport(t, out); !rep.OK {
		t.Fatalf("audit verify found the rewrite: %+v", rep.Problems)
	}

	s = startServerWithEnv(t, s.Env)
	cp, err = s.Client.Checkpoint(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if cp.TreeSize <= seen {
		t.Fatalf("the rewritten log's size %d is not past the %d the witness saw", cp.TreeSize, seen)
	}
	out, err = witness(t, s, state, wkey, gwKey)
	var exit *cli.ExitError
	if !errors.As(err, &exit) || exit.Code != exitWitnessAlarm || !strings.Contains(out+err.Error(), "ALARM inconsistent") {
		t.Fatalf("witness on the rewritten log: %v\n%s", err, out)
	}
	t.Logf("witness: %v", err)
	if _, err := os.Stat(filepath.Join(state, "ALARM-"+chain+".json")); err != nil {
		t.Errorf("alarm not recorded: %v", err)
	}
	if prom, _ := os.ReadFile(filepath.Join(state, "witness.prom")); !strings.Contains(string(prom), `sandgate_witness_alarm{origin="`+cp.Origin+`",kind="inconsistent"} 1`) {
		t.Errorf("witness.prom:\n%s", prom)
	}
	// The gateway recorded the alarm, signed by the witness, in the trail
	// and counts it.
	alarms := s.auditEvents(t, s.Token, url.Values{"type": {"audit.witness_alarm"}})
	if len(alarms) != 1 || alarms[0].Outcome != "inconsistent" || alarms[0].Payload["witness"] != "witness.test" ||
		alarms[0].Payload["origin"] != cp.Origin || alarms[0].Payload["known_witness"] != true {
		t.Errorf("audit.witness_alarm events: %+v", alarms)
	}
	if _, _, body := s.do(t, http.MethodGet, "/metrics", ""); !strings.Contains(string(body), `sandgate_audit_witness_alarms_total{kind="inconsistent",known_witness="true"} 1`) {
		t.Errorf("/metrics has no witness alarm")
	}
	// Its view stays as it was: it refuses again.
	if _, err := witness(t, s, state, wkey, gwKey); !errors.As(err, &exit) || exit.Code != exitWitnessAlarm {
		t.Fatalf("second run after the alarm: %v", err)
	}
	// A witness that saw nothing before has nothing to compare with.
	if out, err := witness(t, s, filepath.Join(dir, "fresh"), wkey, gwKey); err != nil {
		t.Fatalf("fresh witness: %v\n%s", err, out)
	}
	if view, ok, err := witnessView(t, state, chain); err != nil || !ok || view.Size <= seen || view.Origin != cp.Origin {
		t.Fatalf("witness view: %+v %t %v", view, ok, err)
	}
}

// TestReceiptCLI: a real run's receipt, taken from the database, checks
// offline with the gateway's key pinned; a changed exit code, or another
// pinned key, fails it with the problem named.
func TestReceiptCLI(t *testing.T) {
	dir := t.TempDir()
	keyFile := filepath.Join(dir, "checkpoint.key")
	s := startServer(t, withEnv("SANDGATE_SIGNING_KEY_FILE", keyFile), withEnv("SANDGATE_CHECKPOINT_EVERY", "2"))
	run := s.submitWait(t, s.Token, `{"command":["sh","-c","exit 3"]}`)
	if run.ExitCode == nil || *run.ExitCode != 3 {
		t.Fatalf("run: %+v", run)
	}
	// The same receipt over the API (GET /v1/runs/{id}/receipt), once
	// every event of the run is under a checkpoint note.
	var fromAPI sandgate.Receipt
	var apiErr error
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if fromAPI, apiErr = s.Client.Receipt(context.Background(), run.ID); apiErr == nil {
			break
		}
	}
	if apiErr != nil {
		t.Fatalf("GET /v1/runs/%s/receipt: %v", run.ID, apiErr)
	}
	apiFile := filepath.Join(dir, "receipt-api.json")
	apiRaw, _ := json.Marshal(fromAPI)
	os.WriteFile(apiFile, apiRaw, 0o600)
	if err := s.Stop(); err != nil { // the final checkpoints cover the run
		t.Fatal(err)
	}
	file := filepath.Join(dir, "receipt.json")
	if out, err := auditCLI(s.Env, "audit", "receipt", "--database-url", s.DSN, run.ID, "-o", file); err != nil {
		t.Fatalf("audit receipt: %v\n%s", err, out)
	}
	pub, err := auditCLI(s.Env, "audit", "public-key", "--signing-key-file", keyFile)
	if err != nil {
		t.Fatal(err)
	}
	pubFile := filepath.Join(dir, "gw.pub")
	os.WriteFile(pubFile, []byte(pub), 0o600)
	// Offline: nothing but the file and the key (no database URL).
	offline := map[string]string{}
	out, err := auditCLI(offline, "audit", "verify-receipt", file, "--key", pubFile)
	if err != nil {
		t.Fatalf("verify-receipt: %v\n%s", err, out)
	}
	var rep proof.ReceiptReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil {
		t.Fatal(err)
	}
	out, err = auditCLI(offline, "audit", "verify-receipt", apiFile, "--key", pubFile)
	if err != nil {
		t.Fatalf("verify-receipt of the API's receipt: %v\n%s", err, out)
	}
	var apiRep proof.ReceiptReport
	// The CLI's, made later, may hold events recorded since.
	if err := json.Unmarshal([]byte(out), &apiRep); err != nil || apiRep.Events == 0 || !strings.HasPrefix(strings.Join(rep.Types, ","), strings.Join(apiRep.Types, ",")) {
		t.Errorf("the API's receipt has events %v, the CLI's %v (%v)", apiRep.Types, rep.Types, err)
	}
	types := strings.Join(rep.Types, ",")
	for _, want := range []string{"run.requested", "admission.allowed", "container.created", "container.started", "container.exited"} {
		if !strings.Contains(types, want) {
			t.Errorf("receipt lacks %s: %s", want, types)
		}
	}
	raw, _ := os.ReadFile(file)
	var rec audit.Receipt
	json.Unmarshal(raw, &rec)
	for _, e := range rec.Events {
		if e.Type == "admission.allowed" && !strings.Contains(e.Body, `"policy_revision":"sha256:`) {
			t.Errorf("decision without its policy revision: %s", e.Body)
		}
		if e.Type == "container.exited" && !strings.Contains(e.Body, `"exit_code":3`) {
			t.Errorf("exit without its code: %s", e.Body)
		}
	}

	forged := filepath.Join(dir, "forged.json")
	os.WriteFile(forged, bytes.Replace(raw, []byte(`\"exit_code\":3`), []byte(`\"exit_code\":0`), 1), 0o600)
	out, err = auditCLI(offline, "audit", "verify-receipt", forged, "--key", pubFile)
	var exit *cli.ExitError
	if !errors.As(err, &exit) || exit.Code != 1 || !strings.Contains(exit.Message, "hash_mismatch") {
		t.Fatalf("forged receipt: %v\n%s", err, out)
	}
	other, _, _ := ed25519.GenerateKey(nil)
	out, err = auditCLI(offline, "audit", "verify-receipt", file, "--key", hex.EncodeToString(other))
	if !errors.As(err, &exit) || exit.Code != 1 || !strings.Contains(exit.Message, "untrusted_key") {
		t.Fatalf("receipt against another key: %v\n%s", err, out)
	}
}
