package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
	"github.com/sandgate/sandgate/sandgatetest"
)

// seedTrail writes a small trail: two runs of three events, a denial and
// a policy load, each with its own commit.
func seedTrail(t *testing.T, s *Store) {
	t.Helper()
	code := 0
	evs := []sandgate.Event{
		{Type: sandgate.EventAdmissionAllowed, RunID: "r1", DecisionID: "d1", CorrelationID: "c1", Actor: "alice", Team: "payments", Outcome: "allowed", PolicyRevision: "sha256:aa"},
		{Type: sandgate.EventContainerStarted, RunID: "r1", CorrelationID: "c1", ContainerID: "ctr1", Actor: "alice", Team: "payments"},
		{Type: sandgate.EventContainerExited, RunID: "r1", CorrelationID: "c1", Actor: "alice", Team: "payments", Outcome: "succeeded", ExitCode: &code,
			Payload: map[string]any{"stdout": map[string]any{"bytes": 6, "sha256": "5891b5"}}},
		{Type: sandgate.EventAdmissionDenied, DecisionID: "d2", CorrelationID: "c2", Actor: "bob", Team: "research", Outcome: "denied",
			Payload: map[string]any{"violations": []any{map[string]any{"rule": "no_privileged"}}}},
		{Type: sandgate.EventAdmissionAllowed, RunID: "r3", DecisionID: "d3", CorrelationID: "c3", Actor: "bob", Team: "research", Outcome: "allowed"},
		{Type: sandgate.EventPolicyLoaded, Actor: "system", PolicyRevision: "sha256:bb"},
	}
	for _, ev := range evs {
		if err := s.Record(context.Background(), ev); err != nil {
			t.Fatalf("Record: %v", err)
		}
	}
}

func types(recs []sandgate.AuditRecord) []string {
	var out []string
	for _, r := range recs {
		out = append(out, string(r.Type))
	}
	return out
}

// TestQueryFilters: each filter selects the right events, oldest first.
func TestQueryFilters(t *testing.T) {
	dsn, _ := newDB(t)
	s := testStore(t, dsn, nil)
	seedTrail(t, s)
	tests := []struct {
		name string
		f    sandgate.AuditFilter
		want []string
	}{
		{"all", sandgate.AuditFilter{}, []string{"admission.allowed", "container.started", "container.exited", "admission.denied", "admission.allowed", "policy.loaded"}},
		{"run", sandgate.AuditFilter{RunID: "r1"}, []string{"admission.allowed", "container.started", "container.exited"}},
		{"correlation", sandgate.AuditFilter{CorrelationID: "c2"}, []string{"admission.denied"}},
		{"decision", sandgate.AuditFilter{DecisionID: "d3"}, []string{"admission.allowed"}},
		{"type", sandgate.AuditFilter{Type: sandgate.EventAdmissionAllowed}, []string{"admission.allowed", "admission.allowed"}},
		{"actor and team", sandgate.AuditFilter{Actor: "bob", Team: "research"}, []string{"admission.denied", "admission.allowed"}},
		{"types", sandgate.AuditFilter{Types: []sandgate.EventType{sandgate.EventAdmissionDenied, sandgate.EventPolicyLoaded}},
			[]string{"admission.denied", "policy.loaded"}},
		{"types and team", sandgate.AuditFilter{Types: []sandgate.EventType{sandgate.EventAdmissionAllowed, sandgate.EventAdmissionDenied}, Team: "research"},
			[]string{"admission.denied", "admission.allowed"}},
		{"outcome", sandgate.AuditFilter{Outcome: "denied"}, []string{"admission.denied"}},
		{"until the past", sandgate.AuditFilter{Until: time.Now().Add(-time.Hour)}, nil},
		{"since the past", sandgate.AuditFilter{Since: time.Now().Add(-time.Hour), Type: sandgate.EventPolicyLoaded}, []string{"policy.loaded"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			recs, next, err := s.Reader().Query(context.Background(), tt.f)
			if err != nil {
				t.Fatalf("Query: %v", err)
			}
			if next != "" {
				t.Errorf("next cursor %q on the only page", next)
			}
			if diff := cmp.Diff(tt.want, types(recs)); diff != "" {
				t.Errorf("types (-want +got):\n%s", diff)
			}
		})
	}
	recs, _, err := s.Reader().Query(context.Background(), sandgate.AuditFilter{Type: sandgate.EventContainerExited})
	if err != nil || len(recs) != 1 {
		t.Fatalf("Query exited = %v, %v", recs, err)
	}
	got := recs[0]
	if got.ExitCode == nil || *got.ExitCode != 0 || got.Node != "test-node" || got.Seq != 3 || len(got.Hash) != 64 {
		t.Errorf("record = %+v", got)
	}
	if !strings.Contains(got.Body, `"stdout":{"bytes":6,"sha256":"5891b5"}`) {
		t.Errorf("body %s does not hold the canonical payload", got.Body)
	}
}

