package sandgate

import (
	"context"
	"io"
	"time"
)

// AuditFilter selects audit events. Empty fields match everything; Since is
// inclusive and Until exclusive.
type AuditFilter struct {
	CorrelationID string
	RunID         string
	DecisionID    string
	Type          EventType
	// Types, when not empty, selects the events of any of these types;
	// Type, when set as well, still applies.
	Types   []EventType
	Actor   string
	Team    string
	Outcome string
	Since   time.Time
	Until   time.Time
	Limit   int
	Cursor  string
	// Newest pages the events newest first; a cursor from one order is
	// refused by the other.
	Newest bool
}

// AuditRecord is an event as stored in the trail, with its chain fields.
type AuditRecord struct {
	Event
	ChainID    string    `json:"chain_id"`
	Seq        int64     `json:"seq"`
	RecordedAt time.Time `json:"recorded_at"`
	// Body is the exact canonical bytes that were hashed.
	Body     string `json:"body"`
	PrevHash string `json:"prev_hash"`
	Hash     string `json:"hash"`
}

// ExportFormat is an audit export's format.
type ExportFormat string

// The export formats.
const (
	ExportJSONL ExportFormat = "jsonl"
	ExportCSV   ExportFormat = "csv"
)

// VerifyRange limits a verification to part of the trail. Zero values mean
// the whole trail.
type VerifyRange struct {
	ChainID string
	FromSeq int64
	ToSeq   int64
	Since   time.Time
	Until   time.Time
}

// VerifyProblem is one integrity problem found by a verification.
type VerifyProblem struct {
	ChainID string `json:"chain_id,omitempty"`
	Seq     int64  `json:"seq"`
	// Kind is a stable word: "hash_mismatch", "prev_hash_mismatch",
	// "seq_gap", "bad_signature", "checkpoint_mismatch",
	// "missing_tail", …
	Kind   string `json:"kind"`
	Detail string `json:"detail"`
}

// VerifyReport is a verification's answer.
type VerifyReport struct {
	OK       bool            `json:"ok"`
	Checked  int64           `json:"checked"`
	Problems []VerifyProblem `json:"problems"`
	// Purged lists the ranges retention dropped, as signed
	// retention.applied events record them: verify starts each chain
	// after them, so they are known-absent, not missing.
	Purged []PurgedRange `json:"purged,omitempty"`
	// Anchors are what the verification trusted keys from: pinned keys,
	// cluster root keys, the local node's key; each says whether it was
	// used. None means nothing vouched for any key (a problem).
	Anchors []VerifyAnchor `json:"anchors,omitempty"`
}

// VerifyAnchor is one trust anchor of a verification: a pinned key, a
// cluster root key, or the local node's key, where it was configured,
// and whether it was used (a local key the trail registers for no node of
// that name is not).
type VerifyAnchor struct {
	Kind   string `json:"kind"` // pinned | root | local
	KeyID  string `json:"key_id"`
	Node   string `json:"node,omitempty"`
	Source string `json:"source,omitempty"`
	Used   bool   `json:"used"`
	Detail string `json:"detail,omitempty"`
}

// AuditTrail is the audit trail as auditors read it.
type AuditTrail interface {
	// Query returns matching events oldest first and the cursor of the next
	// page ("" on the last page). A bad cursor is INVALID-REQUEST.
	Query(ctx context.Context, f AuditFilter) ([]AuditRecord, string, error)
	// Export streams every matching event to w in the format, without
	// holding them all in memory.
	Export(ctx context.Context, f AuditFilter, format ExportFormat, w io.Writer) error
	// Verify checks chain continuity, hashes and checkpoint signatures over
	// the range and lists every problem.
	Verify(ctx context.Context, r VerifyRange) (VerifyReport, error)
	// Ready reports whether events can be committed now, and whether the
	// local spool has room (AUDIT-UNAVAILABLE when not).
	Ready(ctx context.Context) error
}

