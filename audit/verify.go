package audit

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
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
	ProblemUntrustedKey       = "untrusted_key"       // a key is not among the pinned trusted keys
	ProblemUnknownKey         = "unknown_key"         // a checkpoint is signed by a key the registry does not vouch for
	ProblemUnendorsedKey      = "unendorsed_key"      // a key registered as a rotation its predecessor did not endorse
	ProblemCheckpointChain    = "checkpoint_chain"    // a checkpoint does not sign its predecessor's signature
	ProblemCheckpointMismatch = "checkpoint_mismatch" // the row at a checkpoint's seq has another hash
	ProblemMissingTail        = "missing_tail"        // a checkpoint covers rows that are gone
	ProblemUnsignedTail       = "unsigned_tail"       // rows past a chain's last checkpoint by a known key are older than they may be
	ProblemUnsignedChain      = "unsigned_chain"      // a chain with rows has no checkpoint by a known key
	ProblemFutureRow          = "future_row"          // rows recorded after the database's clock
	ProblemStaleCheckpoint    = "stale_checkpoint"    // a live chain's newest checkpoint is too old
	ProblemUnpinnedKeys       = "unpinned_keys"       // offline without a trusted key: nothing vouches for the keys
	ProblemTooMany            = "too_many_problems"   // the list was cut
	ProblemBadInput           = "bad_input"           // an export line could not be read
	maxProblems               = 10000
)

// Report is a verification's answer with the checkpoint keys it judged:
// the registry's (online) or the registrations the export holds
// (offline), in registration order, each marked known (the registry
// vouches for it) and pinned (among the trusted keys given). Its JSON is
// sandgate.VerifyReport's with "keys" and "pinned" added.
type Report struct {
	sandgate.VerifyReport
	Keys []KeyRecord `json:"keys"`
	// Pinned is how many trusted keys were pinned; with none, verify
	// trusted the registry.
	Pinned int `json:"pinned"`
}

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
// order, not seq order), the chain's checkpoints, and per stretch of rows
// between two checkpoints when its rows were recorded.
type verifier struct {
	trusted    map[string]ed25519.PublicKey // pinned keys; none pinned when empty
	now        time.Time
	staleAfter time.Duration // 0: no staleness checks (offline)
	ordered    bool          // rows come in seq order per chain (online)
	report     sandgate.VerifyReport
	chains     map[string]*chainState

	// keys are the registrations: the registry's, set before any row
	// (online), or those the rows' key events hold (keysFromRows,
	// offline). resolveKeys judges them into known.
	keys         []KeyRecord
	keysFromRows bool
	rowKeys      []rowKey
	known        map[string]ed25519.PublicKey
	rejected     []KeyRecord
	resolved     bool

	// grace is how long rows may wait for a checkpoint (twice the
	// checkpoint interval); 0 checks no coverage. Online, rows are judged
	// against now; offline (relative), against the newest checkpoint by a
	// known key, since an export has no clock of its own.
	grace    time.Duration
	relative bool
	// futureAfter is the clock rows must not be recorded after: the
	// database's when verification began (online) or this host's
	// (offline); zero checks nothing. Rows after it are kept aside and
	// judged at the end against futureEnd, the database's clock when
	// verification ended: a live writer commits rows meanwhile.
	futureAfter time.Time
	futureEnd   time.Time
	futureClock string
	// retention holds the retention.applied rows seen: where each purged
	// chain's kept rows begin, honoured only when a checkpoint by a known
	// key covers the row that says so.
	retention []retentionRef
	// purged holds the retention boundaries honoured.
	purged map[string]anchorPoint
}

// rowKey is a registration read from a key event, and when the database
// recorded that event: registrations are judged in that order, not in the
// order their payloads claim.
type rowKey struct {
	k  KeyRecord
	at time.Time
}

// retentionRef is a retention.applied row and what it recorded.
type retentionRef struct {
	chain string
	seq   int64
	p     archivedPayload
}

type chainState struct {
	id        string
	next      int64 // the seq expected next
	lastHash  []byte
	started   bool
	ahead     map[int64]*rowData
	cps       map[int64][]Checkpoint
	signed    []signedCP // checkpoints whose signature verifies, in chain order
	lastCP    *Checkpoint
	lastSeq   int64
	checkTail bool

	// bounds are the seqs checkpoints sign, sorted; stretch i holds what
	// is known of the rows after bounds[i-1] up to bounds[i] (stretch 0
	// from the first row, the last one past every checkpoint).
	bounds   []int64
	stretch  []stretch
	late     []lateRow // rows recorded after futureAfter (the first maxLate)
	lateMore int64     // and how many more
}

