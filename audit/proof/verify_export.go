package proof

import (
	"bufio"
	"bytes"
	"crypto/ed25519"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	"github.com/sandgate/sandgate"
)

// OfflineOptions tune VerifyExportWith and VerifyArchiveWith.
type OfflineOptions struct {
	// Anchors are the pinned keys and cluster root keys to trust keys
	// from (ResolveTrust); every other key is a problem. Offline, nothing
	// else vouches for a key (an export can be rewritten whole, its
	// registrations too), so without any the report says so. A local key
	// counts as online: when the export registers it for its node.
	Anchors Anchors
	// CheckpointInterval is the writers' (default 10 s): rows may wait
	// twice as long for a checkpoint.
	CheckpointInterval time.Duration
	// Now is this host's clock (default time.Now): no row may be recorded
	// after it.
	Now func() time.Time
}

// CSVHeader is the header row of a CSV export.
var CSVHeader = []string{"chain_id", "seq", "event_id", "recorded_at", "event_time", "type", "outcome",
	"correlation_id", "run_id", "decision_id", "container_id", "actor", "team", "node",
	"policy_revision", "exit_code", "payload", "body", "prev_hash", "hash"}

// offlineVerifier returns a verifier for an export or an archive.
func offlineVerifier(o OfflineOptions) *Verifier {
	if o.CheckpointInterval <= 0 {
		o.CheckpointInterval = 10 * time.Second
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	now := o.Now()
	v := newVerifier(o.Anchors, now, 0)
	v.keysFromRows, v.relative, v.grace = true, true, 2*o.CheckpointInterval
	// This host's clock and the database's may differ: a row is in the
	// future when it is later than the grace allows.
	v.futureAfter, v.futureClock = now.Add(v.grace), "verifying host's"
	v.futureEnd = v.futureAfter
	return v
}

// VerifyExport checks an export offline: events (JSON Lines as Export
// writes them, or its CSV) and checkpoints (JSON Lines as
// ExportCheckpoints writes them; may be nil), with the pinned public
// keys. See VerifyExportWith.
func VerifyExport(events io.Reader, checkpoints io.Reader, pinned ...ed25519.PublicKey) (Report, error) {
	return VerifyExportWith(events, checkpoints, OfflineOptions{Anchors: Anchors{Pinned: pinned}})
}

// VerifyExportWith checks an export offline. It runs the same checks as
// VerifyTrail except the stale checkpoint, which needs the live trail.
// Keys are judged from the registrations the export holds (its
// audit.key_registered and audit.key_rotated events) and the pinned keys.
// Rows no checkpoint by a known key covers are a problem unless they were
// recorded within twice the checkpoint interval of the newest such
// checkpoint (the chain's, or for a chain without one any chain's): export
// the checkpoints after the events. The export must hold whole chains (an
// unfiltered export): a filtered one shows seq gaps.
func VerifyExportWith(events io.Reader, checkpoints io.Reader, o OfflineOptions) (Report, error) {
	v := offlineVerifier(o)
	if checkpoints != nil {
		if err := readCheckpoints(checkpoints, v); err != nil {
			return Report{}, err
		}
	}
	br := bufio.NewReaderSize(events, 1<<20)
	first, _ := br.Peek(1)
	var err error
	if len(first) == 1 && first[0] != '{' {
		err = readCSVExport(br, v)
	} else {
		err = readJSONLExport(br, v)
	}
	if err != nil {
		return Report{}, err
	}
	return v.result(), nil
}

// readCheckpoints feeds v the checkpoints of a JSON Lines export.
func readCheckpoints(r io.Reader, v *Verifier) error {
	byChain := map[string][]Checkpoint{}
	var order []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	line := 0
	for sc.Scan() {
		line++
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var cp Checkpoint
		if err := json.Unmarshal(sc.Bytes(), &cp); err != nil {
			v.problem("", 0, ProblemBadInput, "checkpoints line %d: %v", line, err)
			continue
		}
		if _, ok := byChain[cp.ChainID]; !ok {
			order = append(order, cp.ChainID)
		}
		byChain[cp.ChainID] = append(byChain[cp.ChainID], cp)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read checkpoints: %w", err)
	}
	for _, id := range order {
		v.checkpoints(id, byChain[id])
	}
	return nil
}

func readJSONLExport(r io.Reader, v *Verifier) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 64<<20)
	line := 0
	for sc.Scan() {
		line++
		if len(bytes.TrimSpace(sc.Bytes())) == 0 {
			continue
		}
		var rec sandgate.AuditRecord
		if err := json.Unmarshal(sc.Bytes(), &rec); err != nil {
			v.problem("", 0, ProblemBadInput, "export line %d: %v", line, err)
			continue
		}
		rd, err := exportRow(rec)
		if err != nil {
			v.problem(rec.ChainID, rec.Seq, ProblemBadInput, "export line %d: %v", line, err)
			continue
		}
		v.row(rd)
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read export: %w", err)
	}
	return nil
}

func exportRow(rec sandgate.AuditRecord) (*Row, error) {
	prev, err := hex.DecodeString(rec.PrevHash)
	if err != nil {
		return nil, fmt.Errorf("prev_hash: %w", err)
	}
	h, err := hex.DecodeString(rec.Hash)
	if err != nil {
		return nil, fmt.Errorf("hash: %w", err)
	}
	return &Row{ChainID: rec.ChainID, Seq: rec.Seq, RecordedAt: rec.RecordedAt, Event: rec.Event,
		Body: []byte(rec.Body), PrevHash: prev, Hash: h}, nil
}

func readCSVExport(r io.Reader, v *Verifier) error {
	cr := csv.NewReader(r)
	header, err := cr.Read()
	if err != nil {
		return fmt.Errorf("read export header: %w", err)
	}
	if !slices.Equal(header, CSVHeader) {
		return errors.New("read export: not a sandgate CSV export (unexpected header)")
	}
	line := 1
	for {
		f, err := cr.Read()
		if err == io.EOF {
			return nil
		}
		line++
		if err != nil {
			v.problem("", 0, ProblemBadInput, "export row %d: %v", line, err)
			continue
		}
		rec, err := csvRecord(f)
		if err != nil {
			v.problem("", 0, ProblemBadInput, "export row %d: %v", line, err)
			continue
		}
		rd, err := exportRow(rec)
		if err != nil {
			v.problem(rec.ChainID, rec.Seq, ProblemBadInput, "export row %d: %v", line, err)
			continue
		}
		v.row(rd)
	}
}

func csvRecord(f []string) (sandgate.AuditRecord, error) {
	var rec sandgate.AuditRecord
	var err error
	rec.ChainID = f[0]
	if rec.Seq, err = strconv.ParseInt(f[1], 10, 64); err != nil {
		return rec, fmt.Errorf("seq: %w", err)
	}
	rec.ID = f[2]
	if rec.RecordedAt, err = time.Parse(time.RFC3339Nano, f[3]); err != nil {
		return rec, fmt.Errorf("recorded_at: %w", err)
	}
	if rec.Time, err = time.Parse(time.RFC3339Nano, f[4]); err != nil {
		return rec, fmt.Errorf("event_time: %w", err)
	}
	rec.Type = sandgate.EventType(f[5])
	rec.Outcome, rec.CorrelationID, rec.RunID, rec.DecisionID = f[6], f[7], f[8], f[9]
	rec.ContainerID, rec.Actor, rec.Team, rec.Node, rec.PolicyRevision = f[10], f[11], f[12], f[13], f[14]
	if f[15] != "" {
		c, err := strconv.Atoi(f[15])
		if err != nil {
			return rec, fmt.Errorf("exit_code: %w", err)
		}
		rec.ExitCode = &c
	}
	if f[16] != "" {
		if err := json.Unmarshal([]byte(f[16]), &rec.Payload); err != nil {
			return rec, fmt.Errorf("payload: %w", err)
		}
	}
	rec.Body, rec.PrevHash, rec.Hash = f[17], f[18], f[19]
	return rec, nil
}
