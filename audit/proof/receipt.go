package proof

import (
	"bytes"
	"crypto/ed25519"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
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

// ProvenEvent is one event a receipt proves is in the trail: its type,
// identity and place, and for a decision or an end what it says.
type ProvenEvent struct {
	Type     string `json:"type"`
	EventID  string `json:"event_id"`
	ChainID  string `json:"chain_id"`
	Seq      int64  `json:"seq"`
	Outcome  string `json:"outcome,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	// PolicyRevision is a decision's.
	PolicyRevision string `json:"policy_revision,omitempty"`
}

// ReceiptReport is what VerifyReceipt found. Proves lists exactly the
// events it proves, in the receipt's order; Decision and End are the
// run's admission decision and end among them; Statement says in words
// what is proven and what is not.
type ReceiptReport struct {
	OK     bool   `json:"ok"`
	RunID  string `json:"run_id"`
	Events int    `json:"events"`
	// Types are the proven events' types in order.
	Types    []string      `json:"types"`
	Proves   []ProvenEvent `json:"proves"`
	Decision *ProvenEvent  `json:"decision,omitempty"`
	End      *ProvenEvent  `json:"end,omitempty"`
	// Statement is what the receipt proves and what it does not, in
	// words.
	Statement string           `json:"statement"`
	Problems  []ReceiptProblem `json:"problems"`
	// Keys are the key IDs whose signatures on the checkpoint notes were
	// checked, and Anchors what they were trusted from.
	Keys    []string                `json:"keys"`
	Anchors []sandgate.VerifyAnchor `json:"anchors"`
	// Purged repeats the ranges of the run's chains the receipt says
	// retention dropped: the gateway's word, which no proof backs.
	Purged []sandgate.PurgedRange `json:"purged,omitempty"`
}

// Receipt problem kinds.
const (
	ReceiptBadFormat       = "bad_format"       // not a receipt this version reads
	ReceiptTooLarge        = "too_large"        // more events, checkpoints, keys or bytes than a receipt holds
	ReceiptBadBody         = "bad_body"         // a body is not a canonical event of this run
	ReceiptHashMismatch    = "hash_mismatch"    // a body does not hash to its event hash
	ReceiptBadProof        = "bad_proof"        // an inclusion proof does not lead to the note's root
	ReceiptBadNote         = "bad_note"         // a note is malformed or not its chain's
	ReceiptUntrustedKey    = "untrusted_key"    // a note is signed by no trusted key
	ReceiptUnpinnedKeys    = "unpinned_keys"    // nothing pinned: the receipt's own keys vouch for nothing
	ReceiptNoCheckpoint    = "no_checkpoint"    // an event's chain has no verified checkpoint in the receipt
	ReceiptMissingEvents   = "missing_events"   // the receipt holds no events
	ReceiptMissingDecision = "missing_decision" // no admission decision of the run is proven
	ReceiptMissingEnd      = "missing_end"      // no end of the run is proven
)

// Bounds of what a receipt may hold: checking one costs time linear in
// its size, and it is refused past them.
const (
	MaxReceiptBytes    = 64 << 20
	MaxReceiptEvents   = 20000
	maxReceiptChains   = 64
	maxReceiptKeys     = 64
	maxReceiptBody     = 1 << 20
	maxReceiptProof    = 64
	maxReceiptNote     = 16 << 10
	maxReceiptAnchored = 256
)

// decisionTypes are the events that record a run's admission decision;
// endTypes those that record its end (a denial is both).
var (
	decisionTypes = []string{string(sandgate.EventAdmissionAllowed), string(sandgate.EventAdmissionDenied)}
	endTypes      = []string{string(sandgate.EventContainerExited), string(sandgate.EventContainerOOMKilled),
		string(sandgate.EventRunTimedOut), string(sandgate.EventRunCancelled), string(sandgate.EventRunFailed),
		string(sandgate.EventRunLost), string(sandgate.EventAdmissionDenied), string(sandgate.EventSessionEnded)}
)

// ReceiptOptions say which keys a receipt's notes are trusted from: the
// anchors (pinned keys; root keys, through the endorsements the receipt
// carries, each for its node's chains; the local key, for its node's
// chains) and note verifier keys pinned as such. With none, the receipt's
// own keys are checked but vouch for nothing, and the report says so.
type ReceiptOptions struct {
	Anchors      Anchors
	VerifierKeys []string
}

// VerifyReceipt checks a receipt on its own: every body is canonical, of
// the run, and hashes (with its prev_hash, chain and seq) to its event
// hash; every event hash is a leaf of its chain's checkpointed tree by its
// inclusion proof; every note is its chain's, signed by a trusted key
// (ReceiptOptions); and the run's decision and its end are among the
// events proven. It costs time linear in the receipt's size, which is
// bounded: each note's signatures are looked up by key hash.
func VerifyReceipt(r Receipt, o ReceiptOptions) ReceiptReport {
	rep := ReceiptReport{RunID: r.RunID, Events: len(r.Events), Types: []string{}, Proves: []ProvenEvent{},
		Problems: []ReceiptProblem{}, Keys: []string{}, Purged: r.Purged}
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
	if err := receiptBounds(r, o); err != nil {
		add(nil, ReceiptTooLarge, "%v", err)
		return rep
	}
	if len(r.Events) == 0 {
		add(nil, ReceiptMissingEvents, "the receipt holds no events")
	}
	roots := rep.openNotes(r, o, add)
	for i := range r.Events {
		e := &r.Events[i]
		if p, ok := verifyReceiptEvent(r.RunID, e, roots, func(kind, format string, args ...any) { add(e, kind, format, args...) }); ok {
			rep.Types = append(rep.Types, e.Type)
			rep.Proves = append(rep.Proves, p)
		}
	}
	rep.Decision, rep.End = findProven(rep.Proves, decisionTypes), findProven(rep.Proves, endTypes)
	if len(r.Events) > 0 && rep.Decision == nil {
		add(nil, ReceiptMissingDecision, "no admission decision of run %s (%s) is among the events proven", r.RunID, strings.Join(decisionTypes, ", "))
	}
	if len(r.Events) > 0 && rep.End == nil {
		add(nil, ReceiptMissingEnd, "no end of run %s (%s) is among the events proven: the receipt does not show how the run ended", r.RunID, strings.Join(endTypes, ", "))
	}
	rep.Statement = receiptStatement(rep)
	rep.OK = len(rep.Problems) == 0
	return rep
}

// IsRunEnd reports whether an event of type typ records a run's end.
func IsRunEnd(typ string) bool { return slices.Contains(endTypes, typ) }

// findProven returns the first proven event of one of types.
func findProven(ps []ProvenEvent, types []string) *ProvenEvent {
	for i := range ps {
		if slices.Contains(types, ps[i].Type) {
			return &ps[i]
		}
	}
	return nil
}

// receiptBounds refuses a receipt past the bounds.
func receiptBounds(r Receipt, o ReceiptOptions) error {
	switch {
	case len(r.Events) > MaxReceiptEvents:
		return fmt.Errorf("%d events, at most %d", len(r.Events), MaxReceiptEvents)
	case len(r.Checkpoints) > maxReceiptChains:
		return fmt.Errorf("%d checkpoints, at most %d", len(r.Checkpoints), maxReceiptChains)
	case len(r.Keys) > maxReceiptKeys || len(r.Endorsements) > maxReceiptKeys:
		return fmt.Errorf("%d keys and %d endorsements, at most %d each", len(r.Keys), len(r.Endorsements), maxReceiptKeys)
	case len(o.Anchors.Pinned)+len(o.Anchors.Roots)+len(o.VerifierKeys) > maxReceiptAnchored:
		return fmt.Errorf("more than %d keys pinned", maxReceiptAnchored)
	}
	for _, cp := range r.Checkpoints {
		if len(cp.Note) > maxReceiptNote {
			return fmt.Errorf("the checkpoint note of chain %s is longer than %d bytes", cp.ChainID, maxReceiptNote)
		}
	}
	for _, e := range r.Events {
		if len(e.Body) > maxReceiptBody || len(e.Proof) > maxReceiptProof {
			return fmt.Errorf("event %s: a body longer than %d bytes or a proof longer than %d hashes", e.EventID, maxReceiptBody, maxReceiptProof)
		}
	}
	return nil
}

// openNotes checks each checkpoint note against the trusted keys, built
// once into one list that a note's signatures look up by key hash, and
// returns what each chain's note states.
func (rep *ReceiptReport) openNotes(r Receipt, o ReceiptOptions, add func(*ReceiptEvent, string, string, ...any)) map[string]NoteCheckpoint {
	ring, anchored := receiptVerifiers(r, o, rep)
	if !anchored {
		add(nil, ReceiptUnpinnedKeys, "no key pinned (--key), no root key (--root-key), nor a local key of the receipt's node: the receipt's own keys, which checked it, vouch for nothing (a receipt forged whole carries its forger's)")
	}
	roots := map[string]NoteCheckpoint{}
	used := map[string]bool{}
	for _, cp := range r.Checkpoints {
		n, err := note.Open([]byte(cp.Note), ring)
		if err != nil {
			// Signed by no key trusted, or by one but not over this
			// text (changed since).
			kind := ReceiptBadNote
			var unverified *note.UnverifiedNoteError
			if anchored && errors.As(err, &unverified) {
				kind = ReceiptUntrustedKey
			}
			add(nil, kind, "checkpoint of chain %s: %v", cp.ChainID, err)
			continue
		}
		c, err := ParseNoteText(n.Text)
		if err != nil || !strings.HasSuffix(c.Origin, "/"+cp.ChainID) {
			add(nil, ReceiptBadNote, "checkpoint of chain %s names origin %q (%v)", cp.ChainID, c.Origin, err)
			continue
		}
		signed := false
		for _, s := range n.Sigs {
			if s.Name == c.Origin {
				signed = true
				used[ring.keyID(s)] = true
			}
		}
		if !signed {
			add(nil, ReceiptBadNote, "checkpoint of chain %s is not signed by a key named %q", cp.ChainID, c.Origin)
			continue
		}
		roots[cp.ChainID] = c
	}
	for id := range used {
		rep.Keys = append(rep.Keys, id)
	}
	slices.Sort(rep.Keys)
	return roots
}

// receiptVerifiers makes the keyring of the keys a receipt is trusted
// from (or, with no anchor, of its own keys), for the origins of its
// notes, and reports the anchors in rep. anchored says whether any anchor
// was given.
func receiptVerifiers(r Receipt, o ReceiptOptions, rep *ReceiptReport) (*keyring, bool) {
	ring := newKeyring()
	origins := map[string]string{} // origin → chain
	for _, cp := range r.Checkpoints {
		origins[NoteOrigin(cp.Note)] = cp.ChainID
	}
	a := o.Anchors
	for _, k := range a.Pinned {
		ring.trust("", k)
	}
	for _, k := range o.VerifierKeys {
		_ = ring.trustVerifierKey(k)
	}
	rep.Anchors = ResolveTrust(Anchors{Pinned: a.Pinned, Roots: a.Roots, Source: a.Source}, nil, nil).Anchors()
	for _, e := range r.Endorsements {
		end := Endorsement(e)
		for _, root := range a.Roots {
			if !end.Verify(root) {
				continue
			}
			// A root's endorsement is of a node's key: trusted for that
			// node's chains.
			for origin, chain := range origins {
				if origin == Origin(end.Node, chain) {
					ring.trust(origin, end.Key())
				}
			}
		}
	}
	anchored := len(a.Pinned)+len(a.Roots)+len(o.VerifierKeys) > 0
	if l := a.Local; l != nil {
		n := 0
		for origin, chain := range origins {
			if origin == Origin(l.Node, chain) {
				ring.trust(origin, l.Key)
				n++
			}
		}
		anchored = anchored || n > 0
		rep.Anchors = append(rep.Anchors, sandgate.VerifyAnchor{Kind: AnchorLocal, KeyID: KeyID(l.Key), Node: l.Node, Source: l.File, Used: n > 0,
			Detail: fmt.Sprintf("trusted for the notes of node %q's chains (%d in the receipt)", l.Node, n)})
	}
	if !anchored {
		for _, k := range r.Keys {
			_ = ring.trustVerifierKey(k)
		}
	}
	return ring, anchored
}

// receiptStatement says in words what a report proves and what not.
func receiptStatement(rep ReceiptReport) string {
	if !rep.OK && len(rep.Problems) > 0 && rep.End == nil && rep.Decision == nil {
		return fmt.Sprintf("nothing is proven of run %s: see the problems", rep.RunID)
	}
	var b strings.Builder
	fmt.Fprintf(&b, "This receipt proves that %d event(s) of run %s are in the audit trail, each under a checkpoint signed by a trusted key: %s.",
		len(rep.Proves), rep.RunID, strings.Join(rep.Types, ", "))
	if d := rep.Decision; d != nil {
		fmt.Fprintf(&b, " The decision is %s (policy %s).", d.Type, d.PolicyRevision)
	}
	if e := rep.End; e != nil {
		exit := ""
		if e.ExitCode != nil {
			exit = fmt.Sprintf(", exit code %d", *e.ExitCode)
		}
		fmt.Fprintf(&b, " The run's end is %s (outcome %q%s).", e.Type, e.Outcome, exit)
	}
	b.WriteString(" It does not prove that the trail holds no other event of the run: only the events listed are proven.")
	return b.String()
}

// verifyReceiptEvent checks one event of a receipt, reporting through
// add; it returns what the event proves, and whether it checked out.
func verifyReceiptEvent(runID string, e *ReceiptEvent, roots map[string]NoteCheckpoint, add func(kind, format string, args ...any)) (ProvenEvent, bool) {
	body := []byte(e.Body)
	var b struct {
		EventID        string `json:"event_id"`
		Type           string `json:"type"`
		RunID          string `json:"run_id"`
		Outcome        string `json:"outcome"`
		ExitCode       *int   `json:"exit_code"`
		PolicyRevision string `json:"policy_revision"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		add(ReceiptBadBody, "body is not JSON: %v", err)
		return ProvenEvent{}, false
	}
	if canon, err := marshalCanonical(jsonNumbers(body)); err != nil || !bytes.Equal(canon, body) {
		add(ReceiptBadBody, "body is not in canonical form")
		return ProvenEvent{}, false
	}
	if b.EventID != e.EventID || b.Type != e.Type || b.RunID != runID {
		add(ReceiptBadBody, "body says event %q type %q run %q; the receipt %q %q %q", b.EventID, b.Type, b.RunID, e.EventID, e.Type, runID)
		return ProvenEvent{}, false
	}
	prev, err1 := hex.DecodeString(e.PrevHash)
	h, err2 := hex.DecodeString(e.Hash)
	if err1 != nil || err2 != nil || len(prev) != HashSize || len(h) != HashSize || e.Seq < 1 {
		add(ReceiptBadBody, "prev_hash, hash or seq malformed")
		return ProvenEvent{}, false
	}
	if got := ChainHash(prev, e.ChainID, e.Seq, body); !bytes.Equal(got, h) {
		add(ReceiptHashMismatch, "SHA-256(prev_hash ‖ chain ‖ seq ‖ body) is %x, the event hash %s", got, e.Hash)
		return ProvenEvent{}, false
	}
	c, ok := roots[e.ChainID]
	if !ok {
		add(ReceiptNoCheckpoint, "no verified checkpoint of chain %s in the receipt", e.ChainID)
		return ProvenEvent{}, false
	}
	if e.TreeSize != c.Size || e.LeafIndex != e.Seq-1 {
		add(ReceiptBadProof, "proof for leaf %d of a tree of %d; the checkpoint's tree has %d leaves", e.LeafIndex, e.TreeSize, c.Size)
		return ProvenEvent{}, false
	}
	proof := make(tlog.RecordProof, len(e.Proof))
	for i, p := range e.Proof {
		raw, err := base64.StdEncoding.DecodeString(p)
		if err != nil || len(raw) != tlog.HashSize {
			add(ReceiptBadProof, "proof hash %d is not base64 of 32 bytes", i)
			return ProvenEvent{}, false
		}
		proof[i] = tlog.Hash(raw)
	}
	if err := tlog.CheckRecord(proof, c.Size, c.Root, e.LeafIndex, LeafHash(h)); err != nil {
		add(ReceiptBadProof, "the inclusion proof does not lead to the checkpoint's root: %v", err)
		return ProvenEvent{}, false
	}
	return ProvenEvent{Type: b.Type, EventID: b.EventID, ChainID: e.ChainID, Seq: e.Seq, Outcome: b.Outcome,
		ExitCode: b.ExitCode, PolicyRevision: b.PolicyRevision}, true
}

// ParsePinnedKey reads a key an auditor pins for a receipt: a note
// verifier key ("name+hash+key", returned as vkey) or an Ed25519 public
// key (PEM or hex, returned as pub).
func ParsePinnedKey(data []byte) (vkey string, pub ed25519.PublicKey, err error) {
	s := strings.TrimSpace(string(data))
	if _, err := note.NewVerifier(s); err == nil {
		return s, nil, nil
	}
	pub, err = ParsePublicKey(data)
	if err != nil {
		return "", nil, fmt.Errorf("neither a note verifier key nor an Ed25519 public key: %w", err)
	}
	return "", pub, nil
}