// lateRow is a row recorded after the verifier's clock at the start.
type lateRow struct {
	seq int64
	at  time.Time
}

// maxLate bounds the rows a chain keeps aside to judge against the clock
// at the end of verification.
const maxLate = 10000

// signedCP is a checkpoint whose signature verifies.
type signedCP struct {
	seq       int64
	keyID     string
	pub       ed25519.PublicKey
	createdAt time.Time
}

// stretch summarises rows between two checkpoints.
type stretch struct {
	n              int64
	minSeq, maxSeq int64
	minAt, maxAt   time.Time
}

func (s *stretch) add(seq int64, at time.Time) {
	if s.n == 0 || seq < s.minSeq {
		s.minSeq = seq
	}
	if s.n == 0 || seq > s.maxSeq {
		s.maxSeq = seq
	}
	if s.n == 0 || at.Before(s.minAt) {
		s.minAt = at
	}
	if s.n == 0 || at.After(s.maxAt) {
		s.maxAt = at
	}
	s.n++
}

func (s *stretch) merge(o stretch) {
	if o.n == 0 {
		return
	}
	if s.n == 0 {
		*s = o
		return
	}
	s.minSeq, s.maxSeq = min(s.minSeq, o.minSeq), max(s.maxSeq, o.maxSeq)
	if o.minAt.Before(s.minAt) {
		s.minAt = o.minAt
	}
	if o.maxAt.After(s.maxAt) {
		s.maxAt = o.maxAt
	}
	s.n += o.n
}

func newVerifier(trusted map[string]ed25519.PublicKey, now time.Time, staleAfter time.Duration) *verifier {
	v := &verifier{trusted: trusted, now: now, staleAfter: staleAfter, chains: map[string]*chainState{}, purged: map[string]anchorPoint{}}
	v.report.Problems = []sandgate.VerifyProblem{}
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
		c = &chainState{id: id, next: 1, lastHash: make([]byte, HashSize), ahead: map[int64]*rowData{},
			cps: map[int64][]Checkpoint{}, checkTail: true, stretch: make([]stretch, 1)}
		v.chains[id] = c
	}
	return c
}

// checkpoints checks one chain's checkpoints (in chain order) and keeps
// them to compare with its rows. They come before the chain's rows.
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
		good := true
		if cp.KeyID != KeyID(pub) {
			good = false
			v.problem(chain, cp.Seq, ProblemBadSignature, "checkpoint key_id %s does not name its public key (%s)", cp.KeyID, KeyID(pub))
		}
		if !ed25519.Verify(pub, CheckpointMessage(cp.ChainID, cp.Seq, head, cp.CreatedAt, cp.Final, prev), sig) {
			good = false
			v.problem(chain, cp.Seq, ProblemBadSignature, "checkpoint at %s: signature does not verify", cp.CreatedAt.Format(time.RFC3339))
		}
		if good && cp.ChainID == chain {
			c.signed = append(c.signed, signedCP{seq: cp.Seq, keyID: KeyID(pub), pub: pub, createdAt: cp.CreatedAt})
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
		c.bounds = append(c.bounds, cp.Seq)
	}
	slices.Sort(c.bounds)
	c.bounds = slices.Compact(c.bounds)
	c.stretch = make([]stretch, len(c.bounds)+1)
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
			v.retention = append(v.retention, retentionRef{chain: r.ChainID, seq: r.Seq, p: p})
		}
	}
	if v.keysFromRows {
		if k, ok := keyFromEvent(r.Event, r.RecordedAt); ok {
			v.rowKeys = append(v.rowKeys, rowKey{k: k, at: r.RecordedAt})
		}
	}
	c := v.chain(r.ChainID)
	if !v.futureAfter.IsZero() && r.RecordedAt.After(v.futureAfter) {
		if len(c.late) < maxLate {
			c.late = append(c.late, lateRow{seq: r.Seq, at: r.RecordedAt})
		} else {
			c.lateMore++
		}
	}
	i, _ := slices.BinarySearch(c.bounds, r.Seq)
	c.stretch[i].add(r.Seq, r.RecordedAt)
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
	// recorded_at is not compared: the column is the database's clock when
	// it took the row, the body the writer's when it sealed it (earlier for
	// an event delivered late from the spool).
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

