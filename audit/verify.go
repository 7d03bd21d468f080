package audit

import (
	"bufio"
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/csv"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate"
)

// Problem kinds Verify reports.
const (
	ProblemHashMismatch       = "hash_mismatch"       // hash is not SHA-256 of prev_hash, chain, seq and body
	ProblemPrevHashMismatch   = "prev_hash_mismatch"  // prev_hash is not the previous row's hash
	ProblemSeqGap             = "seq_gap"             // rows missing from the chain
	ProblemSeqOrder           = "seq_duplicate"       // a seq appears twice
	ProblemBodyMismatch       = "body_mismatch"       // a column disagrees with the hashed body
	ProblemBadBody            = "bad_body"            // the body is not a canonical event
	ProblemBadSignature       = "bad_signature"       // a checkpoint's signature does not verify
	ProblemUntrustedKey       = "untrusted_key"       // a checkpoint is signed by a key not trusted
	ProblemCheckpointChain    = "checkpoint_chain"    // a checkpoint does not sign its predecessor's signature
	ProblemCheckpointMismatch = "checkpoint_mismatch" // the row at a checkpoint's seq has another hash
	ProblemMissingTail        = "missing_tail"        // a checkpoint covers rows that are gone
	ProblemUnsignedTail       = "unsigned_tail"       // rows past the last checkpoint are older than they may be
	ProblemStaleCheckpoint    = "stale_checkpoint"    // a live chain's newest checkpoint is too old
	ProblemUnpinnedKeys       = "unpinned_keys"       // no trusted key given: signatures checked against stored keys only
	ProblemTooMany            = "too_many_problems"   // the list was cut
	ProblemBadInput           = "bad_input"           // an export line could not be read
	maxProblems               = 10000
)

// rowData is one trail entry as the verifier sees it, from the database
// or from an export.
type rowData struct {
	ChainID    string
	Seq        int64
	RecordedAt time.Time
	Event      sandgate.Event
	Body       []byte
	PrevHash   []byte
	Hash       []byte
}

// verifier checks chains row by row. It holds per chain only the last
// hash, the rows that arrived ahead of their turn (exports are in time
// order, not seq order), and the chain's checkpoints.
type verifier struct {
	trusted    map[string]ed25519.PublicKey
	now        time.Time
	staleAfter time.Duration // 0: no staleness checks (offline)
	ordered    bool          // rows come in seq order per chain (online)
	report     sandgate.VerifyReport
	chains     map[string]*chainState
	// purged holds, from the retention.applied events seen, where each
	// purged chain's kept rows begin.
	purged map[string]anchorPoint
}

type chainState struct {
	id        string
	next      int64 // the seq expected next
	lastHash  []byte
	started   bool
	ahead     map[int64]*rowData
	cps       map[int64][]Checkpoint
	lastCP    *Checkpoint
	afterCP   time.Time // recorded_at of the first row past lastCP
	lastSeq   int64
	checkTail bool
}

func newVerifier(trusted map[string]ed25519.PublicKey, now time.Time, staleAfter time.Duration) *verifier {
	v := &verifier{trusted: trusted, now: now, staleAfter: staleAfter, chains: map[string]*chainState{}, purged: map[string]anchorPoint{}}
	v.report.Problems = []sandgate.VerifyProblem{}
	if len(trusted) == 0 {
		v.problem("", 0, ProblemUnpinnedKeys, "no trusted public key given: checkpoint signatures were checked against the keys stored with them; pass the auditors' copy of the public key")
	}
	return v
}

func (v *verifier) problem(chain string, seq int64, kind, format string, args ...any) {
	if len(v.report.Problems) == maxProblems {
		v.report.Problems = append(v.report.Problems, sandgate.VerifyProblem{Kind: ProblemTooMany, Detail: "further problems not listed"})
	}
	if len(v.report.Problems) > maxProblems {
		return
	}
	v.report.Problems = append(v.report.Problems, sandgate.VerifyProblem{
		ChainID: chain, Seq: seq, Kind: kind, Detail: fmt.Sprintf(format, args...),
	})
}

func (v *verifier) chain(id string) *chainState {
	c := v.chains[id]
	if c == nil {
		c = &chainState{id: id, next: 1, lastHash: make([]byte, HashSize), ahead: map[int64]*rowData{}, cps: map[int64][]Checkpoint{}, checkTail: true}
		v.chains[id] = c
	}
	return c
}

