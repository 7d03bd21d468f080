package audit

import (
	"context"
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
)

// TestVerifyCatchesColumnTampering: with the triggers disabled, each kind
// of column (text, nulled text, uuid, time, exit code, and the payload's
// strings, numbers, members, all of it) changed on its own row is reported
// as body_mismatch at that row and nowhere else, by the online verifier
// that now compares canonical bytes instead of decoding every body. A
// payload number Postgres spells otherwise (5 as 5.0) is the same value,
// and is not reported.
func TestVerifyCatchesColumnTampering(t *testing.T) {
	tests := []struct {
		name, set string
		caught    bool
	}{
		{"text", "actor = 'mallory'", true},
		{"text nulled", "team = NULL", true},
		{"text set where there was none", "decision_id = 'd-forged'", true},
		{"type", "type = 'container.started'", true},
		{"uuid", "event_id = gen_random_uuid()", true},
		{"time", "event_time = event_time + interval '1 microsecond'", true},
		{"exit code", "exit_code = exit_code + 1", true},
		{"exit code nulled", "exit_code = NULL", true},
		{"payload nested number", `payload = jsonb_set(payload, '{stdout,bytes}', '13')`, true},
		{"payload string", `payload = payload || '{"note": "<&>!"}'`, true},
		{"payload member removed", `payload = payload - 'note'`, true},
		{"payload member added", `payload = payload || '{"extra": [1]}'`, true},
		{"payload nulled", `payload = NULL`, true},
		{"payload emptied", `payload = '{}'`, true},
		{"payload number respelled", `payload = jsonb_set(payload, '{stdout,bytes}', '12.0')`, false},
	}
	dsn, db := newDB(t)
	s := testStore(t, dsn, nil)
	for i := range len(tests) + 2 {
		s.Emit(lifecycle(i, "r1"))
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	ro := readOnly(t, dsn, func(c *Config) { c.Anchors.Pinned = append(c.Anchors.Pinned, s.PublicKey()) })
	rep, err := ro.Verifier().Verify(context.Background(), sandgate.VerifyRange{})
	if err != nil || !rep.OK {
		t.Fatalf("before tampering: Verify = %+v, %v", rep, err)
	}
	var seqs []int64
	rows, err := db.Query(`SELECT seq FROM audit_events WHERE type = 'container.exited' ORDER BY seq`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var seq int64
		if err := rows.Scan(&seq); err != nil {
			t.Fatal(err)
		}
		seqs = append(seqs, seq)
	}
	if err := rows.Close(); err != nil || len(seqs) < len(tests)+1 {
		t.Fatalf("%d lifecycle rows, %v", len(seqs), err)
	}
	want := map[int64]string{}
	var stmts []string
	for i, tt := range tests {
		seq := seqs[i+1] // the first stays as it was
		stmts = append(stmts, fmt.Sprintf("UPDATE audit_events SET %s WHERE seq = %d", tt.set, seq))
		if tt.caught {
			want[seq] = tt.name + ": " + proof.ProblemBodyMismatch
		}
	}
	tamper(t, db, stmts...)
	rep, err = ro.Verifier().Verify(context.Background(), sandgate.VerifyRange{})
	if err != nil {
		t.Fatal(err)
	}
	got := map[int64]string{}
	for _, p := range rep.Problems {
		for i, seq := range seqs[1 : len(tests)+1] {
			if p.Seq == seq {
				got[p.Seq] = tests[i].name + ": " + p.Kind
			}
		}
		if _, ok := got[p.Seq]; !ok {
			got[p.Seq] = "untampered row: " + p.Kind
		}
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("problems by seq (-want +got):\n%s\n%+v", diff, rep.Problems)
	}
}