// resolveKeys judges the registrations once: which keys are known (the
// registry vouches for them, or they are pinned).
func (v *verifier) resolveKeys() {
	if v.resolved {
		return
	}
	v.resolved = true
	if v.keysFromRows {
		// An export holds each registration's event, maybe more than once
		// (after a purge, a writer records its key again): the first of
		// each counts.
		slices.SortStableFunc(v.rowKeys, func(a, b rowKey) int { return a.at.Compare(b.at) })
		seen := map[[2]string]bool{}
		for _, rk := range v.rowKeys {
			if id := [2]string{rk.k.Node, rk.k.KeyID}; !seen[id] {
				seen[id] = true
				v.keys = append(v.keys, rk.k)
			}
		}
	}
	v.known, v.rejected = registryKeys(v.keys, v.trusted)
	for id, k := range v.trusted {
		v.known[id] = k
	}
}

// isKnown reports whether cp's key is known.
func (v *verifier) isKnown(cp signedCP) bool {
	k, ok := v.known[cp.keyID]
	return ok && bytes.Equal(k, cp.pub)
}

// covered returns the highest seq of c a checkpoint by a known key signs,
// and that checkpoint's time; 0 when there is none.
func (v *verifier) covered(c *chainState) (int64, time.Time) {
	var seq int64
	var at time.Time
	for _, cp := range c.signed {
		if v.isKnown(cp) && cp.seq >= seq {
			seq, at = cp.seq, cp.createdAt
		}
	}
	return seq, at
}

// honourRetention takes the retention boundaries of retention.applied rows
// that a checkpoint by a known key covers; others are not evidence.
func (v *verifier) honourRetention() {
	for _, r := range v.retention {
		if c := v.chains[r.chain]; c != nil {
			if seq, _ := v.covered(c); seq >= r.seq {
				addAnchors(v.purged, r.p)
			}
		}
	}
}

// finish reports, per chain, what only the end can tell: rows that never
// got their turn, checkpoints past the last row, rows in the future, rows
// no checkpoint by a known key covers, a stale tail; then the keys.
func (v *verifier) finish() sandgate.VerifyReport {
	v.resolveKeys()
	v.honourRetention()
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
		v.checkFuture(c)
		if !c.checkTail {
			continue
		}
		if c.lastCP != nil && c.lastCP.Seq > c.lastSeq {
			v.problem(id, c.lastCP.Seq, ProblemMissingTail, "checkpoint at %s signed seq %d but the chain ends at %d: rows %d to %d are gone",
				c.lastCP.CreatedAt.Format(time.RFC3339), c.lastCP.Seq, c.lastSeq, c.lastSeq+1, c.lastCP.Seq)
		}
		v.checkCoverage(c)
		if v.staleAfter <= 0 {
			continue
		}
		if c.lastCP != nil && !c.lastCP.Final && c.lastCP.CreatedAt.Before(v.now.Add(-v.staleAfter)) {
			v.problem(id, c.lastCP.Seq, ProblemStaleCheckpoint, "newest checkpoint is from %s and not final: the tail after it cannot be vouched for (writer crashed, or newer rows and checkpoints were removed)",
				c.lastCP.CreatedAt.Format(time.RFC3339))
		}
	}
	v.keyProblems(ids)
	v.report.OK = len(v.report.Problems) == 0
	return v.report
}

