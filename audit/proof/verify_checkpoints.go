package proof

import (
	"bytes"
	"crypto/ed25519"
	"encoding/hex"
	"slices"
	"strings"
	"time"
)

// What vouches for a chain's rows: checkpoints whose signatures verify, by
// keys the registry or the auditor's pins make known, that cover every row
// in time; and no row recorded after the clock. The verifier judges these
// here; verify.go checks the rows themselves.

// rowKey is a registration read from a key event, and when the database
// recorded that event: registrations are judged in that order, not in the
// order their payloads claim.
type rowKey struct {
	k  KeyRecord
	at time.Time
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

// checkpoints checks one chain's checkpoints (in chain order) and keeps
// them to compare with its rows. They come before the chain's rows.
func (v *Verifier) checkpoints(chain string, cps []Checkpoint) {
	c := v.chain(chain)
	var prevSig string
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

// resolveKeys judges the registrations once: which keys the anchors
// make trusted, and which are known (trusted, or the registry vouches for
// them).
func (v *Verifier) resolveKeys() {
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
	var signers []ed25519.PublicKey
	for _, c := range v.chains {
		for _, cp := range c.signed {
			signers = append(signers, cp.pub)
		}
	}
	v.trust = ResolveTrust(v.anchors, v.keys, v.endorsements, signers...)
	v.known, v.rejected = registryKeys(v.keys, v.trust)
	for id, k := range v.trust.Keys() {
		v.known[id] = k
	}
}

// isKnown reports whether cp's key is known.
func (v *Verifier) isKnown(cp signedCP) bool {
	k, ok := v.known[cp.keyID]
	return ok && bytes.Equal(k, cp.pub)
}

// covered returns the highest seq of c a checkpoint by a known key signs,
// and that checkpoint's time; 0 when there is none.
func (v *Verifier) covered(c *chainState) (int64, time.Time) {
	var seq int64
	var at time.Time
	for _, cp := range c.signed {
		if v.isKnown(cp) && cp.seq >= seq {
			seq, at = cp.seq, cp.createdAt
		}
	}
	return seq, at
}

// checkCoverage reports c's rows that no checkpoint by a known key covers,
// unless they are recent enough that their checkpoint may still come: by
// the grace before now (online), or within the grace around the newest
// checkpoint by a known key, the chain's or any chain's (offline).
func (v *Verifier) checkCoverage(c *chainState) {
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
func (v *Verifier) checkFuture(c *chainState) {
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
func (v *Verifier) newestKnownCheckpoint() time.Time {
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

// keyProblems reports, with anchors in use, checkpoints by keys they do
// not make trusted and registered keys outside the trusted set; without,
// that nothing vouches for any key, and checkpoints by keys the registry
// does not vouch for either; and always, rotations their predecessor did
// not endorse.
func (v *Verifier) keyProblems(ids []string) {
	anchored := v.trust.InUse()
	if !anchored {
		v.problem("", 0, ProblemUnpinnedKeys, "%s", v.noAnchor())
	}
	used := map[string]bool{}
	for _, id := range ids {
		c := v.chains[id]
		reported := map[string]bool{}
		for _, cp := range c.signed {
			used[cp.keyID] = true
			switch {
			case reported[cp.keyID]:
			case anchored && !v.trust.Trusts(cp.pub):
				reported[cp.keyID] = true
				v.problem(id, cp.seq, ProblemUntrustedKey, "checkpoints from %s on are signed by key %s, which is not trusted: no key pinned, no root endorsement in the trail, nor the local node's registered key vouches for it",
					cp.createdAt.Format(time.RFC3339), cp.keyID)
			case !anchored && !v.isKnown(cp):
				reported[cp.keyID] = true
				v.problem(id, cp.seq, ProblemUnknownKey, "checkpoints from seq %d on are signed by key %s, which the key registry does not vouch for: no node registered it, or its rotation was not endorsed",
					cp.seq, cp.keyID)
			}
		}
	}
	for _, k := range v.rejected {
		v.problem(k.ChainID, 0, ProblemUnendorsedKey, "key %s was registered for node %s at %s as replacing key %s without that key's endorsement: anyone with the application role can do that; pin the key if it is the node's",
			k.KeyID, k.Node, k.FirstUsedAt.UTC().Format(time.RFC3339), k.Replaces)
	}
	if !anchored {
		return
	}
	for _, k := range v.keys {
		if !k.Trusted && k.Known && !used[k.KeyID] {
			v.problem(k.ChainID, 0, ProblemUntrustedKey, "key %s of node %s (registered %s, %s) is not among the trusted keys",
				k.KeyID, k.Node, k.FirstUsedAt.UTC().Format(time.RFC3339), k.Source)
		}
	}
}

// noAnchor says why nothing vouches for the keys.
func (v *Verifier) noAnchor() string {
	if !v.online {
		return "no trusted public key given: offline, nothing vouches for the keys an export names; pass the auditors' copy of every node's public key (--trusted-keys, --public-key) or the cluster's root key (--root-key)"
	}
	return "no trust anchor: no key is pinned (--trusted-keys, SANDGATE_TRUSTED_KEYS_FILE), no cluster root key is given (--root-key, SANDGATE_AUDIT_ROOT_PUBLIC_KEY_FILE), and no local checkpoint key is registered for this node in this trail; the key registry alone vouches for nothing, since anyone with the application role can register a key"
}

// knownSeq returns the highest seq a checkpoint of cps whose signature
// verifies, by a known key, signs: for a chain the verifier does not
// check itself.
func (v *Verifier) knownSeq(cps []Checkpoint) int64 {
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

// checkNote checks a checkpoint's note: signed by the checkpoint's key
// under the chain's origin, stating the checkpoint's seq as its size, and,
// when the chain was read from seq 1, the root of the tree of its rows.
func (v *Verifier) checkNote(c *chainState, cp Checkpoint) {
	pub, _ := hex.DecodeString(cp.PublicKey)
	origin := NoteOrigin(cp.Note)
	vkey, err := NoteVerifierKey(origin, pub)
	var stated NoteCheckpoint
	if err == nil {
		_, stated, err = OpenNote(cp.Note, vkey)
	}
	switch {
	case err != nil:
		v.problem(c.id, cp.Seq, ProblemNoteMismatch, "checkpoint at %s: its note is not signed by the checkpoint's key: %v", cp.CreatedAt.Format(time.RFC3339), err)
	case !strings.HasSuffix(stated.Origin, "/"+c.id) || stated.Size != cp.Seq:
		v.problem(c.id, cp.Seq, ProblemNoteMismatch, "checkpoint at %s: its note states %q at size %d", cp.CreatedAt.Format(time.RFC3339), stated.Origin, stated.Size)
	case c.tree != nil && c.tree.Size() == cp.Seq:
		root, err := c.tree.Root()
		if err != nil || root != stated.Root {
			v.problem(c.id, cp.Seq, ProblemNoteMismatch, "checkpoint at %s: its note states root %s, the chain's rows make %s",
				cp.CreatedAt.Format(time.RFC3339), b64(stated.Root[:]), b64(root[:]))
		}
	}
}
