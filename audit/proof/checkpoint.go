package proof

import (
	"crypto/ed25519"
	"encoding/hex"
	"fmt"
	"time"
)

// Signed statements of a chain's head.

// Checkpoint is a signed statement of a chain's head: after seq events the
// chain's hash was HeadHash, at CreatedAt. Each checkpoint also signs the
// previous checkpoint's signature of the same chain, so checkpoints form a
// chain of their own.
type Checkpoint struct {
	ChainID       string    `json:"chain_id"`
	Seq           int64     `json:"seq"`
	HeadHash      string    `json:"head_hash"`
	CreatedAt     time.Time `json:"created_at"`
	Final         bool      `json:"final"`
	PrevSignature string    `json:"prev_signature"`
	Signature     string    `json:"signature"`
	KeyID         string    `json:"key_id"`
	PublicKey     string    `json:"public_key"`
	// Note is the checkpoint as a signed note of the chain's Merkle tree
	// (see note.go), when the writer kept the tree.
	Note string `json:"note,omitempty"`
}

// CheckpointMessage returns the bytes a checkpoint's signature covers:
//
//	sandgate-checkpoint-v1\n chain_id\n seq\n hex(head_hash)\n
//	created_at (RFC 3339, UTC, microseconds)\n final\n hex(prev_signature)
//
// (fields separated by single newlines, no trailing newline).
func CheckpointMessage(chainID string, seq int64, headHash []byte, createdAt time.Time, final bool, prevSig []byte) []byte {
	return fmt.Appendf(nil, "sandgate-checkpoint-v1\n%s\n%d\n%x\n%s\n%t\n%x",
		chainID, seq, headHash, CanonicalTime(createdAt).Format(TimeLayout), final, prevSig)
}

// SignCheckpoint returns a checkpoint of the head signed with key.
func SignCheckpoint(key ed25519.PrivateKey, chainID string, seq int64, head []byte, at time.Time, final bool, prevSig []byte) Checkpoint {
	at = CanonicalTime(at)
	sig := ed25519.Sign(key, CheckpointMessage(chainID, seq, head, at, final, prevSig))
	pub := key.Public().(ed25519.PublicKey)
	return Checkpoint{
		ChainID:       chainID,
		Seq:           seq,
		HeadHash:      hex.EncodeToString(head),
		CreatedAt:     at,
		Final:         final,
		PrevSignature: hex.EncodeToString(prevSig),
		Signature:     hex.EncodeToString(sig),
		KeyID:         KeyID(pub),
		PublicKey:     hex.EncodeToString(pub),
	}
}
