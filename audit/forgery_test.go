package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/uuid"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/audittest"
	"github.com/sandgate/sandgate/audit/proof"
	"github.com/sandgate/sandgate/migrations"
)

// attacker is someone holding the application role sandgate_app: INSERT
// and SELECT on the trail, whatever functions that role may execute, and
// signing keys of their own; not a legitimate node's private key.
type attacker struct {
	t  *testing.T
	db *sql.DB
}

// asAppRole connects to dsn as sandgate_app, as serve does.
func asAppRole(t *testing.T, dsn string) attacker {
	t.Helper()
	db, err := sql.Open("pgx", dsn+" role=sandgate_app")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	var role string
	if err := db.QueryRow("SELECT current_user").Scan(&role); err != nil || role != "sandgate_app" {
		t.Fatalf("connected as %q (%v), want sandgate_app", role, err)
	}
	return attacker{t: t, db: db}
}

// forgedRow is one row an attacker wrote: what it claims and where the
// database put it.
type forgedRow struct {
	seq        int64
	hash       []byte
	recordedAt time.Time // the column, as stored
}

// forgeChain appends n well-formed rows to chain, each claiming to be
// recorded at claimed (in its hashed body and, when the database lets the
// inserter choose it, in the recorded_at column): hashes, links and
// columns all agree, as verify checks them. Events are admissions of
// mallory's runs. It returns the rows as stored.
func (a attacker) forgeChain(chain, node string, n int, claimed time.Time, extra ...sandgate.Event) []forgedRow {
	a.t.Helper()
	prev := make([]byte, proof.HashSize)
	var out []forgedRow
	events := make([]sandgate.Event, 0, n+len(extra))
	events = append(events, extra...)
	for i := len(extra); i < n; i++ {
		events = append(events, sandgate.Event{
			Type: sandgate.EventAdmissionAllowed, Outcome: "allowed", Actor: "mallory", Team: "payments",
			RunID: "forged-run", DecisionID: "forged-decision", Node: node,
		})
	}
	for i, ev := range events {
		seq := int64(i + 1)
		ev.ID = uuid.Must(uuid.NewV7()).String()
		ev.Time = claimed
		ev, body, err := canonicalEvent(ev, claimed)
		if err != nil {
			a.t.Fatal(err)
		}
		payload, err := proof.PayloadOf(body)
		if err != nil {
			a.t.Fatal(err)
		}
		var p any
		if payload != nil {
			p = string(payload)
		}
		h := proof.ChainHash(prev, chain, seq, body)
		cols := `event_id, chain_id, seq, event_time, type, outcome, run_id, decision_id, actor, team, node, payload, body, prev_hash, hash`
		vals := `$1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::jsonb, $13, $14, $15`
		args := []any{ev.ID, chain, seq, ev.Time, string(ev.Type), textOrNil(ev.Outcome), textOrNil(ev.RunID), textOrNil(ev.DecisionID),
			textOrNil(ev.Actor), textOrNil(ev.Team), textOrNil(ev.Node), p, body, prev, h}
		// The claimed time first; when the database refuses to let the
		// inserter choose recorded_at, the same row without it.
		_, err = a.db.Exec(`INSERT INTO audit_events (`+cols+`, recorded_at) VALUES (`+vals+`, $16)`, append(args, claimed)...)
		if err != nil {
			if !strings.Contains(err.Error(), "recorded_at") {
				a.t.Fatalf("insert forged row %d: %v", seq, err)
			}
			if _, err := a.db.Exec(`INSERT INTO audit_events (`+cols+`) VALUES (`+vals+`)`, args...); err != nil {
				a.t.Fatalf("insert forged row %d without recorded_at: %v", seq, err)
			}
		}
		r := forgedRow{seq: seq, hash: h}
		if err := a.db.QueryRow(`SELECT recorded_at FROM audit_events WHERE event_id = $1`, ev.ID).Scan(&r.recordedAt); err != nil {
			a.t.Fatal(err)
		}
		out = append(out, r)
		prev = h
	}
	if _, err := a.db.Exec(`INSERT INTO audit_chains (chain_id, node) VALUES ($1, $2) ON CONFLICT DO NOTHING`, chain, node); err != nil {
		a.t.Fatalf("register forged chain: %v", err)
	}
	return out
}