// SinkStatus is where one audit sink (a SIEM's syslog receiver or
// webhook) stands, as the gateway's metrics and readiness report it.
type SinkStatus struct {
	// Name is the sink's name in the sinks file.
	Name string `json:"name"`
	// Delivering is true on the one gateway that holds the sink's lock
	// and delivers it; the others stand by.
	Delivering bool `json:"delivering"`
	// EventsBehind is how many events of the trail are past the sink's
	// cursor (filtered ones included), SecondsBehind how long ago the
	// oldest of them was recorded (0 when none is).
	EventsBehind  int64   `json:"events_behind"`
	SecondsBehind float64 `json:"seconds_behind"`
	// Delivered counts the events this gateway delivered (and the
	// receiver acknowledged), Failures the failed attempts, since start.
	Delivered uint64 `json:"delivered"`
	Failures  uint64 `json:"failures"`
	// LastError is the last attempt's failure, "" once one succeeds.
	LastError string `json:"last_error,omitempty"`
	// Warning says why the sink needs attention ("" when it does not):
	// failing, or further behind than its lag_warning.
	Warning string `json:"warning,omitempty"`
}

// CheckpointNote is a chain's checkpoint as a C2SP signed note
// (origin, tree size, root hash, signed with the node's checkpoint key),
// with the witnesses' cosignatures stored for it.
type CheckpointNote struct {
	ChainID  string
	Origin   string
	TreeSize int64
	RootHash []byte
	// Note is the signed note as the gateway signed it.
	Note      string
	CreatedAt time.Time
	// Cosignatures are witnesses' signature lines for this checkpoint
	// (tlog-cosignature/v1), in the order they were stored.
	Cosignatures []string
	// Endorsements are the cluster root's endorsements of the key that
	// signed the note, as the trail records them: what a witness that
	// trusts the root checks the note's key by.
	Endorsements []KeyEndorsement
}

// InclusionProof proves that an event's hash is leaf LeafIndex of its
// chain's tree of TreeSize leaves, whose root Checkpoint signs.
type InclusionProof struct {
	EventID    string
	ChainID    string
	Seq        int64
	LeafIndex  int64
	TreeSize   int64
	EventHash  []byte
	Hashes     [][]byte
	Checkpoint CheckpointNote
}

// ConsistencyProof proves that a chain's tree of From leaves is a prefix
// of its tree of To leaves, whose root Checkpoint signs.
type ConsistencyProof struct {
	ChainID    string
	From       int64
	To         int64
	FromRoot   []byte
	Hashes     [][]byte
	Checkpoint CheckpointNote
}

// Cosignature is a witness's cosignature of a checkpoint note: the note
// with the witness's signature line, and the witness's verifier key.
type Cosignature struct {
	Note       string
	WitnessKey string
}

// ReceiptFormat names the run receipt format.
const ReceiptFormat = "sandgate-receipt-v1"

// Receipt is one run's proof of record: its events with their canonical
// bodies, each with an inclusion proof in its chain's checkpointed tree,
// the signed checkpoint notes and the keys that signed them. It is a
// document, checked offline by `sandgate audit verify-receipt`, so the
// CLI and the API (GET /v1/runs/{id}/receipt) hand out the same bytes.
type Receipt struct {
	Format    string    `json:"format"`
	RunID     string    `json:"run_id"`
	CreatedAt time.Time `json:"created_at"`
	// Events are the run's events in the order they were recorded.
	Events []ReceiptEvent `json:"events"`
	// Checkpoints are the signed notes the proofs are relative to, one per
	// chain the events are on.
	Checkpoints []ReceiptCheckpoint `json:"checkpoints"`
	// Keys are the note verifier keys ("name+hash+base64(0x01‖key)") of
	// the keys that signed the notes.
	Keys []string `json:"keys"`
	// Purged names the ranges of the run's chains that retention dropped
	// before the run's first event on them, when there are any: events
	// of the run recorded there are known-absent, not missing.
	Purged []PurgedRange `json:"purged,omitempty"`
	// Endorsements are the cluster root's endorsements of the keys that
	// signed the notes, as the trail records them: what a verifier that
	// trusts the root checks the notes' keys by.
	Endorsements []KeyEndorsement `json:"endorsements,omitempty"`
}

// KeyEndorsement is a cluster root key's signature over a node's
// checkpoint key (sandgate-key-endorsement-v1; docs/audit.md).
type KeyEndorsement struct {
	Node      string `json:"node"`
	KeyID     string `json:"key_id"`
	PublicKey string `json:"public_key"`
	RootKeyID string `json:"root_key_id"`
	Signature string `json:"signature"`
}

