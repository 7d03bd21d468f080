package proof

import (
	"bytes"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
)

// trailRows returns n rows of one chain shaped like a run's lifecycle
// (the scale benchmark's events: a run.requested with its spec, an
// exit with output digests, events without payload), as the online
// verifier reads them: the columns with the payload decoded from its
// JSON (numbers as written), the body and the links.
func trailRows(tb testing.TB, n int) []*Row { return lifecycleRows(tb, "c", n) }

// lifecycleRows is trailRows for a chain of another name.
func lifecycleRows(tb testing.TB, chain string, n int) []*Row {
	tb.Helper()
	at := time.Date(2026, 11, 28, 7, 0, 0, 0, time.UTC)
	spec := map[string]any{"image": "sandgate/sandbox:latest", "command": []any{"sh", "-c", "make test"},
		"env": map[string]any{"CI": "hmac-sha256:3c1f"}, "user": "10001:10001", "network": "none", "read_only_rootfs": true,
		"resources":       map[string]any{"memory_mb": 512, "cpus": 1, "pids": 256, "tmpfs_mb": 100, "nofile": 1024},
		"timeout_seconds": 1800, "output_limit_bytes": 1048576, "labels": map[string]any{"ticket": "ENG-1 <\"quoted\">\n"}}
	payloads := []map[string]any{
		{"operation": "run", "via": "api", "principal": map[string]any{"name": "alice", "team": "t1", "roles": []any{"submitter"}, "method": "token"},
			"input": map[string]any{"api_version": "sandgate/v1", "operation": "run", "request": spec}},
		{"violations": []any{}, "warnings": []any{}, "mutations": []any{}},
		{"image": "sandgate/sandbox:latest", "image_id": "sha256:4b1c"},
		nil,
		{"duration_ms": 1200, "ratio": 0.25, "stdout": map[string]any{"bytes": 1024, "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}},
	}
	prev := make([]byte, HashSize)
	rows := make([]*Row, 0, n)
	for i := range n {
		code := i % 3
		ev := sandgate.Event{ID: fmt.Sprintf("0190f5d2-0000-7000-8000-%012d", i), Type: sandgate.EventContainerExited,
			Time: at.Add(time.Duration(i) * time.Millisecond), Outcome: "succeeded", CorrelationID: "run-1", RunID: "run-1",
			DecisionID: "dec-1", ContainerID: "3f2a9c", Actor: "alice", Team: "t1", Node: "node-a",
			PolicyRevision: "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08",
			ExitCode:       &code, Payload: payloads[i%len(payloads)]}
		c, err := Canonicalize(ev)
		if err != nil {
			tb.Fatal(err)
		}
		recorded := ev.Time.Add(time.Millisecond)
		body := c.Body(recorded)
		cols := c.Event
		if p := c.PayloadJSON(); len(p) > 0 {
			dec := json.NewDecoder(bytes.NewReader(p))
			dec.UseNumber()
			if err := dec.Decode(&cols.Payload); err != nil {
				tb.Fatal(err)
			}
		}
		seq := int64(i + 1)
		h := ChainHash(prev, chain, seq, body)
		rows = append(rows, &Row{ChainID: chain, Seq: seq, RecordedAt: recorded, Event: cols, Body: body, PrevHash: prev, Hash: h})
		prev = h
	}
	return rows
}

// BenchmarkVerifyRows measures the verifier's own work per row (hash,
// canonical body, columns against the body, links and tree), without the
// database: ns/op is per row.
func BenchmarkVerifyRows(b *testing.B) {
	b.Run("payload=values", func(b *testing.B) { benchmarkVerifyRows(b, trailRows(b, 10_000)) })
	b.Run("payload=text", func(b *testing.B) { benchmarkVerifyRows(b, textRows(b, trailRows(b, 10_000))) })
}

func benchmarkVerifyRows(b *testing.B, rows []*Row) {
	b.ReportAllocs()
	b.ResetTimer()
	v := newVerifier(Anchors{}, time.Now(), 0)
	for i := 0; b.Loop(); i++ {
		if i%len(rows) == 0 {
			v = newVerifier(Anchors{}, time.Now(), 0)
		}
		v.row(rows[i%len(rows)])
	}
	if len(v.report.Problems) != 0 {
		b.Fatalf("problems: %+v", v.report.Problems[:min(3, len(v.report.Problems))])
	}
}