// checkpoints checks one chain's checkpoints (in chain order) and keeps
// them to compare with its rows.
func (v *verifier) checkpoints(chain string, cps []Checkpoint) {
	c := v.chain(chain)
	var prevSig string
	untrusted := map[string]bool{}
	for i := range cps {
		cp := cps[i]
		pub, err := hex.DecodeString(cp.PublicKey)
		head, herr := hex.DecodeString(cp.HeadHash)
		sig, serr := hex.DecodeString(cp.Signature)
		prev, perr := hex.DecodeString(cp.PrevSignature)
		if err != nil || herr != nil || serr != nil || perr != nil || len(pub) != ed25519.PublicKeySize {
			v.problem(chain, cp.Seq, ProblemBadSignature, "checkpoint fields are not valid hex")
			continue
		}
		if len(v.trusted) > 0 {
			if k, ok := v.trusted[KeyID(pub)]; (!ok || !bytes.Equal(k, pub)) && !untrusted[KeyID(pub)] {
				untrusted[KeyID(pub)] = true
				v.problem(chain, cp.Seq, ProblemUntrustedKey, "checkpoints from %s on are signed by key %s, which is not trusted", cp.CreatedAt.Format(time.RFC3339), KeyID(pub))
			}
		}
		if cp.KeyID != KeyID(pub) {
			v.problem(chain, cp.Seq, ProblemBadSignature, "checkpoint key_id %s does not name its public key (%s)", cp.KeyID, KeyID(pub))
		}
		if !ed25519.Verify(pub, CheckpointMessage(cp.ChainID, cp.Seq, head, cp.CreatedAt, cp.Final, prev), sig) {
			v.problem(chain, cp.Seq, ProblemBadSignature, "checkpoint at %s: signature does not verify", cp.CreatedAt.Format(time.RFC3339))
		}
		if i == 0 && cp.PrevSignature != "" {
			v.problem(chain, cp.Seq, ProblemCheckpointChain, "the chain's first checkpoint (%s) signs a predecessor that is missing", cp.CreatedAt.Format(time.RFC3339))
		}
		if i > 0 && cp.PrevSignature != prevSig {
			v.problem(chain, cp.Seq, ProblemCheckpointChain, "checkpoint at %s does not sign the previous checkpoint's signature: a checkpoint is missing or was replaced", cp.CreatedAt.Format(time.RFC3339))
		}
		if i > 0 && cp.Seq < cps[i-1].Seq {
			v.problem(chain, cp.Seq, ProblemCheckpointChain, "checkpoint seq goes back from %d", cps[i-1].Seq)
		}
		prevSig = cp.Signature
		c.cps[cp.Seq] = append(c.cps[cp.Seq], cp)
		c.lastCP = &cps[i]
	}
}

// row checks one entry on its own, then in chain order when its turn
// comes.
func (v *verifier) row(r *rowData) {
	v.report.Checked++
	if want := ChainHash(r.PrevHash, r.ChainID, r.Seq, r.Body); len(r.PrevHash) != HashSize || !bytes.Equal(want, r.Hash) {
		v.problem(r.ChainID, r.Seq, ProblemHashMismatch, "stored hash %x, computed %x", r.Hash, want)
	}
	v.checkBody(r)
	if r.Event.Type == sandgate.EventRetentionApplied {
		if p, err := decodeArchived(r.Event.Payload); err == nil {
			addAnchors(v.purged, p)
		}
	}
	c := v.chain(r.ChainID)
	switch {
	case r.Seq == c.next:
		v.link(c, r)
		for {
			n, ok := c.ahead[c.next]
			if !ok {
				break
			}
			delete(c.ahead, c.next)
			v.link(c, n)
		}
	case r.Seq < c.next:
		v.problem(r.ChainID, r.Seq, ProblemSeqOrder, "seq %d appears more than once", r.Seq)
	case v.ordered:
		v.problem(r.ChainID, c.next, ProblemSeqGap, "rows %d to %d are missing", c.next, r.Seq-1)
		c.started = false // across a gap prev_hash cannot be linked
		v.link(c, r)
	default:
		if _, dup := c.ahead[r.Seq]; dup {
			v.problem(r.ChainID, r.Seq, ProblemSeqOrder, "seq %d appears more than once", r.Seq)
			return
		}
		// Keep only what linking needs.
		c.ahead[r.Seq] = &rowData{ChainID: r.ChainID, Seq: r.Seq, RecordedAt: r.RecordedAt, PrevHash: r.PrevHash, Hash: r.Hash}
	}
}

