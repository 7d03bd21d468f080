package audit

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
)

// TestExportBytesUnchanged: the paged export with its own JSON encoder
// writes byte for byte what the export wrote before it (one statement,
// encoding/json per record, kept below as referenceExport), on the same
// trail, in both formats, with pages of every size from one row to more
// than the trail, and with filters: events with every optional column
// and none, payload text that needs escaping or is not valid UTF-8,
// numbers as written (large, fractional, exponents), empty and nested
// payloads, and a payload column someone made an array (which the
// encoder leaves to encoding/json).
func TestExportBytesUnchanged(t *testing.T) {
	dsn, db := newDB(t)
	s := testStore(t, dsn, func(c *Config) { c.CheckpointEvery = 5 })
	seedTrail(t, s)
	odd := []map[string]any{
		{"html": "<a href='x'>&</a>", "controls": "\b\f\n\r\t\x01\x7f", "separators": "\u2028\u2029", "invalid": "a\xffb", "nul": "a\x00b"},
		{"big": json.Number("123456789012345678901234567890"), "frac": 0.1, "exp": json.Number("1e-7"), "neg": -3, "t": true, "n": nil},
		{"nested": []any{map[string]any{"k": []any{1, "two", 3.5}}, []any{}}, "empty": map[string]any{}},
		{},
		nil,
	}
	for i, p := range odd {
		ev := lifecycle(i, fmt.Sprintf("odd-%d", i))
		ev.Payload = p
		if i%2 == 1 {
			ev.ExitCode, ev.Outcome, ev.Actor, ev.Team = nil, "", "", ""
		}
		ev.DecisionID, ev.ContainerID, ev.Node, ev.PolicyRevision = "d-\"1\"", "c<1>", "node é", "sha256:1"
		if err := s.Record(context.Background(), ev); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	tamper(t, db, `UPDATE audit_events SET payload = '[1, 2]' WHERE run_id = 'odd-3'`)
	ro := readOnly(t, dsn, nil)
	total := count(t, db, "SELECT count(*) FROM audit_events")
	// Every row but the tampered one is written by appendRecord itself.
	rows, err := ro.Reader().filtered(context.Background(), sandgate.AuditFilter{}).Select(eventColumns).Rows()
	if err != nil {
		t.Fatal(err)
	}
	var fallbacks []string
	for rows.Next() {
		var r eventRow
		if err := r.scan(rows); err != nil {
			t.Fatal(err)
		}
		if _, ok := appendRecord(nil, &r); !ok {
			fallbacks = append(fallbacks, r.RunID.String)
		}
	}
	rows.Close()
	if len(fallbacks) != 1 || fallbacks[0] != "odd-3" {
		t.Errorf("rows left to encoding/json: %v, want only odd-3's (its payload an array)", fallbacks)
	}
	filters := []sandgate.AuditFilter{{}, {RunID: "odd-1"}, {Types: []sandgate.EventType{sandgate.EventContainerExited}},
		{Since: time.Now().Add(-time.Hour)}}
	for _, format := range []sandgate.ExportFormat{sandgate.ExportJSONL, sandgate.ExportCSV} {
		for fi, f := range filters {
			var want bytes.Buffer
			if err := referenceExport(ro.Reader(), f, format, &want); err != nil {
				t.Fatal(err)
			}
			if fi == 0 && strings.Count(want.String(), "\n") < int(total) {
				t.Fatalf("reference export has %d lines for %d rows", strings.Count(want.String(), "\n"), total)
			}
			for _, batch := range []int{1, 2, 7, int(total), int(total) + 1, exportBatch} {
				t.Run(fmt.Sprintf("%s/filter %d/pages of %d", format, fi, batch), func(t *testing.T) {
					var got bytes.Buffer
					if err := ro.Reader().export(context.Background(), f, format, &got, batch); err != nil {
						t.Fatal(err)
					}
					if got.String() != want.String() {
						t.Errorf("export differs from the reference:\n%s", firstDiff(want.String(), got.String()))
					}
				})
			}
		}
	}
}

// firstDiff shows the first line two exports differ on.
func firstDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := range max(len(w), len(g)) {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\nwant %s\n got %s", i+1, wl, gl)
		}
	}
	return "(no line differs)"
}

// referenceExport is Export as it was before pages and its own encoder:
// one statement, a record per row through encoding/json.
func referenceExport(s *Reader, f sandgate.AuditFilter, format sandgate.ExportFormat, w io.Writer) error {
	rows, err := s.filtered(context.Background(), f).Select(eventColumns).Order("recorded_at, chain_id, seq").Rows()
	if err != nil {
		return err
	}
	defer rows.Close()
	var cw *csv.Writer
	var enc *json.Encoder
	if format == sandgate.ExportCSV {
		cw = csv.NewWriter(w)
		if err := cw.Write(proof.CSVHeader); err != nil {
			return err
		}
	} else {
		enc = json.NewEncoder(w)
		enc.SetEscapeHTML(false)
	}
	for rows.Next() {
		var r eventRow
		if err := r.scan(rows); err != nil {
			return err
		}
		if enc != nil {
			if err := enc.Encode(r.record()); err != nil {
				return err
			}
			continue
		}
		exit := ""
		if r.ExitCode.Valid {
			exit = strconv.Itoa(int(r.ExitCode.Int32))
		}
		if err := cw.Write([]string{r.ChainID, strconv.FormatInt(r.Seq, 10), r.EventID,
			r.RecordedAt.UTC().Format(time.RFC3339Nano), r.EventTime.UTC().Format(time.RFC3339Nano), r.Type,
			r.Outcome.String, r.CorrelationID.String, r.RunID.String, r.DecisionID.String, r.ContainerID.String,
			r.Actor.String, r.Team.String, r.Node.String, r.PolicyRevision.String, exit, string(r.Payload),
			string(r.Body), hex.EncodeToString(r.PrevHash), hex.EncodeToString(r.Hash)}); err != nil {
			return err
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if cw != nil {
		cw.Flush()
		return cw.Error()
	}
	return nil
}
