package proof

import (
	"encoding/hex"
	"encoding/json"
	"sort"
	"time"

	"github.com/sandgate/sandgate"
)

// How verification treats what retention dropped: as known-absent. A
// purge records, in its retention.applied event, per chain the last seq it
// dropped, that row's hash and the tree of the dropped rows (PurgedTree);
// verify starts each purged chain there, and honours such an event only
// when a checkpoint by a trusted key covers it: anyone with the
// application role can insert a row that claims a purge.

// ArchivedPayload is the payload of audit.archived and retention.applied.
type ArchivedPayload struct {
	Partition      string            `json:"partition"`
	From           time.Time         `json:"from"`
	To             time.Time         `json:"to"`
	Rows           int64             `json:"rows"`
	Chains         []PartitionChain  `json:"chains"`
	Files          map[string]string `json:"files,omitempty"`
	ManifestSHA256 string            `json:"manifest_sha256,omitempty"`
	Location       string            `json:"location,omitempty"`
	ArchiveEventID string            `json:"archive_event_id,omitempty"`
	// Trees are, in retention.applied, each chain's tree at its last
	// purged seq: what proofs and verify need of the dropped leaves.
	Trees []PurgedTree `json:"trees,omitempty"`
}

// AsMap is p as an event payload.
func (p ArchivedPayload) AsMap() map[string]any {
	data, _ := json.Marshal(p)
	var m map[string]any
	_ = json.Unmarshal(data, &m)
	return m
}

// DecodeArchived reads the payload of audit.archived or
// retention.applied.
func DecodeArchived(payload map[string]any) (ArchivedPayload, error) {
	var p ArchivedPayload
	data, err := json.Marshal(payload)
	if err == nil {
		err = json.Unmarshal(data, &p)
	}
	return p, err
}

// Ranges are the ranges a retention.applied payload records, one per
// chain, recorded by the event eventID.
func (p ArchivedPayload) Ranges(eventID string) []sandgate.PurgedRange {
	out := make([]sandgate.PurgedRange, 0, len(p.Chains))
	for _, c := range p.Chains {
		out = append(out, sandgate.PurgedRange{ChainID: c.ChainID, Partition: p.Partition, FirstSeq: c.FirstSeq, LastSeq: c.LastSeq,
			LastHash: c.LastHash, From: p.From, To: p.To, EventID: eventID})
	}
	return out
}

// RetentionRecord is a retention.applied event as the trail holds it: its
// ID, its place, and what it records.
type RetentionRecord struct {
	EventID string
	ChainID string
	Seq     int64
	Payload ArchivedPayload
}

// PurgeBoundary is where a purged chain's kept rows link to: the last
// purged seq, its hash, and the tree of the dropped rows when the purge
// recorded it.
type PurgeBoundary struct {
	Seq  int64
	Hash []byte
	Tree *Frontier
}

// addBoundaries adds the boundaries p records to into, the latest per
// chain.
func addBoundaries(into map[string]PurgeBoundary, p ArchivedPayload) {
	trees := map[string]PurgedTree{}
	for _, t := range p.Trees {
		trees[t.ChainID] = t
	}
	for _, c := range p.Chains {
		h := hexHash(c.LastHash)
		if h == nil {
			continue
		}
		if a, ok := into[c.ChainID]; !ok || c.LastSeq > a.Seq {
			a = PurgeBoundary{Seq: c.LastSeq, Hash: h}
			if t, ok := trees[c.ChainID]; ok && t.Size == c.LastSeq {
				// A tree that does not make its own root is left out:
				// later notes are then not checked, as without one.
				a.Tree, _ = t.Tree()
			}
			into[c.ChainID] = a
		}
	}
}

// hexHash decodes a hex event hash, nil when malformed.
func hexHash(s string) []byte {
	h, err := hex.DecodeString(s)
	if err != nil || len(h) != HashSize {
		return nil
	}
	return h
}

// PurgeBoundaries decides, from the trail's retention.applied records
// (oldest first), where each purged chain's kept rows begin. Only records
// that a checkpoint by a trusted key covers count; those are listed in the
// report. checkpointsOf reads the checkpoints of a chain this verifier was
// not given.
func (v *Verifier) PurgeBoundaries(refs []RetentionRecord, checkpointsOf func(chain string) ([]Checkpoint, error)) (map[string]PurgeBoundary, error) {
	v.resolveKeys()
	out := map[string]PurgeBoundary{}
	covered := map[string]int64{}
	for _, r := range refs {
		seq, ok := covered[r.ChainID]
		if !ok {
			if c := v.chains[r.ChainID]; c != nil {
				seq, _ = v.covered(c)
			} else {
				cps, err := checkpointsOf(r.ChainID)
				if err != nil {
					return nil, err
				}
				seq = v.knownSeq(cps)
			}
			covered[r.ChainID] = seq
		}
		if seq >= r.Seq {
			addBoundaries(out, r.Payload)
			v.notePurged(r.Payload, r.EventID)
		}
	}
	return out, nil
}

// StartAfterPurge starts chain's check after the purge boundary a: the
// first kept row must link to its hash, and the chain's tree starts from
// the frontier it recorded.
func (v *Verifier) StartAfterPurge(chain string, a PurgeBoundary) {
	v.Anchor(chain, a.Seq+1, a.Hash)
	v.seedTree(chain, a)
}

// honourRetention takes the retention boundaries of retention.applied rows
// that a checkpoint by a trusted key covers; others are not evidence.
func (v *Verifier) honourRetention() {
	for _, r := range v.retention {
		if c := v.chains[r.ChainID]; c != nil {
			if seq, _ := v.covered(c); seq >= r.Seq {
				addBoundaries(v.purged, r.Payload)
				v.notePurged(r.Payload, r.EventID)
			}
		}
	}
}

// notePurged adds the ranges of an honoured retention.applied event to
// the report, once each.
func (v *Verifier) notePurged(p ArchivedPayload, eventID string) {
	if v.purgedSeen == nil {
		v.purgedSeen = map[string]bool{}
	}
	for _, r := range p.Ranges(eventID) {
		key := r.EventID + "\x00" + r.ChainID
		if v.purgedSeen[key] {
			continue
		}
		v.purgedSeen[key] = true
		v.report.Purged = append(v.report.Purged, r)
	}
	sort.Slice(v.report.Purged, func(i, j int) bool {
		a, b := v.report.Purged[i], v.report.Purged[j]
		if a.ChainID != b.ChainID {
			return a.ChainID < b.ChainID
		}
		return a.LastSeq < b.LastSeq
	})
}

// seedTree starts chain's tree at a purge boundary from the frontier the
// purge recorded, so the notes of later checkpoints are checked against
// the kept rows.
func (v *Verifier) seedTree(chain string, a PurgeBoundary) {
	if a.Tree == nil {
		return
	}
	v.chain(chain).tree = a.Tree.Clone()
}