// link checks r against the row before it and the checkpoints at its seq.
func (v *verifier) link(c *chainState, r *rowData) {
	if !bytes.Equal(r.PrevHash, c.lastHash) {
		if c.started || r.Seq == 1 {
			v.problem(c.id, r.Seq, ProblemPrevHashMismatch, "prev_hash %x, previous row's hash %x", r.PrevHash, c.lastHash)
		}
	}
	for _, cp := range c.cps[r.Seq] {
		if cp.HeadHash != hex.EncodeToString(r.Hash) {
			v.problem(c.id, r.Seq, ProblemCheckpointMismatch, "checkpoint at %s signed hash %s, the row's hash is %x", cp.CreatedAt.Format(time.RFC3339), cp.HeadHash, r.Hash)
		}
	}
	if c.lastCP != nil && r.Seq == c.lastCP.Seq+1 {
		c.afterCP = r.RecordedAt
	}
	if c.lastCP == nil && r.Seq == 1 {
		c.afterCP = r.RecordedAt
	}
	c.started = true
	c.lastHash = r.Hash
	c.lastSeq = r.Seq
	c.next = r.Seq + 1
}

// anchor starts a chain's check at seq (a range that does not begin at 1)
// with the hash of the row before it, when known.
func (v *verifier) anchor(chain string, seq int64, prevHash []byte) {
	c := v.chain(chain)
	c.next = seq
	c.lastSeq = seq - 1
	if prevHash != nil {
		c.lastHash = prevHash
		c.started = true
	}
}

func (v *verifier) checkBody(r *rowData) {
	var b body
	dec := json.NewDecoder(bytes.NewReader(r.Body))
	if err := dec.Decode(&b); err != nil {
		v.problem(r.ChainID, r.Seq, ProblemBadBody, "body is not JSON: %v", err)
		return
	}
	if canon, err := marshalCanonical(jsonNumbers(r.Body)); err != nil || !bytes.Equal(canon, r.Body) {
		v.problem(r.ChainID, r.Seq, ProblemBadBody, "body is not in canonical form")
	}
	ev := r.Event
	var diffs []string
	cmpStr := func(name, col, inBody string) {
		if col != inBody {
			diffs = append(diffs, fmt.Sprintf("%s: column %q, body %q", name, col, inBody))
		}
	}
	cmpStr("event_id", ev.ID, b.EventID)
	cmpStr("type", string(ev.Type), b.Type)
	cmpStr("outcome", ev.Outcome, b.Outcome)
	cmpStr("correlation_id", ev.CorrelationID, b.CorrelationID)
	cmpStr("run_id", ev.RunID, b.RunID)
	cmpStr("decision_id", ev.DecisionID, b.DecisionID)
	cmpStr("container_id", ev.ContainerID, b.ContainerID)
	cmpStr("actor", ev.Actor, b.Actor)
	cmpStr("team", ev.Team, b.Team)
	cmpStr("node", ev.Node, b.Node)
	cmpStr("policy_revision", ev.PolicyRevision, b.PolicyRevision)
	cmpStr("event_time", pgTime(ev.Time).Format(timeLayout), b.EventTime)
	cmpStr("recorded_at", pgTime(r.RecordedAt).Format(timeLayout), b.RecordedAt)
	if (ev.ExitCode == nil) != (b.ExitCode == nil) || (ev.ExitCode != nil && *ev.ExitCode != *b.ExitCode) {
		diffs = append(diffs, fmt.Sprintf("exit_code: column %s, body %s", intStr(ev.ExitCode), intStr(b.ExitCode)))
	}
	if !reflect.DeepEqual(jsonValue(mustJSON(ev.Payload)), jsonValue(mustJSON(b.Payload))) {
		diffs = append(diffs, "payload differs")
	}
	if len(diffs) > 0 {
		v.problem(r.ChainID, r.Seq, ProblemBodyMismatch, "columns disagree with the hashed body: %s", strings.Join(diffs, "; "))
	}
}

func intStr(p *int) string {
	if p == nil {
		return "null"
	}
	return strconv.Itoa(*p)
}

func mustJSON(v any) []byte {
	if m, ok := v.(map[string]any); ok && len(m) == 0 {
		return []byte("null")
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	return data
}

// jsonValue decodes data into plain Go values (float64 numbers), for
// comparisons that do not care how a number was written.
func jsonValue(data []byte) any {
	var v any
	if err := json.Unmarshal(data, &v); err != nil {
		return string(data)
	}
	return v
}

// jsonNumbers decodes data keeping numbers as written.
func jsonNumbers(data []byte) any {
	var v any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&v); err != nil {
		return string(data)
	}
	return v
}

