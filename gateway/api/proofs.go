package api

import (
	"encoding/base64"
	"encoding/hex"
	"time"

	"github.com/sandgate/sandgate"
)

// CheckpointView is GET /v1/audit/checkpoint with Accept:
// application/json: a chain's newest checkpoint note. Without that
// header the answer is Note as text/plain.
type CheckpointView struct {
	ChainID  string `json:"chain_id"`
	Origin   string `json:"origin"`
	TreeSize int64  `json:"tree_size"`
	// RootHash is the tree's root, base64 as in the note.
	RootHash  string    `json:"root_hash"`
	CreatedAt time.Time `json:"created_at"`
	// Note is the C2SP signed note with the witnesses' cosignature
	// lines after the gateway's signature.
	Note         string   `json:"note"`
	Cosignatures []string `json:"cosignatures"`
	// Endorsements are the cluster root's endorsements of the note's key.
	Endorsements []sandgate.KeyEndorsement `json:"endorsements,omitempty"`
}

// InclusionProofView is GET /v1/audit/proof/inclusion.
type InclusionProofView struct {
	EventID   string `json:"event_id"`
	ChainID   string `json:"chain_id"`
	Seq       int64  `json:"seq"`
	LeafIndex int64  `json:"leaf_index"`
	TreeSize  int64  `json:"tree_size"`
	// EventHash is the event's chain hash, hex as in exports; the leaf
	// hash is SHA-256(0x00 ‖ event hash).
	EventHash string `json:"event_hash"`
	// Hashes is the RFC 6962 audit path, base64.
	Hashes []string `json:"hashes"`
	// Checkpoint is the signed note of the tree the proof is relative to.
	Checkpoint string `json:"checkpoint"`
}

// ConsistencyProofView is GET /v1/audit/proof/consistency.
type ConsistencyProofView struct {
	ChainID string `json:"chain_id"`
	From    int64  `json:"from"`
	To      int64  `json:"to"`
	// FromRoot is the root hash of the tree of From leaves, base64.
	FromRoot string `json:"from_root"`
	// Hashes is the RFC 6962 consistency proof, base64.
	Hashes     []string `json:"hashes"`
	Checkpoint string   `json:"checkpoint"`
}

// CosignatureRequest is the body of POST /v1/audit/checkpoint/cosignature.
type CosignatureRequest struct {
	// Note is the checkpoint note with the witness's cosignature line
	// (other signature lines may stay).
	Note string `json:"note"`
	// WitnessKey is the witness's verifier key,
	// "name+hash+base64(0x04‖Ed25519 public key)".
	WitnessKey string `json:"witness_key"`
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func b64s(bs [][]byte) []string {
	out := make([]string, len(bs))
	for i, b := range bs {
		out[i] = b64(b)
	}
	return out
}

func withCosignatures(cp sandgate.CheckpointNote) string {
	note := cp.Note
	for _, l := range cp.Cosignatures {
		note += l + "\n"
	}
	return note
}

// NewCheckpointView returns the wire form of a checkpoint note.
func NewCheckpointView(cp sandgate.CheckpointNote) CheckpointView {
	cos := cp.Cosignatures
	if cos == nil {
		cos = []string{}
	}
	return CheckpointView{ChainID: cp.ChainID, Origin: cp.Origin, TreeSize: cp.TreeSize, RootHash: b64(cp.RootHash),
		CreatedAt: cp.CreatedAt, Note: withCosignatures(cp), Cosignatures: cos, Endorsements: cp.Endorsements}
}

// NewInclusionProofView returns the wire form of an inclusion proof.
func NewInclusionProofView(p sandgate.InclusionProof) InclusionProofView {
	return InclusionProofView{EventID: p.EventID, ChainID: p.ChainID, Seq: p.Seq, LeafIndex: p.LeafIndex,
		TreeSize: p.TreeSize, EventHash: hex.EncodeToString(p.EventHash), Hashes: b64s(p.Hashes),
		Checkpoint: withCosignatures(p.Checkpoint)}
}

// NewConsistencyProofView returns the wire form of a consistency proof.
func NewConsistencyProofView(p sandgate.ConsistencyProof) ConsistencyProofView {
	return ConsistencyProofView{ChainID: p.ChainID, From: p.From, To: p.To, FromRoot: b64(p.FromRoot),
		Hashes: b64s(p.Hashes), Checkpoint: withCosignatures(p.Checkpoint)}
}

// WitnessAlarmRequest is the body of POST /v1/audit/witness/alarm: a
// witness's alarm, signed with its key.
type WitnessAlarmRequest struct {
	// Alarm is the alarm as a note signed by the witness
	// (sandgate-witness-alarm/v1; docs/audit.md, "Witness").
	Alarm string `json:"alarm"`
	// WitnessKey is the witness's verifier key,
	// "name+hash+base64(0x04‖Ed25519 public key)".
	WitnessKey string `json:"witness_key"`
}

// WitnessAlarmView answers POST /v1/audit/witness/alarm: the alarm as the
// trail recorded it (event audit.witness_alarm).
type WitnessAlarmView struct {
	EventID      string    `json:"event_id"`
	Witness      string    `json:"witness"`
	WitnessKey   string    `json:"witness_key"`
	Origin       string    `json:"origin"`
	ChainID      string    `json:"chain_id"`
	Kind         string    `json:"kind"`
	Detail       string    `json:"detail"`
	SeenSize     int64     `json:"seen_size"`
	SeenRoot     string    `json:"seen_root,omitempty"`
	OfferedSize  int64     `json:"offered_size"`
	OfferedRoot  string    `json:"offered_root,omitempty"`
	RaisedAt     time.Time `json:"raised_at"`
	KnownWitness bool      `json:"known_witness"`
	// Repeat says the alarm repeats one recorded within a day (EventID
	// is that one's): it was counted, not recorded again.
	Repeat bool `json:"repeat,omitempty"`
}
