package proof

import (
	"crypto/ed25519"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/sumdb/note"
	"golang.org/x/mod/sumdb/tlog"
)

// A witness keeps, apart from the gateway, the newest checkpoint it
// verified of each log (origin): a new checkpoint is accepted only when it
// is signed by the pinned gateway key and a consistency proof shows the
// old tree is a prefix of the new one. Accepted checkpoints are cosigned
// (tlog-cosignature/v1). Anything else is an alarm: the log's history was
// rewritten or forked.

// WitnessView is what a witness keeps per origin.
type WitnessView struct {
	Origin string    `json:"origin"`
	Size   int64     `json:"size"`
	Root   string    `json:"root"` // base64
	Note   string    `json:"note"`
	SeenAt time.Time `json:"seen_at"`
}

// Alarm kinds a witness raises.
const (
	AlarmBadSignature = "bad_signature" // the note is not signed by the pinned gateway key
	AlarmRollback     = "rollback"      // the tree is smaller than one seen before
	AlarmFork         = "fork"          // same size, another root
	AlarmInconsistent = "inconsistent"  // no valid consistency proof from the old tree to the new
)

// WitnessAlarm is a checkpoint a witness refuses: the tree it last saw
// of the log (SeenSize 0 when none) and the one it was offered.
type WitnessAlarm struct {
	Kind   string
	Origin string
	Detail string

	SeenSize    int64
	SeenRoot    string // base64
	OfferedSize int64
	OfferedRoot string // base64
}

func (a *WitnessAlarm) Error() string {
	return fmt.Sprintf("ALARM %s for %s: %s", a.Kind, a.Origin, a.Detail)
}

// Witness checks and cosigns checkpoints of logs signed by one gateway key,
// keeping its view in a directory.
type Witness struct {
	dir     string
	logKey  ed25519.PublicKey
	signer  *Cosigner
	nowFunc func() time.Time
}

// NewWitness returns a witness keeping its view in dir (created 0700),
// trusting notes signed by logKey and cosigning with signer.
func NewWitness(dir string, logKey ed25519.PublicKey, signer *Cosigner) (*Witness, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("witness state: %w", err)
	}
	return &Witness{dir: dir, logKey: logKey, signer: signer, nowFunc: time.Now}, nil
}

func (w *Witness) viewPath(origin string) string {
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_' {
			return r
		}
		return '_'
	}, origin)
	return filepath.Join(w.dir, name+".json")
}

// View returns the witness's view of origin, and false when it has none.
func (w *Witness) View(origin string) (WitnessView, bool, error) {
	data, err := os.ReadFile(w.viewPath(origin))
	if errors.Is(err, os.ErrNotExist) {
		return WitnessView{}, false, nil
	}
	if err != nil {
		return WitnessView{}, false, fmt.Errorf("witness state: %w", err)
	}
	var v WitnessView
	if err := json.Unmarshal(data, &v); err != nil {
		return v, false, fmt.Errorf("witness state %s: %w", w.viewPath(origin), err)
	}
	if v.Origin != origin {
		return v, false, fmt.Errorf("witness state %s holds origin %q", w.viewPath(origin), v.Origin)
	}
	return v, true, nil
}

func (w *Witness) store(v WitnessView) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	path := w.viewPath(v.Origin)
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("witness state: %w", err)
	}
	if _, err := f.Write(append(data, '\n')); err != nil {
		f.Close()
		return fmt.Errorf("witness state: %w", err)
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return fmt.Errorf("witness state: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("witness state: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("witness state: %w", err)
	}
	return nil
}

// ConsistencyFunc fetches the consistency proof from the tree of from
// leaves to the tree of to leaves of the log whose origin is given.
type ConsistencyFunc func(origin string, from, to int64) ([]tlog.Hash, error)

