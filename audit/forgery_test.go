package audit

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"database/sql"
	"encoding/hex"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/sandgate/sandgate"
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
	prev := make([]byte, HashSize)
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
		payload, err := payloadOf(body)
		if err != nil {
			a.t.Fatal(err)
		}
		var p any
		if payload != nil {
			p = string(payload)
		}
		h := ChainHash(prev, chain, seq, body)
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
	cp := signCheckpoint(key, chain, last.seq, last.hash, time.Now(), true, nil)
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
					c.TrustedKeys = []ed25519.PublicKey{gw.PublicKey()}
				}
			})
			rep, err := ro.Verify(ctx, sandgate.VerifyRange{})
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