// finish reports, per chain, what only the end can tell: rows that never
// got their turn, checkpoints past the last row, and an unsigned or stale
// tail.
func (v *verifier) finish() sandgate.VerifyReport {
	ids := make([]string, 0, len(v.chains))
	for id := range v.chains {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		c := v.chains[id]
		if a, ok := v.purged[id]; ok && c.next <= a.Seq {
			// Retention dropped the rows up to a.Seq: the kept ones link
			// to the hash it recorded.
			v.anchor(id, a.Seq+1, a.Hash)
			for s := range c.ahead {
				if s <= a.Seq {
					delete(c.ahead, s)
				}
			}
		}
		seqs := make([]int64, 0, len(c.ahead))
		for s := range c.ahead {
			seqs = append(seqs, s)
		}
		slices.Sort(seqs)
		for _, s := range seqs {
			r := c.ahead[s]
			if s > c.next {
				v.problem(id, c.next, ProblemSeqGap, "rows %d to %d are missing", c.next, s-1)
				c.started = false // across a gap prev_hash cannot be linked
			}
			v.link(c, r)
		}
		if !c.checkTail {
			continue
		}
		if c.lastCP != nil && c.lastCP.Seq > c.lastSeq {
			v.problem(id, c.lastCP.Seq, ProblemMissingTail, "checkpoint at %s signed seq %d but the chain ends at %d: rows %d to %d are gone",
				c.lastCP.CreatedAt.Format(time.RFC3339), c.lastCP.Seq, c.lastSeq, c.lastSeq+1, c.lastCP.Seq)
		}
		if v.staleAfter <= 0 {
			continue
		}
		limit := v.now.Add(-v.staleAfter)
		covered := int64(0)
		if c.lastCP != nil {
			covered = c.lastCP.Seq
		}
		if c.lastSeq > covered && !c.afterCP.IsZero() && c.afterCP.Before(limit) {
			v.problem(id, covered+1, ProblemUnsignedTail, "rows %d to %d have no checkpoint though the first was recorded at %s: the newest checkpoints may have been removed, or the writer stopped without one",
				covered+1, c.lastSeq, c.afterCP.Format(time.RFC3339))
		}
		if c.lastCP != nil && !c.lastCP.Final && c.lastCP.CreatedAt.Before(limit) {
			v.problem(id, c.lastCP.Seq, ProblemStaleCheckpoint, "newest checkpoint is from %s and not final: the tail after it cannot be vouched for (writer crashed, or newer rows and checkpoints were removed)",
				c.lastCP.CreatedAt.Format(time.RFC3339))
		}
	}
	v.report.OK = len(v.report.Problems) == 0
	return v.report
}