// checkCoverage reports c's rows that no checkpoint by a known key covers,
// unless they are recent enough that their checkpoint may still come: by
// the grace before now (online), or within the grace around the newest
// checkpoint by a known key, the chain's or any chain's (offline).
func (v *verifier) checkCoverage(c *chainState) {
	if v.grace <= 0 {
		return
	}
	seq, at := v.covered(c)
	var rest stretch
	for i, b := range append(slices.Clone(c.bounds), -1) {
		if b == -1 || b > seq {
			rest.merge(c.stretch[i])
		}
	}
	if rest.n == 0 {
		return
	}
	ref := v.now
	if v.relative {
		if ref = at; seq == 0 {
			ref = v.newestKnownCheckpoint()
		}
	}
	late := v.relative && rest.maxAt.After(ref.Add(v.grace))
	future := !v.futureEnd.IsZero() && rest.maxAt.After(v.futureEnd)
	if !ref.IsZero() && rest.minAt.After(ref.Add(-v.grace)) && !future && !late {
		return // a live writer's tail: its checkpoint is due
	}
	if seq == 0 {
		v.problem(c.id, rest.minSeq, ProblemUnsignedChain, "no checkpoint signed by a known key covers this chain: rows %d to %d (recorded from %s) are vouched for by no node",
			rest.minSeq, rest.maxSeq, rest.minAt.UTC().Format(time.RFC3339))
		return
	}
	v.problem(c.id, rest.minSeq, ProblemUnsignedTail, "rows %d to %d have no checkpoint signed by a known key though the first was recorded at %s: the newest checkpoints may have been removed, the writer stopped without one, or the rows were added by someone else",
		rest.minSeq, rest.maxSeq, rest.minAt.UTC().Format(time.RFC3339))
}

// checkFuture reports c's rows recorded after the clock at the end of
// verification.
func (v *verifier) checkFuture(c *chainState) {
	if v.futureEnd.IsZero() {
		return
	}
	var n, first int64
	for _, r := range c.late {
		if r.at.After(v.futureEnd) {
			if n == 0 || r.seq < first {
				first = r.seq
			}
			n++
		}
	}
	if n == 0 {
		return
	}
	if n == maxLate {
		n += c.lateMore // beyond those kept, they are as late as the rest
	}
	v.problem(c.id, first, ProblemFutureRow, "%d rows from seq %d are recorded after the %s clock (%s): a row's time was chosen by whoever inserted it",
		n, first, v.futureClock, v.futureEnd.Format(time.RFC3339))
}

// newestKnownCheckpoint returns the time of the newest checkpoint by a
// known key in any chain: about when an export's checkpoints were taken,
// as live writers sign every interval.
func (v *verifier) newestKnownCheckpoint() time.Time {
	var newest time.Time
	for _, c := range v.chains {
		for _, cp := range c.signed {
			if v.isKnown(cp) && cp.createdAt.After(newest) {
				newest = cp.createdAt
			}
		}
	}
	return newest
}

// keyProblems reports checkpoints by keys the registry does not vouch for
// (when none are pinned), rotations their predecessor did not endorse,
// and registered keys outside the pinned set.
func (v *verifier) keyProblems(ids []string) {
	used := map[string]bool{}
	for _, id := range ids {
		c := v.chains[id]
		unknown := map[string]bool{}
		for _, cp := range c.signed {
			used[cp.keyID] = true
			if len(v.trusted) == 0 && !v.isKnown(cp) && !unknown[cp.keyID] {
				unknown[cp.keyID] = true
				v.problem(id, cp.seq, ProblemUnknownKey, "checkpoints from seq %d on are signed by key %s, which the key registry does not vouch for: no node registered it, or its rotation was not endorsed",
					cp.seq, cp.keyID)
			}
		}
	}
	for _, k := range v.rejected {
		v.problem(k.ChainID, 0, ProblemUnendorsedKey, "key %s was registered for node %s at %s as replacing key %s without that key's endorsement: anyone with the application role can do that; pin the key if it is the node's",
			k.KeyID, k.Node, k.FirstUsedAt.UTC().Format(time.RFC3339), k.Replaces)
	}
	if len(v.trusted) == 0 {
		return
	}
	for _, k := range v.keys {
		if !k.Pinned && k.Known && !used[k.KeyID] {
			v.problem(k.ChainID, 0, ProblemUntrustedKey, "key %s of node %s (registered %s, %s) is not among the trusted keys",
				k.KeyID, k.Node, k.FirstUsedAt.UTC().Format(time.RFC3339), k.Source)
		}
	}
}

// result is the report with the keys judged.
func (v *verifier) result() Report {
	rep := Report{VerifyReport: v.finish(), Keys: v.keys, Pinned: len(v.trusted)}
	if rep.Keys == nil {
		rep.Keys = []KeyRecord{}
	}
	return rep
}

// Verify checks the trail over r and returns the problems found (see
// VerifyTrail, which also lists the keys). The error is AUDIT-UNAVAILABLE
// when the database cannot be read.
func (s *Store) Verify(ctx context.Context, r sandgate.VerifyRange) (sandgate.VerifyReport, error) {
	rep, err := s.VerifyTrail(ctx, r)
	return rep.VerifyReport, err
}