// ReceiptEvent is one event of a receipt: its canonical body (the bytes
// hashed) and its place in its chain and tree.
type ReceiptEvent struct {
	EventID  string `json:"event_id"`
	Type     string `json:"type"`
	ChainID  string `json:"chain_id"`
	Seq      int64  `json:"seq"`
	Body     string `json:"body"`
	PrevHash string `json:"prev_hash"`
	Hash     string `json:"hash"`
	// LeafIndex is seq - 1; TreeSize is the size of the checkpoint's tree.
	LeafIndex int64 `json:"leaf_index"`
	TreeSize  int64 `json:"tree_size"`
	// Proof is the RFC 6962 audit path, base64.
	Proof []string `json:"proof"`
}

// ReceiptCheckpoint is a chain's checkpoint note in a receipt.
type ReceiptCheckpoint struct {
	ChainID string `json:"chain_id"`
	Note    string `json:"note"`
}

// PurgedRange is a range of a chain that retention dropped: seq 1 (or the
// previous purge's end) to LastSeq, whose last event hashed to LastHash,
// recorded by the retention.applied event EventID.
type PurgedRange struct {
	ChainID   string    `json:"chain_id"`
	Partition string    `json:"partition"`
	FirstSeq  int64     `json:"first_seq"`
	LastSeq   int64     `json:"last_seq"`
	LastHash  string    `json:"last_hash"`
	From      time.Time `json:"from"`
	To        time.Time `json:"to"`
	EventID   string    `json:"event_id"`
}

// WitnessAlarmReport is an alarm a witness raised, as it posts it: the
// alarm as a note signed with the witness's key (tlog-cosignature/v1),
// and that key's verifier key; and who posted it, with the request's
// correlation ID.
type WitnessAlarmReport struct {
	Note          string
	WitnessKey    string
	Actor, Team   string
	CorrelationID string
}

// WitnessAlarm is a witness's alarm as the trail recorded it: which log,
// what kind of inconsistency, the tree the witness had seen and the one
// it was offered, signed by Witness at RaisedAt. KnownWitness says
// whether the operator pinned that witness's key. EventID is its
// audit.witness_alarm event, or with Repeat the one it repeats.
type WitnessAlarm struct {
	EventID      string
	Repeat       bool
	Witness      string
	WitnessKey   string
	Origin       string
	ChainID      string
	Kind         string
	Detail       string
	SeenSize     int64
	SeenRoot     string
	OfferedSize  int64
	OfferedRoot  string
	RaisedAt     time.Time
	KnownWitness bool
}

// AuditProofs answers transparency-log questions about the trail: each
// chain is an RFC 6962 Merkle tree over its events' hashes.
type AuditProofs interface {
	// Checkpoint returns the newest checkpoint note of a chain ("" for
	// the serving node's); NOT-FOUND when it has none.
	Checkpoint(ctx context.Context, chainID string) (CheckpointNote, error)
	// InclusionProof proves an event is in its chain's tree of treeSize
	// leaves (0: the newest checkpoint's); NOT-FOUND for an unknown event
	// or a size no checkpoint note signs, INVALID-REQUEST for a size
	// smaller than the event's seq.
	InclusionProof(ctx context.Context, eventID string, treeSize int64) (InclusionProof, error)
	// ConsistencyProof proves the chain's tree of from leaves is a prefix
	// of its tree of to leaves (0: the newest checkpoint's); NOT-FOUND
	// when no checkpoint note signs to, INVALID-REQUEST when from is not
	// in 1..to.
	ConsistencyProof(ctx context.Context, chainID string, from, to int64) (ConsistencyProof, error)
	// AddCosignature stores a witness's cosignature of one of the
	// trail's checkpoint notes (one per witness per checkpoint) and
	// returns that checkpoint with its cosignatures; INVALID-REQUEST
	// when the witness's key is not one the operator pinned, the note is
	// not one of the trail's under its chain's origin, or the signature
	// does not verify with the witness's key.
	AddCosignature(ctx context.Context, c Cosignature) (CheckpointNote, error)
	// Receipt builds a run's receipt; NOT-FOUND when the trail holds no
	// event of the run or one is not yet under a checkpoint note, GONE
	// when retention dropped the month its events were in.
	Receipt(ctx context.Context, runID string) (Receipt, error)
	// RecordWitnessAlarm checks a witness's signed alarm and records it
	// (audit.witness_alarm), or answers the alarm it repeats;
	// INVALID-REQUEST when it is malformed or its signature does not
	// verify with the key posted with it, RATE-LIMITED past the alarms a
	// principal or a witness may have recorded in an hour,
	// AUDIT-UNAVAILABLE when the trail cannot record it.
	RecordWitnessAlarm(ctx context.Context, r WitnessAlarmReport) (WitnessAlarm, error)
}
