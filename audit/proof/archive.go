package proof

import (
	"bufio"
	"crypto/ed25519"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"
)

// An archive is one month of the trail in a directory of its own: its rows
// (events.jsonl), the checkpoints of its chains (checkpoints.jsonl) and a
// manifest with the files' SHA-256, checked with no database by
// VerifyArchive.

// Archive file names inside a partition's archive directory.
const (
	ArchiveEventsFile      = "events.jsonl"
	ArchiveCheckpointsFile = "checkpoints.jsonl"
	ArchiveManifestFile    = "manifest.json"
)

// Problem kinds only archives have.
const (
	ProblemArchiveMismatch = "archive_mismatch" // a file differs from the manifest
	ProblemUncovered       = "uncovered_rows"   // rows no checkpoint in the archive signs
)

// ArchiveManifest describes an archived partition: what Archive wrote and
// records in its audit.archived event, and what Purge holds the partition
// to.
type ArchiveManifest struct {
	Partition
	CreatedAt time.Time         `json:"created_at"`
	Files     map[string]string `json:"files"` // file name → hex SHA-256
	KeyIDs    []string          `json:"key_ids"`
}

// Partition is one partition of the trail (audit_events): a UTC month,
// or the default partition that takes rows no month covers.
type Partition struct {
	Name    string           `json:"name"`
	From    time.Time        `json:"from"` // zero for the default partition
	To      time.Time        `json:"to"`
	Default bool             `json:"default,omitempty"`
	Rows    int64            `json:"rows"`
	Chains  []PartitionChain `json:"chains"`
}

// PartitionChain is one chain's run of rows in a partition: seq FirstSeq
// through LastSeq, linked before it to PrevHash.
type PartitionChain struct {
	ChainID  string `json:"chain_id"`
	Rows     int64  `json:"rows"`
	FirstSeq int64  `json:"first_seq"`
	LastSeq  int64  `json:"last_seq"`
	PrevHash string `json:"prev_hash"` // the first row's prev_hash
	LastHash string `json:"last_hash"`
}

// VerifyArchive checks an archive directory offline with the pinned
// public keys; see VerifyArchiveWith.
func VerifyArchive(dir string, pinned ...ed25519.PublicKey) (Report, error) {
	return VerifyArchiveWith(dir, OfflineOptions{Anchors: Anchors{Pinned: pinned}})
}

// VerifyArchiveWith checks an archive directory offline: each file's
// SHA-256 against the manifest, every row's hash and link from the
// boundary the manifest names, the rows and chains the manifest lists,
// every checkpoint's signature and key (as VerifyExportWith), and that a
// checkpoint by a known key signs each chain's last archived row.
func VerifyArchiveWith(dir string, o OfflineOptions) (Report, error) {
	raw, err := os.ReadFile(filepath.Join(dir, ArchiveManifestFile))
	if err != nil {
		return Report{}, fmt.Errorf("read archive: %w", err)
	}
	var m ArchiveManifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return Report{}, fmt.Errorf("read archive manifest: %w", err)
	}
	v := offlineVerifier(o)
	for _, file := range []string{ArchiveEventsFile, ArchiveCheckpointsFile} {
		got, err := fileSHA256(filepath.Join(dir, file))
		if err != nil {
			return Report{}, err
		}
		if want := m.Files[file]; got != want {
			v.problem("", 0, ProblemArchiveMismatch, "%s has SHA-256 %s, the manifest says %s", file, got, want)
		}
	}
	cps, err := os.Open(filepath.Join(dir, ArchiveCheckpointsFile))
	if err != nil {
		return Report{}, fmt.Errorf("read archive: %w", err)
	}
	defer cps.Close()
	if err := readCheckpoints(cps, v); err != nil {
		return Report{}, err
	}
	for _, c := range m.Chains {
		prev, err := hex.DecodeString(c.PrevHash)
		if err != nil || len(prev) != HashSize {
			v.problem(c.ChainID, c.FirstSeq, ProblemBadInput, "manifest prev_hash %q is not a hash", c.PrevHash)
			prev = nil
		}
		v.Anchor(c.ChainID, c.FirstSeq, prev)
		v.chain(c.ChainID).checkTail = false
	}
	events, err := os.Open(filepath.Join(dir, ArchiveEventsFile))
	if err != nil {
		return Report{}, fmt.Errorf("read archive: %w", err)
	}
	defer events.Close()
	before := v.report.Checked
	if err := readJSONLExport(bufio.NewReaderSize(events, 1<<20), v); err != nil {
		return Report{}, err
	}
	if n := int64(v.report.Checked - before); n != m.Rows {
		v.problem("", 0, ProblemArchiveMismatch, "%s holds %d rows, the manifest says %d", ArchiveEventsFile, n, m.Rows)
	}
	rep := v.result()
	for _, c := range m.Chains {
		st := v.chains[c.ChainID]
		if st.lastSeq != c.LastSeq || hex.EncodeToString(st.lastHash) != c.LastHash {
			v.problem(c.ChainID, c.LastSeq, ProblemArchiveMismatch, "chain ends at seq %d (hash %x), the manifest says %d (%s)", st.lastSeq, st.lastHash, c.LastSeq, c.LastHash)
		}
		if seq, _ := v.covered(st); seq < c.LastSeq {
			v.problem(c.ChainID, c.LastSeq, ProblemUncovered, "no checkpoint in the archive by a known key signs seq %d or later", c.LastSeq)
		}
	}
	rep.Problems = v.report.Problems
	rep.OK = len(rep.Problems) == 0
	return rep, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", fmt.Errorf("read archive: %w", err)
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("read archive: %w", err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}