// sign inserts a checkpoint over the head of rows signed with key, final
// so that it never looks stale.
func (a attacker) sign(chain string, rows []forgedRow, key ed25519.PrivateKey) {
	a.t.Helper()
	last := rows[len(rows)-1]
	cp := proof.SignCheckpoint(key, chain, last.seq, last.hash, time.Now(), true, nil)
	sig, _ := hex.DecodeString(cp.Signature)
	pub := key.Public().(ed25519.PublicKey)
	if _, err := a.db.Exec(`INSERT INTO audit_checkpoints (chain_id, seq, head_hash, created_at, final, signature, key_id, public_key)
		VALUES ($1, $2, $3, $4, true, $5, $6, $7)`, chain, last.seq, last.hash, cp.CreatedAt, sig, cp.KeyID, []byte(pub)); err != nil {
		a.t.Fatalf("insert forged checkpoint: %v", err)
	}
}

// register makes key known for node through whatever the application role
// may call, the way a gateway registers its key when it first uses it.
func (a attacker) register(node, chain string, key ed25519.PrivateKey) {
	a.t.Helper()
	pub := key.Public().(ed25519.PublicKey)
	if _, err := a.db.Exec(`SELECT * FROM audit_register_key($1, $2, $3, NULL)`, node, []byte(pub), chain); err != nil {
		a.t.Fatalf("register the attacker's key for node %s: %v", node, err)
	}
}

// TestForgedChainAsAppRole reproduces the forgery of hardening issue 14:
// with only the application role, an attacker adds a brand-new chain of
// admissions (rows dated 2099; checkpoints signed with a key of their
// own; that key registered for a new node, or for an existing one), and
// verify must report that chain, online, pinned to the gateway's key or
// relying on the trail's key registry. An auditor verifies an hour after
// the forgery, as the real one would, long past the grace a live
// writer's unsigned tail gets.
func TestForgedChainAsAppRole(t *testing.T) {
	ownKey := func() ed25519.PrivateKey {
		_, k, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	in2099 := time.Date(2099, 1, 1, 12, 0, 0, 0, time.UTC)
	tests := []struct {
		name string
		// forge writes the forged chain as the attacker; node is the
		// legitimate gateway's node.
		forge func(a attacker, chain, node string)
		// pinned verifies with the gateway's public key pinned; otherwise
		// verify relies on the trail's key registry.
		pinned bool
	}{
		{
			name:   "rows dated 2099/pinned",
			pinned: true,
			forge:  func(a attacker, chain, node string) { a.forgeChain(chain, "mallory-gw", 3, in2099) },
		},
		{
			name:  "rows dated 2099/registry",
			forge: func(a attacker, chain, node string) { a.forgeChain(chain, "mallory-gw", 3, in2099) },
		},
		{
			name:   "checkpoints signed by the attacker's key/pinned",
			pinned: true,
			forge: func(a attacker, chain, node string) {
				a.sign(chain, a.forgeChain(chain, "mallory-gw", 3, time.Now()), ownKey())
			},
		},
		{
			name: "checkpoints signed by the attacker's key/registry",
			forge: func(a attacker, chain, node string) {
				a.sign(chain, a.forgeChain(chain, "mallory-gw", 3, time.Now()), ownKey())
			},
		},
		{
			name:   "attacker's key registered for a new node/pinned",
			pinned: true,
			forge: func(a attacker, chain, node string) {
				k := ownKey()
				a.register("mallory-gw", chain, k)
				a.sign(chain, a.forgeChain(chain, "mallory-gw", 3, time.Now()), k)
			},
		},
		{
			name: "attacker's key registered for the gateway's node/registry",
			forge: func(a attacker, chain, node string) {
				k := ownKey()
				a.register(node, chain, k)
				a.sign(chain, a.forgeChain(chain, node, 3, time.Now()), k)
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dsn, _ := newDB(t)
			ctx := context.Background()
			gw := testStore(t, dsn, nil)
			for i := range 3 {
				if err := gw.Record(ctx, lifecycle(i, "honest-run")); err != nil {
					t.Fatal(err)
				}
			}
			if err := gw.Close(ctx); err != nil { // a final checkpoint: the honest chain is whole
				t.Fatal(err)
			}
			chain := "forged-" + uuid.NewString()[:8]
			tt.forge(asAppRole(t, dsn), chain, gw.cfg.Node)

			later := time.Now().Add(time.Hour)
			ro := readOnly(t, dsn, func(c *Config) {
				c.Clock = func() time.Time { return later }
				if tt.pinned {
					c.Anchors.Pinned = []ed25519.PublicKey{gw.PublicKey()}
				}
			})
			rep, err := ro.Verifier().Verify(ctx, sandgate.VerifyRange{})
			if err != nil {
				t.Fatal(err)
			}
			var named []sandgate.VerifyProblem
			for _, p := range rep.Problems {
				if p.ChainID == chain {
					named = append(named, p)
				}
			}
			if rep.OK || len(named) == 0 {
				t.Fatalf("verify accepted the forged chain %s: ok=%v, problems %+v", chain, rep.OK, rep.Problems)
			}
		})
	}
}

// TestAppRoleCannotChooseRecordedAt: whatever the application role
// inserts, recorded_at is the database's clock, never a time the inserter
// picked.
func TestAppRoleCannotChooseRecordedAt(t *testing.T) {
	dsn, db := newDB(t)
	a := asAppRole(t, dsn)
	rows := a.forgeChain("forged-time", "mallory-gw", 2, time.Date(2099, 1, 1, 0, 0, 0, 0, time.UTC))
	var dbNow time.Time
	if err := db.QueryRow(`SELECT now()`).Scan(&dbNow); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.recordedAt.After(dbNow) {
			t.Errorf("row %d stored with recorded_at %s, after the database's clock (%s): the inserter chose it", r.seq, r.recordedAt, dbNow)
		}
	}
}

// TestRegistryResidualRiskIsVisible: the application role can register a
// key for a node name no gateway uses yet and sign a chain of its own with
// it, registration event and all; the registry cannot tell that from a new
// gateway. Verify lists the key with its node and first use, and once
// auditors pin the gateways' keys it reports it.
func TestRegistryResidualRiskIsVisible(t *testing.T) {
	dsn, _ := newDB(t)
	ctx := context.Background()
	gw := testStore(t, dsn, nil)
	if err := gw.Record(ctx, lifecycle(0, "honest-run")); err != nil {
		t.Fatal(err)
	}
	if err := gw.Close(ctx); err != nil {
		t.Fatal(err)
	}
	a := asAppRole(t, dsn)
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	pub := k.Public().(ed25519.PublicKey)
	a.register("mallory-gw", "forged-new-node", k)
	var at time.Time
	if err := a.db.QueryRow(`SELECT first_used_at FROM audit_keys WHERE key_id = $1`, proof.KeyID(pub)).Scan(&at); err != nil {
		t.Fatal(err)
	}
	reg := proof.KeyRecord{Node: "mallory-gw", KeyID: proof.KeyID(pub), PublicKey: hex.EncodeToString(pub), FirstUsedAt: at,
		ChainID: "forged-new-node", Source: proof.KeySourceWriter}
	rows := a.forgeChain("forged-new-node", "mallory-gw", 3, time.Now(), sandgate.Event{
		Type: sandgate.EventAuditKeyRegistered, Outcome: "registered", Node: "mallory-gw", Payload: reg.Payload(),
	})
	a.sign("forged-new-node", rows, k)

	later := time.Now().Add(time.Hour)
	rep, err := readOnly(t, dsn, func(c *Config) { c.Clock = func() time.Time { return later } }).Verifier().VerifyTrail(ctx, sandgate.VerifyRange{})
	if err != nil {
		t.Fatal(err)
	}
	var listed *proof.KeyRecord
	for i := range rep.Keys {
		if rep.Keys[i].KeyID == proof.KeyID(pub) {
			listed = &rep.Keys[i]
		}
	}
	if listed == nil || listed.Node != "mallory-gw" || !listed.FirstUsedAt.Equal(at) || listed.Pinned {
		t.Fatalf("keys = %+v; want the attacker's key listed for node mallory-gw, first used %s, not pinned", rep.Keys, at)
	}

	rep, err = readOnly(t, dsn, func(c *Config) {
		c.Clock = func() time.Time { return later }
		c.Anchors.Pinned = []ed25519.PublicKey{gw.PublicKey()}
	}).Verifier().VerifyTrail(ctx, sandgate.VerifyRange{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(map[string]int{proof.ProblemUntrustedKey: 1}, problemKinds(rep)); diff != "" || rep.Problems[0].ChainID != "forged-new-node" {
		t.Errorf("problems with the gateway's key pinned (-want +got):\n%s\n%+v", diff, rep.Problems)
	}
}

// TestForgedChainOffline: an export taken after the forgery, verified
// offline with the gateway's key pinned, reports the forged chain; so does
// one verified with no key at all, which also says that nothing vouches
// for the export's keys. The gateway wrote its chain an hour before.
func TestForgedChainOffline(t *testing.T) {
	dsn, _ := newDB(t)
	ctx := context.Background()
	anHourAgo := func() time.Time { return time.Now().Add(-time.Hour) }
	gw := testStore(t, dsn, func(c *Config) { c.Clock = anHourAgo })
	for i := range 3 {
		if err := gw.Record(ctx, lifecycle(i, "honest-run")); err != nil {
			t.Fatal(err)
		}
	}
	if err := gw.Close(ctx); err != nil {
		t.Fatal(err)
	}
	a := asAppRole(t, dsn)
	_, k, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	a.sign("forged-offline", a.forgeChain("forged-offline", "mallory-gw", 3, time.Now()), k)

	ro := readOnly(t, dsn, nil)
	var events, cps bytes.Buffer
	if err := ro.Reader().Export(ctx, sandgate.AuditFilter{}, sandgate.ExportJSONL, &events); err != nil {
		t.Fatal(err)
	}
	if err := ro.Reader().ExportCheckpoints(ctx, "", &cps); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		trusted []ed25519.PublicKey
		want    map[string]int
	}{
		{"pinned", []ed25519.PublicKey{gw.PublicKey()}, map[string]int{proof.ProblemUntrustedKey: 1, proof.ProblemUnsignedChain: 1}},
		{"no key", nil, map[string]int{proof.ProblemUnpinnedKeys: 1, proof.ProblemUnknownKey: 1, proof.ProblemUnsignedChain: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := proof.VerifyExport(bytes.NewReader(events.Bytes()), bytes.NewReader(cps.Bytes()), tt.trusted...)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, problemKinds(rep)); diff != "" {
				t.Errorf("problems (-want +got):\n%s\n%+v", diff, rep.Problems)
			}
			for _, p := range rep.Problems {
				if p.ChainID != "forged-offline" && p.Kind != proof.ProblemUnpinnedKeys {
					t.Errorf("problem outside the forged chain: %+v", p)
				}
			}
			if len(rep.Keys) != 1 || rep.Keys[0].KeyID != proof.KeyID(gw.PublicKey()) || !rep.Keys[0].Known {
				t.Errorf("keys = %+v, want the gateway's registration, from the export", rep.Keys)
			}
		})
	}
}

