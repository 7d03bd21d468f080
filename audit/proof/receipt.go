package proof

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/sandgate/sandgate"
)

// Run receipts (sandgate.Receipt): a run's events with their canonical
// bodies, each with its inclusion proof in a checkpointed tree of its
// chain, the checkpoint notes and the keys that signed them.
// VerifyReceipt checks one with nothing else: no database, no network.

// Receipt is one run's proof of record.
type Receipt = sandgate.Receipt

// ReceiptEvent is one event of a receipt.
type ReceiptEvent = sandgate.ReceiptEvent

// ReceiptProblem is one thing wrong with a receipt.
type ReceiptProblem struct {
	EventID string `json:"event_id,omitempty"`
	ChainID string `json:"chain_id,omitempty"`
	Seq     int64  `json:"seq,omitempty"`
	Kind    string `json:"kind"`
	Detail  string `json:"detail"`
}

// ReceiptReport is what VerifyReceipt found.
type ReceiptReport struct {
	OK     bool   `json:"ok"`
	RunID  string `json:"run_id"`
	Events int    `json:"events"`
	// Types are the verified events' types in order.
	Types    []string         `json:"types"`
	Problems []ReceiptProblem `json:"problems"`
	// Keys are the verifier keys that signed the checkpoints.
	Keys []string `json:"keys"`
	// Purged repeats the ranges of the run's chains the receipt says
	// retention dropped: the gateway's word, which no proof backs.
	Purged []sandgate.PurgedRange `json:"purged,omitempty"`
}

// Receipt problem kinds.
const (
	ReceiptBadFormat     = "bad_format"     // not a receipt this version reads
	ReceiptBadBody       = "bad_body"       // a body is not a canonical event of this run
	ReceiptHashMismatch  = "hash_mismatch"  // a body does not hash to its event hash
	ReceiptBadProof      = "bad_proof"      // an inclusion proof does not lead to the note's root
	ReceiptBadNote       = "bad_note"       // a note is malformed or not signed by a receipt key
	ReceiptUntrustedKey  = "untrusted_key"  // keys were pinned and a note is not signed by one
	ReceiptNoCheckpoint  = "no_checkpoint"  // an event's chain has no checkpoint in the receipt
	ReceiptMissingEvents = "missing_events" // the receipt holds no events
)

// VerifyReceipt checks a receipt on its own: every body is canonical, of
// the run, and hashes (with its prev_hash, chain and seq) to its event
// hash; every event hash is a leaf of its chain's checkpointed tree by its
// inclusion proof; every note is signed by a key of the receipt, or, when
// pinned is not empty, by one of the pinned verifier keys.
func VerifyReceipt(r Receipt, pinned []string) ReceiptReport {
	rep := ReceiptReport{RunID: r.RunID, Events: len(r.Events), Problems: []ReceiptProblem{}, Purged: r.Purged}
	add := func(e *ReceiptEvent, kind, format string, args ...any) {
		p := ReceiptProblem{Kind: kind, Detail: fmt.Sprintf(format, args...)}
		if e != nil {
			p.EventID, p.ChainID, p.Seq = e.EventID, e.ChainID, e.Seq
		}
		rep.Problems = append(rep.Problems, p)
	}
	if r.Format != sandgate.ReceiptFormat {
		add(nil, ReceiptBadFormat, "format %q, want %q", r.Format, sandgate.ReceiptFormat)
	}
	if len(r.Events) == 0 {
		add(nil, ReceiptMissingEvents, "the receipt holds no events")
	}
	keys := r.Keys
	if len(pinned) > 0 {
		keys = pinned
	}
	rep.Keys = keys
	roots := map[string]NoteCheckpoint{}
	for _, cp := range r.Checkpoints {
		n, c, err := OpenNote(cp.Note, keys...)
		if err != nil {
			kind := ReceiptBadNote
			if len(pinned) > 0 {
				kind = ReceiptUntrustedKey
			}
			add(nil, kind, "checkpoint of chain %s: %v", cp.ChainID, err)
			continue
		}
		if !strings.HasSuffix(c.Origin, "/"+cp.ChainID) {
			add(nil, ReceiptBadNote, "checkpoint of chain %s names origin %q", cp.ChainID, c.Origin)
			continue
		}
		signedByOrigin := false
		for _, s := range n.Sigs {
			signedByOrigin = signedByOrigin || s.Name == c.Origin
		}
		if !signedByOrigin {
			add(nil, ReceiptBadNote, "checkpoint of chain %s is not signed by a key named %q", cp.ChainID, c.Origin)
			continue
		}
		roots[cp.ChainID] = c
	}
	for i := range r.Events {
		e := &r.Events[i]
		if ok := verifyReceiptEvent(r.RunID, e, roots, func(kind, format string, args ...any) { add(e, kind, format, args...) }); ok {
			rep.Types = append(rep.Types, e.Type)
		}
	}
	rep.OK = len(rep.Problems) == 0
	return rep
}