// Verify checks the trail over r: every row's hash, its columns against
// its hashed body, seq continuity and prev_hash links per chain, every
// checkpoint's signature (against this Store's key and Config.TrustedKeys)
// and the links between checkpoints, that each checkpoint's seq still has
// the hash it signed, and for the whole chain its tail: rows a checkpoint
// covers must exist (deleting the newest rows is caught), and rows past
// the newest checkpoint, or that checkpoint itself when not final, must be
// younger than twice CheckpointInterval. The error is AUDIT-UNAVAILABLE
// when the database cannot be read; problems are in the report.
func (s *Store) Verify(ctx context.Context, r sandgate.VerifyRange) (sandgate.VerifyReport, error) {
	v := newVerifier(s.trusted, s.cfg.Clock(), 2*s.cfg.CheckpointInterval)
	v.ordered = true
	chains, err := s.chainIDs(ctx, r.ChainID)
	if err != nil {
		return sandgate.VerifyReport{}, err
	}
	partial := r.ToSeq > 0 || !r.Until.IsZero()
	purged, err := s.retentionAnchors(ctx)
	if err != nil {
		return sandgate.VerifyReport{}, err
	}
	for _, chain := range chains {
		var cps []Checkpoint
		if err := s.eachCheckpoint(ctx, chain, func(cp Checkpoint) error {
			cps = append(cps, cp)
			return nil
		}); err != nil {
			return sandgate.VerifyReport{}, err
		}
		v.checkpoints(chain, cps)
		v.chain(chain).checkTail = !partial
		from, to := r.FromSeq, r.ToSeq
		if !r.Since.IsZero() || !r.Until.IsZero() {
			q := s.db.WithContext(ctx).Table("audit_events").Where("chain_id = ?", chain)
			if !r.Since.IsZero() {
				q = q.Where("recorded_at >= ?", r.Since)
			}
			if !r.Until.IsZero() {
				q = q.Where("recorded_at < ?", r.Until)
			}
			var span struct{ Lo, Hi *int64 }
			if err := q.Select("min(seq) AS lo, max(seq) AS hi").Scan(&span).Error; err != nil {
				return sandgate.VerifyReport{}, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read chain span")
			}
			if span.Lo == nil {
				continue
			}
			from, to = max(from, *span.Lo), *span.Hi
			if r.ToSeq > 0 {
				to = min(to, r.ToSeq)
			}
		}
		if a, ok := purged[chain]; ok && from <= a.Seq+1 {
			// Retention dropped the chain's rows up to a.Seq.
			from = a.Seq + 1
			v.anchor(chain, from, a.Hash)
		} else if from > 1 {
			var prev []byte
			err := s.db.WithContext(ctx).Table("audit_events").Select("hash").
				Where("chain_id = ? AND seq = ?", chain, from-1).Row().Scan(&prev)
			if err != nil {
				prev = nil
			}
			v.anchor(chain, from, prev)
		}
		q := s.db.WithContext(ctx).Table("audit_events").Select(eventColumns).Where("chain_id = ?", chain)
		if from > 0 {
			q = q.Where("seq >= ?", from)
		}
		if to > 0 {
			q = q.Where("seq <= ?", to)
		}
		rows, err := q.Order("seq").Rows()
		if err != nil {
			return sandgate.VerifyReport{}, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read chain %s", chain)
		}
		for rows.Next() {
			var er eventRow
			if err := er.scan(rows); err != nil {
				rows.Close()
				return sandgate.VerifyReport{}, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read chain %s", chain)
			}
			rec := er.record()
			v.row(&rowData{ChainID: er.ChainID, Seq: er.Seq, RecordedAt: er.RecordedAt, Event: rec.Event,
				Body: er.Body, PrevHash: er.PrevHash, Hash: er.Hash})
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return sandgate.VerifyReport{}, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read chain %s", chain)
		}
	}
	return v.finish(), nil
}

// chainIDs lists the chains to check: the registered ones and any that
// have rows or checkpoints.
func (s *Store) chainIDs(ctx context.Context, only string) ([]string, error) {
	if only != "" {
		return []string{only}, nil
	}
	var ids []string
	err := s.db.WithContext(ctx).Raw(`SELECT chain_id FROM audit_chains
		UNION SELECT DISTINCT chain_id FROM audit_checkpoints
		UNION SELECT DISTINCT chain_id FROM audit_events ORDER BY 1`).Scan(&ids).Error
	if err != nil {
		return nil, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "list chains")
	}
	return ids, nil
}

// VerifyExport checks an export offline: events (JSON Lines as Export
// writes them, or its CSV) and checkpoints (JSON Lines as
// ExportCheckpoints writes them; may be nil), with the trusted public
// keys. It runs the same checks as Verify except the staleness ones, which
// need the live trail. The export must hold whole chains (an unfiltered
// export): a filtered one shows seq gaps.
func VerifyExport(events io.Reader, checkpoints io.Reader, trusted ...ed25519.PublicKey) (sandgate.VerifyReport, error) {
	keys := map[string]ed25519.PublicKey{}
	for _, k := range trusted {
		keys[KeyID(k)] = k
	}
	v := newVerifier(keys, time.Now(), 0)
	if checkpoints != nil {
		if err := readCheckpoints(checkpoints, v); err != nil {
			return sandgate.VerifyReport{}, err
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
		return sandgate.VerifyReport{}, err
	}
	return v.finish(), nil
}

// readCheckpoints feeds v the checkpoints of a JSON Lines export.
func readCheckpoints(r io.Reader, v *verifier) error {
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

func readJSONLExport(r io.Reader, v *verifier) error {
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

func exportRow(rec sandgate.AuditRecord) (*rowData, error) {
	prev, err := hex.DecodeString(rec.PrevHash)
	if err != nil {
		return nil, fmt.Errorf("prev_hash: %w", err)
	}
	h, err := hex.DecodeString(rec.Hash)
	if err != nil {
		return nil, fmt.Errorf("hash: %w", err)
	}
	return &rowData{ChainID: rec.ChainID, Seq: rec.Seq, RecordedAt: rec.RecordedAt, Event: rec.Event,
		Body: []byte(rec.Body), PrevHash: prev, Hash: h}, nil
}

func readCSVExport(r io.Reader, v *verifier) error {
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