// TestMigrationKeepsTrailsVerifying: a trail written before migration 5
// verifies after it, on its node's host (the keys that signed its
// checkpoints are registered from them, so the node's local key counts),
// while a chain the application
// role added before it, dated 2099, is reported online and offline: rows
// in the future, vouched for by no known key. The 2099 rows, which sat in
// the default partition, are in their month's partition afterwards.
func TestMigrationKeepsTrailsVerifying(t *testing.T) {
	db := audittest.OpenDB(t, audittest.NewDatabase(t))
	ctx := context.Background()
	if _, err := migrations.UpTo(ctx, db, 4); err != nil {
		t.Fatal(err)
	}
	var dsn string
	if err := db.QueryRow(`SELECT current_database()`).Scan(&dsn); err != nil {
		t.Fatal(err)
	}
	dsn, err := audittest.WithDatabase(audittest.AdminDSN(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	// The honest gateway of yesterday: three rows, a final checkpoint.
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	owner := attacker{t: t, db: db} // as the owner, it writes rows as the old writer did
	yesterday := time.Now().Add(-24 * time.Hour).UTC().Truncate(time.Microsecond)
	honest := owner.forgeChain("gw-old-1", "gw-old", 3, yesterday)
	owner.sign("gw-old-1", honest, key)
	// The forger, as the application role, before the migration.
	in2099 := time.Date(2099, 1, 1, 12, 0, 0, 0, time.UTC)
	forged := asAppRole(t, dsn).forgeChain("forged-2099", "mallory-gw", 3, in2099)
	if !forged[0].recordedAt.Equal(in2099) {
		t.Fatalf("before migration 5 the forged row was stored at %s, want the 2099 it chose", forged[0].recordedAt)
	}
	if got := count(t, db, `SELECT count(*) FROM audit_events_default`); got != 3 {
		t.Fatalf("rows in the default partition before the migration = %d, want the 3 forged ones", got)
	}

	if _, err := migrations.Up(ctx, db); err != nil {
		t.Fatalf("Up: %v", err)
	}
	if got := count(t, db, `SELECT count(*) FROM audit_events_default`); got != 0 {
		t.Errorf("rows in the default partition after the migration = %d, want 0", got)
	}
	if got := count(t, db, `SELECT count(*) FROM audit_events_2099_01`); got != 3 {
		t.Errorf("rows in audit_events_2099_01 = %d, want the 3 forged ones", got)
	}

	pub := key.Public().(ed25519.PublicKey)
	rep, err := readOnly(t, dsn, func(c *Config) { c.Anchors.Local = &proof.LocalKey{Node: "gw-old", Key: pub} }).Verifier().VerifyTrail(ctx, sandgate.VerifyRange{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int{proof.ProblemFutureRow: 1, proof.ProblemUnsignedChain: 1}
	if diff := cmp.Diff(want, problemKinds(rep)); diff != "" {
		t.Errorf("problems (-want +got):\n%s\n%+v", diff, rep.Problems)
	}
	for _, p := range rep.Problems {
		if p.ChainID != "forged-2099" {
			t.Errorf("problem outside the forged chain: %+v", p)
		}
	}
	if len(rep.Keys) != 1 || rep.Keys[0].KeyID != proof.KeyID(pub) || rep.Keys[0].Node != "gw-old" ||
		rep.Keys[0].Source != proof.KeySourceMigration || !rep.Keys[0].Known {
		t.Errorf("keys = %+v, want gw-old's, registered by the migration", rep.Keys)
	}

	ro := readOnly(t, dsn, nil)
	var events, cps bytes.Buffer
	if err := ro.Reader().Export(ctx, sandgate.AuditFilter{}, sandgate.ExportCSV, &events); err != nil {
		t.Fatal(err)
	}
	if err := ro.Reader().ExportCheckpoints(ctx, "", &cps); err != nil {
		t.Fatal(err)
	}
	off, err := proof.VerifyExport(&events, &cps, pub)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, problemKinds(off)); diff != "" {
		t.Errorf("offline problems (-want +got):\n%s\n%+v", diff, off.Problems)
	}
}