// VerifyTrail checks the trail over r: every row's hash, its columns
// against its hashed body, seq continuity and prev_hash links per chain,
// every checkpoint's signature and the links between checkpoints, that
// each checkpoint's seq still has the hash it signed, and each key: with
// Config.TrustedKeys, every key outside them is a problem; without, the
// key registry decides which keys are known (a node's first key, a
// rotation its predecessor endorsed). For the whole chain it checks its
// tail: rows a checkpoint covers must exist (deleting the newest rows is
// caught); rows no checkpoint by a known key covers (a chain someone else
// added, or a tail whose checkpoints were removed) must be younger than
// twice CheckpointInterval, judged at the later of the database's clock and
// this Store's; a newest checkpoint that is not final must be as young;
// and no row may be recorded after the database's clock. The report lists
// the keys with their node and first use. The error is AUDIT-UNAVAILABLE
// when the database cannot be read; problems are in the report.
func (s *Store) VerifyTrail(ctx context.Context, r sandgate.VerifyRange) (Report, error) {
	var dbNow time.Time
	if err := s.pool.QueryRow(ctx, `SELECT now()`).Scan(&dbNow); err != nil {
		return Report{}, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read the database's clock")
	}
	keys, err := s.Keys(ctx)
	if err != nil {
		return Report{}, err
	}
	grace := 2 * s.cfg.CheckpointInterval
	v := newVerifier(s.trusted, later(dbNow, s.cfg.Clock()), grace)
	v.ordered, v.grace = true, grace
	v.futureAfter, v.futureClock = dbNow, "database's"
	v.keys = keys
	v.resolveKeys()
	chains, err := s.chainIDs(ctx, r.ChainID)
	if err != nil {
		return Report{}, err
	}
	partial := r.ToSeq > 0 || !r.Until.IsZero()
	for _, chain := range chains {
		cps, err := s.checkpointsOf(ctx, chain)
		if err != nil {
			return Report{}, err
		}
		v.checkpoints(chain, cps)
		v.chain(chain).checkTail = !partial
	}
	purged, err := s.retentionAnchors(ctx, v)
	if err != nil {
		return Report{}, err
	}
	for _, chain := range chains {
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
				return Report{}, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read chain span")
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
			return Report{}, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read chain %s", chain)
		}
		for rows.Next() {
			var er eventRow
			if err := er.scan(rows); err != nil {
				rows.Close()
				return Report{}, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read chain %s", chain)
			}
			rec := er.record()
			v.row(&rowData{ChainID: er.ChainID, Seq: er.Seq, RecordedAt: er.RecordedAt, Event: rec.Event,
				Body: er.Body, PrevHash: er.PrevHash, Hash: er.Hash})
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return Report{}, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read chain %s", chain)
		}
	}
	// Every row read was committed before this.
	if err := s.pool.QueryRow(ctx, `SELECT now()`).Scan(&v.futureEnd); err != nil {
		return Report{}, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read the database's clock")
	}
	return v.result(), nil
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// checkpointsOf returns chain's checkpoints in chain order.
func (s *Store) checkpointsOf(ctx context.Context, chain string) ([]Checkpoint, error) {
	var cps []Checkpoint
	err := s.eachCheckpoint(ctx, chain, func(cp Checkpoint) error {
		cps = append(cps, cp)
		return nil
	})
	return cps, err
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

// knownSeq returns the highest seq a checkpoint of cps whose signature
// verifies, by a known key, signs: for a chain the verifier does not
// check itself.
func (v *verifier) knownSeq(cps []Checkpoint) int64 {
	var seq int64
	for _, cp := range cps {
		pub, err := hex.DecodeString(cp.PublicKey)
		head, herr := hex.DecodeString(cp.HeadHash)
		sig, serr := hex.DecodeString(cp.Signature)
		prev, perr := hex.DecodeString(cp.PrevSignature)
		if err != nil || herr != nil || serr != nil || perr != nil || len(pub) != ed25519.PublicKeySize || cp.KeyID != KeyID(pub) {
			continue
		}
		if v.isKnown(signedCP{keyID: cp.KeyID, pub: pub}) && cp.Seq > seq &&
			ed25519.Verify(pub, CheckpointMessage(cp.ChainID, cp.Seq, head, cp.CreatedAt, cp.Final, prev), sig) {
			seq = cp.Seq
		}
	}
	return seq
}
