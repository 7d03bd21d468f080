package audit

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"database/sql"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
)

// TestAppendOnlyEvenForOwner: UPDATE, DELETE and TRUNCATE on the trail's
// tables are refused for the tables' owner (a superuser here), also with
// session_replication_role = replica, which silences ordinary triggers.
func TestAppendOnlyEvenForOwner(t *testing.T) {
	dsn, db := newDB(t)
	s := testStore(t, dsn, nil)
	if err := s.Record(context.Background(), lifecycle(1, "r1")); err != nil {
		t.Fatalf("Record: %v", err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	tests := []struct {
		name string
		sql  string
	}{
		{"update event", "UPDATE audit_events SET actor = 'mallory'"},
		{"delete event", "DELETE FROM audit_events"},
		{"truncate events", "TRUNCATE audit_events"},
		{"update checkpoint", "UPDATE audit_checkpoints SET seq = 0"},
		{"delete checkpoint", "DELETE FROM audit_checkpoints"},
		{"truncate checkpoints", "TRUNCATE audit_checkpoints"},
		{"delete chain", "DELETE FROM audit_chains"},
		{"truncate chains", "TRUNCATE audit_chains CASCADE"},
	}
	for _, tt := range tests {
		for _, role := range []string{"origin", "replica"} {
			t.Run(tt.name+"/"+role, func(t *testing.T) {
				conn, err := db.Conn(context.Background())
				if err != nil {
					t.Fatal(err)
				}
				defer conn.Close()
				if _, err := conn.ExecContext(context.Background(), "SET session_replication_role = "+role); err != nil {
					t.Fatal(err)
				}
				_, err = conn.ExecContext(context.Background(), tt.sql)
				if err == nil || !strings.Contains(err.Error(), "append-only") {
					t.Fatalf("%s: err = %v, want the append-only refusal", tt.sql, err)
				}
			})
		}
	}
	if got := count(t, db, "SELECT count(*) FROM audit_events"); got != 2 {
		t.Fatalf("rows = %d after refused changes, want 2 (the event and the key's registration)", got)
	}
}

// tamper runs statements with the append-only triggers disabled, as a
// superuser attacker would.
func tamper(t *testing.T, db *sql.DB, stmts ...string) {
	t.Helper()
	all := append([]string{
		"ALTER TABLE audit_events DISABLE TRIGGER USER",
		"ALTER TABLE audit_checkpoints DISABLE TRIGGER USER",
	}, stmts...)
	all = append(all,
		"ALTER TABLE audit_events ENABLE ALWAYS TRIGGER audit_events_no_update",
		"ALTER TABLE audit_events ENABLE ALWAYS TRIGGER audit_events_no_truncate",
		"ALTER TABLE audit_checkpoints ENABLE ALWAYS TRIGGER audit_checkpoints_no_update",
		"ALTER TABLE audit_checkpoints ENABLE ALWAYS TRIGGER audit_checkpoints_no_truncate")
	for _, q := range all {
		if _, err := db.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
}

// TestVerifyCatchesTampering: each way of changing the stored trail with
// the triggers disabled is reported, with the right kind at the right seq.
func TestVerifyCatchesTampering(t *testing.T) {
	tests := []struct {
		name  string
		stmts []string
		now   time.Duration // verify this long after the writes
		want  map[string]int
		seq   int64 // the first problem's seq
	}{
		{
			name:  "column changed",
			stmts: []string{"UPDATE audit_events SET actor = 'mallory' WHERE seq = 3"},
			want:  map[string]int{proof.ProblemBodyMismatch: 1},
			seq:   3,
		},
		{
			name:  "body changed",
			stmts: []string{`UPDATE audit_events SET body = convert_to(replace(convert_from(body, 'UTF8'), 'alice', 'mallo'), 'UTF8') WHERE seq = 4`},
			want:  map[string]int{proof.ProblemHashMismatch: 1, proof.ProblemBodyMismatch: 1},
			seq:   4,
		},
		{
			name:  "body and hash rewritten",
			stmts: []string{`UPDATE audit_events SET hash = sha256(prev_hash || '\x0000'::bytea) WHERE seq = 5`},
			want:  map[string]int{proof.ProblemHashMismatch: 1, proof.ProblemPrevHashMismatch: 1},
			seq:   5,
		},
		{
			name:  "row deleted in the middle",
			stmts: []string{"DELETE FROM audit_events WHERE seq = 7"},
			want:  map[string]int{proof.ProblemSeqGap: 1, proof.ProblemPrevHashMismatch: 0},
			seq:   7,
		},
		{
			name:  "newest rows deleted",
			stmts: []string{"DELETE FROM audit_events WHERE seq > 20"},
			want:  map[string]int{proof.ProblemMissingTail: 1},
			seq:   26,
		},
		{
			name:  "signed row replaced",
			stmts: []string{"DELETE FROM audit_events WHERE seq = 10"},
			want:  map[string]int{proof.ProblemSeqGap: 1},
			seq:   10,
		},
		{
			name: "newest rows and checkpoints deleted",
			stmts: []string{"DELETE FROM audit_events WHERE seq > 21",
				"DELETE FROM audit_checkpoints WHERE seq > 21"},
			now:  time.Hour,
			want: map[string]int{proof.ProblemStaleCheckpoint: 1},
			seq:  21,
		},
		{
			name:  "checkpoint deleted in the middle",
			stmts: []string{"DELETE FROM audit_checkpoints WHERE seq = 11"},
			want:  map[string]int{proof.ProblemCheckpointChain: 1},
			seq:   21,
		},
		{
			name:  "checkpoint forged",
			stmts: []string{`UPDATE audit_checkpoints SET head_hash = sha256('x'::bytea) WHERE seq = 21`},
			want:  map[string]int{proof.ProblemBadSignature: 1, proof.ProblemCheckpointMismatch: 1},
			seq:   21,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dsn, db := newDB(t)
			start := time.Now()
			s := testStore(t, dsn, func(c *Config) { c.CheckpointEvery = 10; c.MaxBatch = 5; c.CheckpointInterval = time.Minute })
			for i := range 25 {
				// One commit each, so checkpoints land at 11 (after the
				// key's registration at 11), 21 and 26 (final).
				if err := s.Record(context.Background(), lifecycle(i, "r1")); err != nil {
					t.Fatalf("Record: %v", err)
				}
			}
			if err := s.Close(context.Background()); err != nil {
				t.Fatalf("Close: %v", err)
			}
			at := start.Add(tt.now)
			ro := readOnly(t, dsn, func(c *Config) {
				c.Anchors.Pinned = append(c.Anchors.Pinned, s.PublicKey())
				c.Clock = func() time.Time { return at }
				c.CheckpointInterval = time.Minute
			})
			rep, err := ro.Verifier().Verify(context.Background(), sandgate.VerifyRange{})
			if err != nil || !rep.OK {
				t.Fatalf("before tampering: Verify = %+v, %v", rep, err)
			}
			tamper(t, db, tt.stmts...)
			rep, err = ro.Verifier().Verify(context.Background(), sandgate.VerifyRange{})
			if err != nil {
				t.Fatalf("Verify: %v", err)
			}
			if rep.OK {
				t.Fatalf("Verify OK after tampering")
			}
			got := problemKinds(rep)
			for k, n := range tt.want {
				if got[k] != n {
					t.Errorf("problems = %v, want %s ×%d", rep.Problems, k, n)
				}
			}
			if rep.Problems[0].Seq != tt.seq {
				t.Errorf("first problem at seq %d, want %d: %v", rep.Problems[0].Seq, tt.seq, rep.Problems)
			}
		})
	}
}

// TestVerifyUntrustedKey: checkpoints signed by another key than the one
// auditors pinned are reported. The node's local key, registered for its
// node, is trusted; the same key under another node name, or a key file
// no node of the trail registered (issue #26's stray key), vouches for
// nothing, and neither does the registry alone.
func TestVerifyUntrustedKey(t *testing.T) {
	dsn, _ := newDB(t)
	s := testStore(t, dsn, nil)
	s.Emit(lifecycle(1, "r"))
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	_, other, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	otherPub := other.Public().(ed25519.PublicKey)
	tests := []struct {
		name    string
		trusted []ed25519.PublicKey
		local   *proof.LocalKey
		want    map[string]int
	}{
		{"pinned to another key", []ed25519.PublicKey{otherPub}, nil, map[string]int{proof.ProblemUntrustedKey: 1}},
		{"pinned to the gateway's key", []ed25519.PublicKey{s.PublicKey()}, nil, map[string]int{}},
		{"the registry alone", nil, nil, map[string]int{proof.ProblemUnpinnedKeys: 1}},
		{"the local key, registered for its node", nil, &proof.LocalKey{Node: "test-node", Key: s.PublicKey()}, map[string]int{}},
		{"the local key under another node's name", nil, &proof.LocalKey{Node: "gw-9", Key: s.PublicKey()}, map[string]int{proof.ProblemUnpinnedKeys: 1}},
		{"a stray local key", nil, &proof.LocalKey{Node: "test-node", Key: otherPub}, map[string]int{proof.ProblemUnpinnedKeys: 1}},
		{"a stray local key beside a pinned one", []ed25519.PublicKey{s.PublicKey()}, &proof.LocalKey{Node: "test-node", Key: otherPub}, map[string]int{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := readOnly(t, dsn, func(c *Config) { c.Anchors.Pinned, c.Anchors.Local = tt.trusted, tt.local }).Verifier().VerifyTrail(context.Background(), sandgate.VerifyRange{})
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, problemKinds(rep)); diff != "" {
				t.Errorf("problems (-want +got):\n%s\n%v", diff, rep.Problems)
			}
			if len(rep.Keys) != 1 || rep.Keys[0].KeyID != proof.KeyID(s.PublicKey()) || !rep.Keys[0].Known || rep.Pinned != len(tt.trusted) {
				t.Errorf("keys = %+v, pinned %d; want the gateway's, known", rep.Keys, rep.Pinned)
			}
			if tt.local == nil {
				return
			}
			wantUsed := tt.local.Node == "test-node" && tt.local.Key.Equal(s.PublicKey())
			var found bool
			for _, a := range rep.Anchors {
				if a.Kind == proof.AnchorLocal {
					found = true
					if a.Used != wantUsed || a.KeyID != proof.KeyID(tt.local.Key) || a.Detail == "" {
						t.Errorf("local anchor = %+v, want used %t, with why", a, wantUsed)
					}
				}
			}
			if !found {
				t.Errorf("the report names no local anchor: %+v", rep.Anchors)
			}
		})
	}
}

// TestStoreAsAppRole: the whole Store works as the sandgate_app role
// (what serve runs as), and that role cannot change the trail. The run
// store's part is runstore's TestRunStoreAsAppRole.
func TestStoreAsAppRole(t *testing.T) {
	dsn, _ := newDB(t)
	appDSN := dsn + " role=sandgate_app"
	s := testStore(t, appDSN, nil)
	ctx := context.Background()
	if err := s.Record(ctx, lifecycle(1, "app")); err != nil {
		t.Fatalf("Record as sandgate_app: %v", err)
	}
	s.Emit(lifecycle(2, "app"))
	if err := s.Close(ctx); err != nil {
		t.Fatal(err)
	}
	ro := readOnly(t, appDSN, func(c *Config) { c.Anchors.Pinned = append(c.Anchors.Pinned, s.PublicKey()) })
	rep, err := ro.Verifier().Verify(ctx, sandgate.VerifyRange{})
	if err != nil || !rep.OK || rep.Checked != 3 { // two events and the key's registration
		t.Fatalf("Verify as sandgate_app = %+v, %v", rep, err)
	}
	if err := ro.db.Exec("UPDATE audit_events SET actor = 'x'").Error; err == nil || !strings.Contains(err.Error(), "42501") {
		t.Errorf("UPDATE as sandgate_app = %v, want permission denied", err)
	}
}

// TestVerifyOddPayloadText: payload text that is not valid UTF-8, holds a
// NUL, or needs escaping (in values and in keys) is stored so that verify
// finds every body canonical, and reads back cleaned. A body that wrote
// invalid UTF-8 as \ufffd escapes used to be reported as bad_body.
func TestVerifyOddPayloadText(t *testing.T) {
	dsn, _ := newDB(t)
	s := testStore(t, dsn, nil)
	odd := map[string]any{
		"invalid": "a\xffb", "nul": "a\x00b", "separators": "\u2028\u2029", "controls": "\b\f\n\r\t\x01\x7f",
		"html": "<a href='x'>&</a>", "key\xc3": "v", "nested": []any{map[string]any{"k": "\xe2\x80"}},
		"strings": []string{"ok", "bad\xfe"}, "labels": map[string]string{"t\x00": "\xff"},
	}
	// One event per field, so that no field's fallback covers another's,
	// and one with them all.
	i := 0
	for k, v := range odd {
		i++
		ev := lifecycle(i, "single")
		ev.Payload = map[string]any{k: v}
		s.Emit(ev)
	}
	ev := lifecycle(i+1, "r")
	ev.Payload = odd
	s.Emit(ev)
	dec := lifecycle(i+2, "r")
	dec.Type, dec.DecisionID, dec.Payload = sandgate.EventAdmissionAllowed, "d-1", odd
	if err := s.Record(context.Background(), dec); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	ro := readOnly(t, dsn, func(c *Config) { c.Anchors.Pinned = append(c.Anchors.Pinned, s.PublicKey()) })
	rep, err := ro.Verifier().Verify(context.Background(), sandgate.VerifyRange{})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Problems) > 0 {
		t.Fatalf("verify found problems in bodies with odd payload text: %+v", rep.Problems)
	}
	recs, _, err := ro.Reader().Query(context.Background(), sandgate.AuditFilter{RunID: "r"})
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 2 {
		t.Fatalf("got %d events, want 2", len(recs))
	}
	for _, rec := range recs {
		p := rec.Event.Payload
		if p["invalid"] != "a\uFFFDb" || p["nul"] != "a\uFFFDb" || p["separators"] != "\u2028\u2029" || p["html"] != "<a href='x'>&</a>" {
			t.Errorf("%s: payload read back as %q", rec.Event.Type, p)
		}
		if _, ok := p["key\uFFFD"]; !ok {
			t.Errorf("%s: key with invalid UTF-8 not read back cleaned: %q", rec.Event.Type, p)
		}
	}
}