// verifyReceiptEvent checks one event of a receipt, reporting through
// add; it reports whether the event checked out.
func verifyReceiptEvent(runID string, e *ReceiptEvent, roots map[string]NoteCheckpoint, add func(kind, format string, args ...any)) bool {
	body := []byte(e.Body)
	var b struct {
		EventID string `json:"event_id"`
		Type    string `json:"type"`
		RunID   string `json:"run_id"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		add(ReceiptBadBody, "body is not JSON: %v", err)
		return false
	}
	if canon, err := marshalCanonical(jsonNumbers(body)); err != nil || !bytes.Equal(canon, body) {
		add(ReceiptBadBody, "body is not in canonical form")
		return false
	}
	if b.EventID != e.EventID || b.Type != e.Type || b.RunID != runID {
		add(ReceiptBadBody, "body says event %q type %q run %q; the receipt %q %q %q", b.EventID, b.Type, b.RunID, e.EventID, e.Type, runID)
		return false
	}
	prev, err1 := hex.DecodeString(e.PrevHash)
	h, err2 := hex.DecodeString(e.Hash)
	if err1 != nil || err2 != nil || len(prev) != HashSize || len(h) != HashSize || e.Seq < 1 {
		add(ReceiptBadBody, "prev_hash, hash or seq malformed")
		return false
	}
	if got := ChainHash(prev, e.ChainID, e.Seq, body); !bytes.Equal(got, h) {
		add(ReceiptHashMismatch, "SHA-256(prev_hash ‖ chain ‖ seq ‖ body) is %x, the event hash %s", got, e.Hash)
		return false
	}
	c, ok := roots[e.ChainID]
	if !ok {
		add(ReceiptNoCheckpoint, "no verified checkpoint of chain %s in the receipt", e.ChainID)
		return false
	}
	if e.TreeSize != c.Size || e.LeafIndex != e.Seq-1 {
		add(ReceiptBadProof, "proof for leaf %d of a tree of %d; the checkpoint's tree has %d leaves", e.LeafIndex, e.TreeSize, c.Size)
		return false
	}
	proof := make(tlog.RecordProof, len(e.Proof))
	for i, p := range e.Proof {
		raw, err := base64.StdEncoding.DecodeString(p)
		if err != nil || len(raw) != tlog.HashSize {
			add(ReceiptBadProof, "proof hash %d is not base64 of 32 bytes", i)
			return false
		}
		proof[i] = tlog.Hash(raw)
	}
	if err := tlog.CheckRecord(proof, c.Size, c.Root, e.LeafIndex, LeafHash(h)); err != nil {
		add(ReceiptBadProof, "the inclusion proof does not lead to the checkpoint's root: %v", err)
		return false
	}
	return true
}

// PinnedVerifierKeys turns what an auditor pins into note verifier keys:
// each entry is a verifier key ("name+hash+key") or an Ed25519 public key
// (PEM or hex), which is paired with every origin of the receipt.
func PinnedVerifierKeys(r Receipt, pinned [][]byte) ([]string, error) {
	var out []string
	seen := map[string]bool{}
	keep := func(k string) {
		if !seen[k] {
			seen[k] = true
			out = append(out, k)
		}
	}
	for _, p := range pinned {
		s := strings.TrimSpace(string(p))
		if _, err := note.NewVerifier(s); err == nil {
			keep(s)
			continue
		}
		pub, err := ParsePublicKey(p)
		if err != nil {
			return nil, fmt.Errorf("pinned key: neither a note verifier key nor an Ed25519 public key: %w", err)
		}
		for _, cp := range r.Checkpoints {
			vkey, err := NoteVerifierKey(NoteOrigin(cp.Note), pub)
			if err != nil {
				return nil, fmt.Errorf("pinned key for %q: %w", NoteOrigin(cp.Note), err)
			}
			keep(vkey)
		}
	}
	return out, nil
}