// Observe checks a checkpoint note fetched from the log against the
// witness's view: the pinned key's signature, and consistency with the
// newest tree it saw (fetching the proof through prove). It returns the
// note cosigned by the witness and records the new view; a refused
// checkpoint is a *WitnessAlarm and leaves the view as it was.
func (w *Witness) Observe(msg string, prove ConsistencyFunc) (string, error) {
	origin := NoteOrigin(msg)
	old, seen, err := w.View(origin)
	if err != nil {
		return "", err
	}
	// What the alarm says was offered, before the signature is checked.
	body, _, _ := strings.Cut(msg, "\n\n")
	offered, _ := ParseNoteText(body + "\n")
	alarm := func(kind, detail string) *WitnessAlarm {
		a := &WitnessAlarm{Kind: kind, Origin: origin, Detail: detail, OfferedSize: offered.Size, OfferedRoot: b64(offered.Root[:])}
		if seen {
			a.SeenSize, a.SeenRoot = old.Size, old.Root
		}
		return a
	}
	vkey, err := NoteVerifierKey(origin, w.logKey)
	if err != nil {
		return "", alarm(AlarmBadSignature, err.Error())
	}
	n, c, err := OpenNote(msg, vkey)
	if err != nil {
		return "", alarm(AlarmBadSignature, fmt.Sprintf("not signed by the pinned gateway key: %v", err))
	}
	if seen {
		oldRoot, err := base64.StdEncoding.DecodeString(old.Root)
		if err != nil || len(oldRoot) != tlog.HashSize {
			return "", fmt.Errorf("witness state of %s: bad root", origin)
		}
		switch {
		case c.Size < old.Size:
			return "", alarm(AlarmRollback, fmt.Sprintf("tree size %d is smaller than the %d seen at %s", c.Size, old.Size, old.SeenAt.Format(time.RFC3339)))
		case c.Size == old.Size && tlog.Hash(oldRoot) != c.Root:
			return "", alarm(AlarmFork, fmt.Sprintf("tree size %d has root %s, but %s was seen at %s", c.Size, b64(c.Root[:]), old.Root, old.SeenAt.Format(time.RFC3339)))
		case c.Size > old.Size && old.Size > 0:
			proof, err := prove(origin, old.Size, c.Size)
			if err != nil {
				return "", fmt.Errorf("consistency proof %d→%d of %s: %w", old.Size, c.Size, origin, err)
			}
			if err := tlog.CheckTree(proof, c.Size, c.Root, old.Size, tlog.Hash(oldRoot)); err != nil {
				return "", alarm(AlarmInconsistent, fmt.Sprintf("the tree of %d leaves (root %s) does not extend the tree of %d leaves seen at %s (root %s): %v; the log's history was rewritten",
					c.Size, b64(c.Root[:]), old.Size, old.SeenAt.Format(time.RFC3339), old.Root, err))
			}
		}
	}
	if !seen || c.Size > old.Size {
		if err := w.store(WitnessView{Origin: origin, Size: c.Size, Root: b64(c.Root[:]), Note: msg, SeenAt: w.nowFunc().UTC()}); err != nil {
			return "", err
		}
	}
	cosigned, err := note.Sign(&note.Note{Text: n.Text}, w.signer)
	if err != nil {
		return "", fmt.Errorf("cosign: %w", err)
	}
	return string(cosigned), nil
}

// RecordAlarm keeps an alarm in the witness's directory
// (ALARM-<origin>.json), so that it outlives the process that raised it;
// the view is left as it was.
func (w *Witness) RecordAlarm(a *WitnessAlarm, msg string) error {
	data, err := json.MarshalIndent(map[string]any{
		"kind": a.Kind, "origin": a.Origin, "detail": a.Detail, "note": msg, "at": w.nowFunc().UTC(),
	}, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(w.dir, "ALARM-"+filepath.Base(w.viewPath(a.Origin)))
	return os.WriteFile(path, append(data, '\n'), 0o600)
}

// WriteMetrics writes the witness's state as Prometheus text
// (witness.prom in its directory, for node_exporter's textfile
// collector): per origin the tree size and time of its view, and 1 for an
// origin with an alarm recorded.
func (w *Witness) WriteMetrics() error {
	entries, err := os.ReadDir(w.dir)
	if err != nil {
		return err
	}
	var b strings.Builder
	b.WriteString("# HELP sandgate_witness_tree_size Tree size of the newest checkpoint the witness verified.\n")
	b.WriteString("# TYPE sandgate_witness_tree_size gauge\n")
	var seen, alarms strings.Builder
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".json") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(w.dir, name))
		if err != nil {
			return err
		}
		if strings.HasPrefix(name, "ALARM-") {
			var a struct {
				Origin string `json:"origin"`
				Kind   string `json:"kind"`
			}
			if json.Unmarshal(data, &a) == nil {
				fmt.Fprintf(&alarms, "sandgate_witness_alarm{origin=%q,kind=%q} 1\n", a.Origin, a.Kind)
			}
			continue
		}
		var v WitnessView
		if json.Unmarshal(data, &v) != nil || v.Origin == "" {
			continue
		}
		fmt.Fprintf(&b, "sandgate_witness_tree_size{origin=%q} %d\n", v.Origin, v.Size)
		fmt.Fprintf(&seen, "sandgate_witness_seen_timestamp_seconds{origin=%q} %d\n", v.Origin, v.SeenAt.Unix())
	}
	b.WriteString("# HELP sandgate_witness_seen_timestamp_seconds When the witness verified that checkpoint.\n")
	b.WriteString("# TYPE sandgate_witness_seen_timestamp_seconds gauge\n")
	b.WriteString(seen.String())
	b.WriteString("# HELP sandgate_witness_alarm 1 for each log the witness raised an alarm for.\n")
	b.WriteString("# TYPE sandgate_witness_alarm gauge\n")
	b.WriteString(alarms.String())
	tmp := filepath.Join(w.dir, "witness.prom.tmp")
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(w.dir, "witness.prom"))
}

func b64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }
