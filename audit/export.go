package audit

import (
	"bufio"
	"bytes"
	"context"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"time"

	"gorm.io/gorm"

	"github.com/jackc/pgx/v5/pgtype"
	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
)

// exportBatch is how many rows one statement of an export reads: each
// page is its own short statement (keyset pagination on the trail's
// order), so that an export of millions of events neither holds a
// connection and a snapshot for minutes nor costs more per row than a
// page's round trip.
const exportBatch = 2000

// Export streams every matching event (ignoring Limit and Cursor) to w,
// oldest first, as JSON Lines (one AuditRecord per line) or CSV (header
// proof.CSVHeader; payload and body as JSON text, hashes in hex). Rows are
// read a page at a time, never all held. An unknown format is
// INVALID-REQUEST.
func (s *Reader) Export(ctx context.Context, f sandgate.AuditFilter, format sandgate.ExportFormat, w io.Writer) error {
	return s.export(ctx, f, format, w, exportBatch)
}

// export is Export reading batch rows a statement.
func (s *Reader) export(ctx context.Context, f sandgate.AuditFilter, format sandgate.ExportFormat, w io.Writer, batch int) error {
	if err := checkFilter(f); err != nil {
		return err
	}
	var out exportWriter
	switch format {
	case sandgate.ExportJSONL:
		out = &jsonlWriter{w: bufio.NewWriterSize(w, 64<<10)}
	case sandgate.ExportCSV:
		cw := csv.NewWriter(w)
		if err := cw.Write(proof.CSVHeader); err != nil {
			return fmt.Errorf("write export: %w", err)
		}
		out = csvWriter{cw}
	default:
		return sandgate.FieldError("format", "must be jsonl or csv, not %q", format)
	}
	// One goroutine reads the pages and this one writes the lines:
	// reading a row and writing its line cost about the same, so the two
	// overlap, a chunk of rows at a time.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	p := &exportPipe{chunks: make(chan []eventRow, 2), free: make(chan []eventRow, 3)}
	var readErr error
	go func() {
		defer close(p.chunks)
		readErr = s.readPages(ctx, f, batch, p)
	}()
	var writeErr error
	for chunk := range p.chunks {
		for i := 0; i < len(chunk) && writeErr == nil; i++ {
			if writeErr = out.row(&chunk[i]); writeErr != nil {
				cancel() // the reader stops at its next chunk
			}
		}
		select {
		case p.free <- chunk[:0]:
		default:
		}
	}
	// The reader has returned: p.chunks is closed.
	if writeErr != nil {
		return writeErr
	}
	if readErr != nil {
		// What was read before the failure still reaches w; the caller
		// ends the stream early.
		_ = out.flush()
		return readErr
	}
	return out.flush()
}

// exportChunk is how many rows the export's reader hands its writer at a
// time.
const exportChunk = 256

// exportPipe carries an export's rows from its reader to its writer in
// chunks; free returns the writer's empty chunks for reuse.
type exportPipe struct {
	chunks chan []eventRow
	free   chan []eventRow
}

func (p *exportPipe) take() []eventRow {
	select {
	case c := <-p.free:
		return c
	default:
		return make([]eventRow, 0, exportChunk)
	}
}

func (p *exportPipe) send(ctx context.Context, c []eventRow) error {
	select {
	case p.chunks <- c:
		return nil
	case <-ctx.Done():
		return sandgate.WrapError(sandgate.CodeAuditUnavailable, ctx.Err(), "export audit events")
	}
}

// readPages reads every page of matching rows into p.
func (s *Reader) readPages(ctx context.Context, f sandgate.AuditFilter, batch int, p *exportPipe) error {
	var after *eventCursor
	for {
		n, last, err := s.exportPage(ctx, f, after, batch, p)
		if err != nil {
			return err
		}
		if n < batch {
			return nil
		}
		after = &last
	}
}

// exportPage reads the page of matching rows after the cursor (from the
// first without one) into p and returns how many there were and where it
// ended.
func (s *Reader) exportPage(ctx context.Context, f sandgate.AuditFilter, after *eventCursor, batch int, p *exportPipe) (int, eventCursor, error) {
	q := s.filtered(ctx, f)
	if after != nil {
		q = q.Where("(recorded_at, chain_id, seq) > (?, ?, ?)", after.T, after.C, after.S)
	}
	// gorm writes the statement; pgx's own rows read it, without
	// database/sql's copies of every column.
	stmt := q.Session(&gorm.Session{DryRun: true}).Select(eventColumns).Order("recorded_at, chain_id, seq").Limit(batch).
		Find(&[]eventRow{}).Statement
	rows, err := s.pool.Query(ctx, stmt.SQL.String(), stmt.Vars...)
	if err != nil {
		return 0, eventCursor{}, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "export audit events")
	}
	defer rows.Close()
	var n int
	var last eventCursor
	chunk := p.take()
	for rows.Next() {
		chunk = append(chunk, eventRow{})
		r := &chunk[len(chunk)-1]
		if err := r.scan(rows); err != nil {
			return n, eventCursor{}, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read audit events")
		}
		n++
		last = eventCursor{T: r.RecordedAt, C: r.ChainID, S: r.Seq}
		if len(chunk) == exportChunk {
			if err := p.send(ctx, chunk); err != nil {
				return n, eventCursor{}, err
			}
			chunk = p.take()
		}
	}
	if err := rows.Err(); err != nil {
		return n, eventCursor{}, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read audit events")
	}
	if len(chunk) > 0 {
		if err := p.send(ctx, chunk); err != nil {
			return n, eventCursor{}, err
		}
	}
	return n, last, nil
}

// exportWriter writes an export's rows in one format.
type exportWriter interface {
	row(r *eventRow) error
	flush() error
}

// jsonlWriter writes JSON Lines: each row's AuditRecord as encoding/json
// writes it without HTML escaping, but appended straight into one buffer
// (appendRecord) instead of through reflection; a row it cannot write so
// goes through encoding/json.
type jsonlWriter struct {
	w    *bufio.Writer
	line []byte
}

func (j *jsonlWriter) row(r *eventRow) error {
	line, ok := appendRecord(j.line[:0], r)
	if !ok {
		var buf bytes.Buffer
		enc := json.NewEncoder(&buf)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(r.record()); err != nil {
			return fmt.Errorf("write export: %w", err)
		}
		line = append(line[:0], buf.Bytes()...)
	}
	j.line = line
	if _, err := j.w.Write(line); err != nil {
		return fmt.Errorf("write export: %w", err)
	}
	return nil
}

func (j *jsonlWriter) flush() error {
	if err := j.w.Flush(); err != nil {
		return fmt.Errorf("write export: %w", err)
	}
	return nil
}

// appendRecord appends r's AuditRecord as encoding/json writes it without
// HTML escaping, and a newline: sandgate.Event's members in declaration
// order (empty ones left out), then the record's. ok is false where that
// is not certain (a time outside years 0 to 9999, which encoding/json
// refuses; a payload that is not an object AppendCanonicalText reads).
func appendRecord(dst []byte, r *eventRow) (_ []byte, ok bool) {
	str := func(k, v string) {
		dst = append(dst, ',', '"')
		dst = append(dst, k...)
		dst = append(dst, '"', ':')
		dst = proof.AppendJSONString(dst, v)
	}
	opt := func(k string, v pgtype.Text) {
		if v.String != "" {
			str(k, v.String)
		}
	}
	when := func(k string, t time.Time) bool {
		t = t.UTC()
		if y := t.Year(); y < 0 || y > 9999 {
			return false
		}
		dst = append(dst, ',', '"')
		dst = append(dst, k...)
		dst = append(dst, '"', ':', '"')
		dst = t.AppendFormat(dst, time.RFC3339Nano)
		dst = append(dst, '"')
		return true
	}
	dst = append(dst, `{"event_id":`...)
	dst = proof.AppendJSONString(dst, r.EventID)
	str("type", r.Type)
	if !when("event_time", r.EventTime) {
		return dst, false
	}
	opt("outcome", r.Outcome)
	opt("correlation_id", r.CorrelationID)
	opt("run_id", r.RunID)
	opt("decision_id", r.DecisionID)
	opt("container_id", r.ContainerID)
	opt("actor", r.Actor)
	opt("team", r.Team)
	opt("node", r.Node)
	opt("policy_revision", r.PolicyRevision)
	if r.ExitCode.Valid {
		dst = append(dst, `,"exit_code":`...)
		dst = strconv.AppendInt(dst, int64(r.ExitCode.Int32), 10)
	}
	if len(r.Payload) > 0 {
		// The column's jsonb text straight into its canonical form: what
		// decoding it into a map and encoding that writes, an empty
		// object left out.
		mark := len(dst)
		dst = append(dst, `,"payload":`...)
		var ok bool
		if dst, ok = proof.AppendCanonicalText(dst, r.Payload); !ok {
			return dst, false
		}
		if string(dst[mark+len(`,"payload":`):]) == "{}" {
			dst = dst[:mark]
		}
	}
	str("chain_id", r.ChainID)
	dst = append(dst, `,"seq":`...)
	dst = strconv.AppendInt(dst, r.Seq, 10)
	if !when("recorded_at", r.RecordedAt) {
		return dst, false
	}
	dst = append(dst, `,"body":`...)
	dst = appendJSONBytes(dst, r.Body)
	dst = append(dst, `,"prev_hash":"`...)
	dst = hex.AppendEncode(dst, r.PrevHash)
	dst = append(dst, `","hash":"`...)
	dst = hex.AppendEncode(dst, r.Hash)
	return append(dst, '"', '}', '\n'), true
}

// appendJSONBytes appends b as a JSON string without copying it into a
// string first when it needs no escaping, the usual case for a body.
func appendJSONBytes(dst, b []byte) []byte {
	for _, c := range b {
		if c < 0x20 || c == '"' || c == '\\' || c >= 0x80 {
			return proof.AppendJSONString(dst, string(b))
		}
	}
	dst = append(dst, '"')
	dst = append(dst, b...)
	return append(dst, '"')
}

// csvWriter writes CSV, a row a record.
type csvWriter struct{ cw *csv.Writer }

func (c csvWriter) row(r *eventRow) error {
	exit := ""
	if r.ExitCode.Valid {
		exit = strconv.Itoa(int(r.ExitCode.Int32))
	}
	if err := c.cw.Write([]string{r.ChainID, strconv.FormatInt(r.Seq, 10), r.EventID,
		r.RecordedAt.UTC().Format(time.RFC3339Nano), r.EventTime.UTC().Format(time.RFC3339Nano), r.Type,
		r.Outcome.String, r.CorrelationID.String, r.RunID.String, r.DecisionID.String, r.ContainerID.String,
		r.Actor.String, r.Team.String, r.Node.String, r.PolicyRevision.String, exit, string(r.Payload),
		string(r.Body), hex.EncodeToString(r.PrevHash), hex.EncodeToString(r.Hash)}); err != nil {
		return fmt.Errorf("write export: %w", err)
	}
	return nil
}

func (c csvWriter) flush() error {
	c.cw.Flush()
	if err := c.cw.Error(); err != nil {
		return fmt.Errorf("write export: %w", err)
	}
	return nil
}