// TestQueryPaging: keyset pages cover everything once; a bad cursor is
// INVALID-REQUEST.
func TestQueryPaging(t *testing.T) {
	dsn, _ := newDB(t)
	s := testStore(t, dsn, nil)
	for i := range 23 {
		s.Emit(lifecycle(i, "paged"))
	}
	if err := s.Record(context.Background(), lifecycle(23, "paged")); err != nil {
		t.Fatal(err)
	}
	var seqs []int64
	cursor, pages := "", 0
	for {
		recs, next, err := s.Reader().Query(context.Background(), sandgate.AuditFilter{RunID: "paged", Limit: 5, Cursor: cursor})
		if err != nil {
			t.Fatalf("Query: %v", err)
		}
		pages++
		for _, r := range recs {
			seqs = append(seqs, r.Seq)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if len(seqs) != 24 || pages != 5 {
		t.Fatalf("got %d events in %d pages, want 24 in 5", len(seqs), pages)
	}
	for i, s := range seqs {
		if s != int64(i+1) {
			t.Fatalf("seqs = %v, want 1..24 in order", seqs)
		}
	}
	for _, bad := range []string{"!!", "bm90IGpzb24", "eyJ4IjoxfQ"} {
		_, _, err := s.Reader().Query(context.Background(), sandgate.AuditFilter{Cursor: bad})
		if !isCode(err, sandgate.CodeInvalidRequest) {
			t.Errorf("Query(cursor %q) = %v, want INVALID-REQUEST", bad, err)
		}
	}
	if _, _, err := s.Reader().Query(context.Background(), sandgate.AuditFilter{Limit: -1}); !isCode(err, sandgate.CodeInvalidRequest) {
		t.Errorf("Query(limit -1) = %v, want INVALID-REQUEST", err)
	}
}

// TestQueryNewestFirst: with Newest the pages run from the newest event
// back to the oldest, each event once; a cursor of one order is refused
// by the other (it would skip or repeat events).
func TestQueryNewestFirst(t *testing.T) {
	dsn, _ := newDB(t)
	s := testStore(t, dsn, nil)
	for i := range 12 {
		if err := s.Record(context.Background(), lifecycle(i, "newest")); err != nil {
			t.Fatal(err)
		}
	}
	var seqs []int64
	cursor, oldestCursor := "", ""
	for {
		recs, next, err := s.Reader().Query(context.Background(), sandgate.AuditFilter{RunID: "newest", Limit: 5, Cursor: cursor, Newest: true})
		if err != nil {
			t.Fatalf("Query: %v", err)
		}
		for _, r := range recs {
			seqs = append(seqs, r.Seq)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if len(seqs) != 12 {
		t.Fatalf("got %d events, want 12: %v", len(seqs), seqs)
	}
	for i, sq := range seqs {
		if sq != int64(12-i) {
			t.Fatalf("seqs = %v, want 12..1", seqs)
		}
	}
	_, oldestCursor, err := s.Reader().Query(context.Background(), sandgate.AuditFilter{RunID: "newest", Limit: 5})
	if err != nil || oldestCursor == "" {
		t.Fatalf("oldest first: cursor %q, %v", oldestCursor, err)
	}
	if _, _, err := s.Reader().Query(context.Background(), sandgate.AuditFilter{RunID: "newest", Cursor: oldestCursor, Newest: true}); !isCode(err, sandgate.CodeInvalidRequest) {
		t.Errorf("newest first with an oldest-first cursor = %v, want INVALID-REQUEST", err)
	}
	if _, _, err := s.Reader().Query(context.Background(), sandgate.AuditFilter{RunID: "newest", Cursor: cursor}); !isCode(err, sandgate.CodeInvalidRequest) {
		t.Errorf("oldest first with a newest-first cursor = %v, want INVALID-REQUEST", err)
	}
}

// TestExportAndOfflineVerify: an export with its checkpoints verifies
// offline (JSONL and CSV); tampered lines, a dropped tail or another key
// are caught.
func TestExportAndOfflineVerify(t *testing.T) {
	dsn, _ := newDB(t)
	s := testStore(t, dsn, func(c *Config) { c.CheckpointEvery = 5 })
	seedTrail(t, s)
	for i := range 20 {
		if err := s.Record(context.Background(), lifecycle(i, "more")); err != nil {
			t.Fatal(err)
		}
	}
	pub := s.PublicKey()
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	ro := readOnly(t, dsn, nil)
	var jsonl, csvOut, cps bytes.Buffer
	if err := ro.Reader().Export(context.Background(), sandgate.AuditFilter{}, sandgate.ExportJSONL, &jsonl); err != nil {
		t.Fatalf("Export jsonl: %v", err)
	}
	if err := ro.Reader().Export(context.Background(), sandgate.AuditFilter{}, sandgate.ExportCSV, &csvOut); err != nil {
		t.Fatalf("Export csv: %v", err)
	}
	if err := ro.Reader().ExportCheckpoints(context.Background(), "", &cps); err != nil {
		t.Fatalf("ExportCheckpoints: %v", err)
	}
	if err := ro.Reader().Export(context.Background(), sandgate.AuditFilter{}, "xml", &bytes.Buffer{}); !isCode(err, sandgate.CodeInvalidRequest) {
		t.Errorf("Export(xml) = %v, want INVALID-REQUEST", err)
	}
	lines := strings.Split(strings.TrimSpace(jsonl.String()), "\n")
	if len(lines) != 27 { // 26 events and the key's registration
		t.Fatalf("export has %d lines, want 27", len(lines))
	}
	_, otherKey, _ := ed25519.GenerateKey(rand.Reader)

	replaceLine := func(i int, f func(map[string]any)) string {
		out := append([]string(nil), lines...)
		var m map[string]any
		if err := json.Unmarshal([]byte(out[i]), &m); err != nil {
			t.Fatal(err)
		}
		f(m)
		b, _ := json.Marshal(m)
		out[i] = string(b)
		return strings.Join(out, "\n") + "\n"
	}
	tests := []struct {
		name   string
		events string
		key    ed25519.PublicKey
		want   map[string]int
	}{
		{"jsonl intact", jsonl.String(), pub, map[string]int{}},
		{"csv intact", csvOut.String(), pub, map[string]int{}},
		{"out of order", strings.Join(append(append([]string{}, lines[10:]...), lines[:10]...), "\n"), pub, map[string]int{}},
		{"column changed", replaceLine(2, func(m map[string]any) { m["actor"] = "mallory" }), pub, map[string]int{proof.ProblemBodyMismatch: 1}},
		{"body changed", replaceLine(3, func(m map[string]any) {
			m["body"] = strings.Replace(m["body"].(string), "bob", "eve", 1)
		}), pub, map[string]int{proof.ProblemHashMismatch: 1, proof.ProblemBodyMismatch: 1}},
		{"line dropped", strings.Join(append(append([]string{}, lines[:7]...), lines[8:]...), "\n"), pub, map[string]int{proof.ProblemSeqGap: 1}},
		{"tail dropped", strings.Join(lines[:20], "\n"), pub, map[string]int{proof.ProblemMissingTail: 1}},
		{"garbage line", jsonl.String() + "{not json\n", pub, map[string]int{proof.ProblemBadInput: 1}},
		{"other key", jsonl.String(), otherKey.Public().(ed25519.PublicKey), map[string]int{proof.ProblemUntrustedKey: 1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rep, err := proof.VerifyExport(strings.NewReader(tt.events), bytes.NewReader(cps.Bytes()), tt.key)
			if err != nil {
				t.Fatalf("VerifyExport: %v", err)
			}
			if diff := cmp.Diff(tt.want, problemKinds(rep)); diff != "" {
				t.Errorf("problems (-want +got):\n%s\n%v", diff, rep.Problems)
			}
			if rep.OK != (len(tt.want) == 0) {
				t.Errorf("OK = %v with problems %v", rep.OK, rep.Problems)
			}
		})
	}
}

// TestIdleCheckpoints: an idle writer re-signs its head every interval,
// each checkpoint signing the previous one.
func TestIdleCheckpoints(t *testing.T) {
	dsn, db := newDB(t)
	s := testStore(t, dsn, func(c *Config) { c.CheckpointInterval = 30 * time.Millisecond })
	if err := s.Record(context.Background(), lifecycle(1, "idle")); err != nil {
		t.Fatal(err)
	}
	sandgatetest.WaitFor(t, "idle checkpoints", 5*time.Second, func() bool {
		// The event, then the key's registration before the first
		// checkpoint: every checkpoint signs seq 2.
		return count(t, db, "SELECT count(*) FROM audit_checkpoints WHERE seq = 2") >= 3
	})
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	rep, err := readOnly(t, dsn, func(c *Config) { c.Anchors.Pinned = append(c.Anchors.Pinned, s.PublicKey()) }).Verifier().Verify(context.Background(), sandgate.VerifyRange{})
	if err != nil || !rep.OK {
		t.Fatalf("Verify = %+v, %v", rep, err)
	}
}

// TestChainHashFormat pins the documented hash input, so an auditor's own
// implementation and ours agree: SHA-256(prev ‖ uint16be(len(chain)) ‖
// chain ‖ uint64be(seq) ‖ body), prev all zeros for the first row.
func TestChainHashFormat(t *testing.T) {
	prev := bytes.Repeat([]byte{0xab}, 32)
	tests := []struct {
		name  string
		prev  []byte
		input []byte
	}{
		{"linked", prev, append(append(append(append(append([]byte{}, prev...), 0, 6), "node-1"...), 0, 0, 0, 0, 0, 0, 0, 7), `{"a":1}`...)},
		{"first", nil, append(append(append(append(make([]byte, 32), 0, 6), "node-1"...), 0, 0, 0, 0, 0, 0, 0, 7), `{"a":1}`...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			want := sha256.Sum256(tt.input)
			if diff := cmp.Diff(want[:], proof.ChainHash(tt.prev, "node-1", 7, []byte(`{"a":1}`))); diff != "" {
				t.Errorf("ChainHash (-want +got):\n%s", diff)
			}
		})
	}
}

// TestCanonicalBody: sorted keys, no HTML escaping, microsecond UTC times,
// empty fields left out, NUL characters made storable.
func TestCanonicalBody(t *testing.T) {
	code := 137
	ev := sandgate.Event{
		ID: "0190f5d2-0000-7000-8000-000000000001", Type: sandgate.EventContainerOOMKilled,
		Time:  time.Date(2026, 1, 2, 3, 4, 5, 123456789, time.FixedZone("x", 3600)),
		RunID: "r<1>", ExitCode: &code, Actor: "a\x00b",
		Payload: map[string]any{"z": 1, "a": map[string]any{"y": "&", "b": 2.5}},
	}
	_, body, err := canonicalEvent(ev, time.Date(2026, 1, 2, 3, 4, 6, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	want := `{"actor":"a` + "\uFFFD" + `b","event_id":"0190f5d2-0000-7000-8000-000000000001","event_time":"2026-01-02T02:04:05.123456Z","exit_code":137,"payload":{"a":{"b":2.5,"y":"&"},"z":1},"recorded_at":"2026-01-02T03:04:06.000000Z","run_id":"r<1>","type":"container.oom_killed"}`
	if diff := cmp.Diff(want, string(body)); diff != "" {
		t.Errorf("body (-want +got):\n%s", diff)
	}
}
