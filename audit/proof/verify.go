package proof

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
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
	ProblemNoteMismatch       = "note_mismatch"       // a checkpoint note is not signed by its checkpoint's key, or does not state the chain's tree
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
// vouches for it), trusted (the anchors make it so, and why) and pinned.
// Its JSON is sandgate.VerifyReport's with "keys" and "pinned" added.
type Report struct {
	sandgate.VerifyReport
	Keys []KeyRecord `json:"keys"`
	// Pinned is how many keys were pinned.
	Pinned int `json:"pinned"`
}

// Row is one trail entry as the verifier sees it, from the database
// or from an export.
type Row struct {
	ChainID    string
	Seq        int64
	RecordedAt time.Time
	Event      sandgate.Event
	// PayloadJSON is the payload column as JSON text (any spelling) when
	// Event.Payload is left nil: the verifier then compares it with the
	// body as text and decodes it only for what needs the values.
	PayloadJSON []byte
	Body        []byte
	PrevHash    []byte
	Hash        []byte
}

// payload decodes PayloadJSON into Event.Payload (numbers as written, as
// the trail's readers decode the column) if it is not decoded yet.
func (r *Row) payload() map[string]any {
	if r.Event.Payload == nil && len(r.PayloadJSON) > 0 {
		dec := json.NewDecoder(bytes.NewReader(r.PayloadJSON))
		dec.UseNumber()
		_ = dec.Decode(&r.Event.Payload)
	}
	return r.Event.Payload
}

// Verifier checks chains row by row: online, audit feeds it the trail
// from the database (NewOnlineVerifier); offline, VerifyExportWith and
// VerifyArchiveWith feed it files. It holds per chain only the last
// hash, the rows that arrived ahead of their turn (exports are in time
// order, not seq order), the chain's checkpoints, and per stretch of rows
// between two checkpoints when its rows were recorded.
type Verifier struct {
	anchors    Anchors
	trust      *Trust // resolveKeys decides it
	online     bool
	now        time.Time
	staleAfter time.Duration // 0: no staleness checks (offline)
	ordered    bool          // rows come in seq order per chain (online)
	report     sandgate.VerifyReport
	chains     map[string]*chainState

	// keys are the registrations: the registry's, set before any row
	// (online), or those the rows' key events hold (keysFromRows,
	// offline), and endorsements the root endorsements, likewise.
	// resolveKeys judges them into trust and known: known are the keys
	// the registry vouches for and the trusted ones (whose checkpoints
	// cover rows), trusted those the anchors make so.
	keys         []KeyRecord
	endorsements []Endorsement
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
	retention []RetentionRecord
	// purged holds the retention boundaries honoured; purgedSeen the
	// ranges already reported.
	purged     map[string]PurgeBoundary
	purgedSeen map[string]bool

	// rebuilt and payload are checkBody's scratch, reused from row to
	// row.
	rebuilt, payload []byte
}

type chainState struct {
	id        string
	next      int64 // the seq expected next
	lastHash  []byte
	started   bool
	ahead     map[int64]*Row
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

	// tree is the chain's Merkle tree, built as rows are linked from
	// seq 1, to check the checkpoint notes' roots; nil once a range or a
	// gap makes it unknowable.
	tree *Frontier
}

func newVerifier(anchors Anchors, now time.Time, staleAfter time.Duration) *Verifier {
	v := &Verifier{anchors: anchors, now: now, staleAfter: staleAfter, chains: map[string]*chainState{}, purged: map[string]PurgeBoundary{}}
	v.report.Problems = []sandgate.VerifyProblem{}
	return v
}

// NewOnlineVerifier returns a verifier of the live trail: its key
// registry and root endorsements, the anchors to trust keys from, the
// database's clock when verification began (dbNow) and the verifier's
// (now), and the writers' checkpoint interval. Rows come in seq order per
// chain; rows no checkpoint by a known key covers may be twice the
// interval old, judged at now.
func NewOnlineVerifier(anchors Anchors, registry []KeyRecord, endorsements []Endorsement, dbNow, now time.Time, interval time.Duration) *Verifier {
	grace := 2 * interval
	if anchors.Local != nil {
		l := *anchors.Local
		l.Lineage = true // the registry is the database's
		anchors.Local = &l
	}
	v := newVerifier(anchors, later(dbNow, now), grace)
	v.online, v.ordered, v.grace = true, true, grace
	v.futureAfter, v.futureClock = dbNow, "database's"
	v.keys, v.endorsements = registry, endorsements
	v.resolveKeys()
	return v
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// Checkpoints gives the verifier chain's checkpoints, in chain order,
// before the chain's rows.
func (v *Verifier) Checkpoints(chain string, cps []Checkpoint) { v.checkpoints(chain, cps) }

// Partial says chain is checked over a range only: what only the whole
// chain tells (a missing tail, uncovered rows, a stale checkpoint) is not
// judged.
func (v *Verifier) Partial(chain string) { v.chain(chain).checkTail = false }

// Row checks one row of the trail.
func (v *Verifier) Row(r *Row) { v.row(r) }

// Finish judges what only the end tells, with dbNow the database's clock
// once every row was read (rows a live writer committed meanwhile are not
// in the future), and returns the report.
func (v *Verifier) Finish(dbNow time.Time) Report {
	v.futureEnd = dbNow
	return v.result()
}

func (v *Verifier) problem(chain string, seq int64, kind, format string, args ...any) {
	if len(v.report.Problems) > maxProblems {
		return
	}
	v.add(sandgate.VerifyProblem{ChainID: chain, Seq: seq, Kind: kind, Detail: fmt.Sprintf(format, args...)})
}

// add lists p, or from the maxProblems-th on says that the list was cut.
func (v *Verifier) add(p sandgate.VerifyProblem) {
	if len(v.report.Problems) == maxProblems {
		v.report.Problems = append(v.report.Problems, sandgate.VerifyProblem{Kind: ProblemTooMany, Detail: "further problems not listed"})
	}
	if len(v.report.Problems) > maxProblems {
		return
	}
	v.report.Problems = append(v.report.Problems, p)
}

// Fork hands chain's rows to a verifier of their own, so that chains are
// checked on several goroutines at once: until the end a chain's check
// needs nothing of another's. Give the fork the chain's rows (Row, and
// Anchor or StartAfterPurge before them) and nothing else; this verifier
// must not be used for that chain meanwhile. Join takes the fork's
// findings back; joining the forks in the order the chains would have
// been read gives the report a verifier reading them one after another
// gives. Only an online verifier forks: offline, every chain's rows come
// in one stream, and its key events are read from them.
func (v *Verifier) Fork(chain string) *Verifier {
	if !v.ordered || v.keysFromRows {
		panic("proof: Fork of an offline verifier")
	}
	f := *v
	f.chains = map[string]*chainState{chain: v.chain(chain)}
	f.report = sandgate.VerifyReport{Problems: []sandgate.VerifyProblem{}}
	f.retention = nil
	f.rebuilt, f.payload = nil, nil
	return &f
}

// Join takes back what fork, made by Fork, found in its chain's rows.
func (v *Verifier) Join(fork *Verifier) {
	v.report.Checked += fork.report.Checked
	for _, p := range fork.report.Problems {
		if p.Kind != ProblemTooMany {
			v.add(p)
		}
	}
	v.report.Purged = append(v.report.Purged, fork.report.Purged...)
	v.retention = append(v.retention, fork.retention...)
}

func (v *Verifier) chain(id string) *chainState {
	c := v.chains[id]
	if c == nil {
		c = &chainState{id: id, next: 1, lastHash: make([]byte, HashSize), ahead: map[int64]*Row{},
			cps: map[int64][]Checkpoint{}, checkTail: true, stretch: make([]stretch, 1),
			tree: NewFrontier()}
		v.chains[id] = c
	}
	return c
}

// row checks one entry on its own, then in chain order when its turn
// comes.
func (v *Verifier) row(r *Row) {
	v.report.Checked++
	if want := ChainHash(r.PrevHash, r.ChainID, r.Seq, r.Body); len(r.PrevHash) != HashSize || !bytes.Equal(want, r.Hash) {
		v.problem(r.ChainID, r.Seq, ProblemHashMismatch, "stored hash %x, computed %x", r.Hash, want)
	}
	v.checkBody(r)
	if r.Event.Type == sandgate.EventRetentionApplied {
		if p, err := DecodeArchived(r.payload()); err == nil {
			v.retention = append(v.retention, RetentionRecord{EventID: r.Event.ID, ChainID: r.ChainID, Seq: r.Seq, Payload: p})
		}
	}
	if v.keysFromRows {
		r.payload()
		if k, ok := KeyFromEvent(r.Event, r.RecordedAt); ok {
			v.rowKeys = append(v.rowKeys, rowKey{k: k, at: r.RecordedAt})
		}
		if e, ok := EndorsementFromEvent(r.Event); ok {
			v.endorsements = append(v.endorsements, e)
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
		c.ahead[r.Seq] = &Row{ChainID: r.ChainID, Seq: r.Seq, RecordedAt: r.RecordedAt, PrevHash: r.PrevHash, Hash: r.Hash}
	}
}

// link checks r against the row before it and the checkpoints at its seq.
func (v *Verifier) link(c *chainState, r *Row) {
	if !bytes.Equal(r.PrevHash, c.lastHash) {
		if c.started || r.Seq == 1 {
			v.problem(c.id, r.Seq, ProblemPrevHashMismatch, "prev_hash %x, previous row's hash %x", r.PrevHash, c.lastHash)
		}
	}
	if c.tree != nil && r.Seq != c.tree.Size()+1 {
		c.tree = nil
	}
	if c.tree != nil {
		if _, err := c.tree.Push(r.Hash); err != nil {
			c.tree = nil
		}
	}
	for _, cp := range c.cps[r.Seq] {
		if cp.HeadHash != hex.EncodeToString(r.Hash) {
			v.problem(c.id, r.Seq, ProblemCheckpointMismatch, "checkpoint at %s signed hash %s, the row's hash is %x", cp.CreatedAt.Format(time.RFC3339), cp.HeadHash, r.Hash)
		}
		if cp.Note != "" {
			v.checkNote(c, cp)
		}
	}
	c.started = true
	c.lastHash = r.Hash
	c.lastSeq = r.Seq
	c.next = r.Seq + 1
}

// Anchor starts a chain's check at seq (a range that does not begin at 1)
// with the hash of the row before it, when known.
func (v *Verifier) Anchor(chain string, seq int64, prevHash []byte) {
	c := v.chain(chain)
	c.next = seq
	c.lastSeq = seq - 1
	if seq > 1 {
		c.tree = nil
	}
	if prevHash != nil {
		c.lastHash = prevHash
		c.started = true
	}
}

// finish reports, per chain, what only the end can tell: rows that never
// got their turn, checkpoints past the last row, rows in the future, rows
// no checkpoint by a known key covers, a stale tail; then the keys.
func (v *Verifier) finish() sandgate.VerifyReport {
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
			v.StartAfterPurge(id, a)
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
	v.report.Anchors = v.trust.Anchors()
	v.report.OK = len(v.report.Problems) == 0
	return v.report
}

// result is the report with the keys judged.
func (v *Verifier) result() Report {
	rep := Report{VerifyReport: v.finish(), Keys: v.keys, Pinned: len(v.anchors.Pinned)}
	if rep.Keys == nil {
		rep.Keys = []KeyRecord{}
	}
	return rep
}
