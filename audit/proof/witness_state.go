package proof

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// WitnessState is a witness's directory: its view of each chain
// (<chain>.json) and the alarms it raised (ALARM-<chain>.json), which
// outlive the process, and its metrics (witness.prom).
type WitnessState struct{ dir string }

// WitnessView is what a witness keeps per chain: the origin its notes
// are under and the key that signs them, as first seen, and the newest
// tree it verified.
type WitnessView struct {
	ChainID string    `json:"chain_id"`
	Origin  string    `json:"origin"`
	KeyID   string    `json:"key_id"`
	Size    int64     `json:"size"`
	Root    string    `json:"root"` // base64
	Note    string    `json:"note"`
	SeenAt  time.Time `json:"seen_at"`
}

// OpenWitnessState returns the state in dir, made (0700) when absent.
func OpenWitnessState(dir string) (WitnessState, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return WitnessState{}, fmt.Errorf("witness state: %w", err)
	}
	return WitnessState{dir: dir}, nil
}

// fileName makes name safe as a file name.
func fileName(name string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '.' || r == '_' {
			return r
		}
		return '_'
	}, name)
}

func (s WitnessState) viewPath(chainID string) string {
	return filepath.Join(s.dir, fileName(chainID)+".json")
}

// View returns the witness's view of chainID, and false when it has
// none. A view an earlier witness kept under its origin's name (before
// views were the chain's) is found by the chain its origin names.
func (s WitnessState) View(chainID string) (WitnessView, bool, error) {
	path := s.viewPath(chainID)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return s.legacyView(chainID)
	}
	if err != nil {
		return WitnessView{}, false, fmt.Errorf("witness state: %w", err)
	}
	var v WitnessView
	if err := json.Unmarshal(data, &v); err != nil {
		return v, false, fmt.Errorf("witness state %s: %w", path, err)
	}
	if v.ChainID != chainID {
		return v, false, fmt.Errorf("witness state %s holds chain %q", path, v.ChainID)
	}
	return v, true, nil
}

// legacyView finds a view kept under its origin's name whose origin names
// chainID.
func (s WitnessState) legacyView(chainID string) (WitnessView, bool, error) {
	entries, err := os.ReadDir(s.dir)
	if err != nil {
		return WitnessView{}, false, fmt.Errorf("witness state: %w", err)
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name(), ".json") || strings.HasPrefix(e.Name(), "ALARM-") {
			continue
		}
		data, err := os.ReadFile(filepath.Join(s.dir, e.Name()))
		if err != nil {
			return WitnessView{}, false, fmt.Errorf("witness state: %w", err)
		}
		var v WitnessView
		if json.Unmarshal(data, &v) == nil && v.ChainID == "" && strings.HasSuffix(v.Origin, "/"+chainID) {
			v.ChainID = chainID
			return v, true, nil
		}
	}
	return WitnessView{}, false, nil
}

// store keeps v, synced, replacing the chain's view at once.
func (s WitnessState) store(v WitnessView) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return writeFileSynced(s.viewPath(v.ChainID), append(data, '\n'))
}

// writeFileSynced writes path through a synced temporary file renamed
// over it.
func writeFileSynced(path string, data []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("witness state: %w", err)
	}
	if _, err := f.Write(data); err != nil {
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

// AlarmPath is where the alarm of chainID is kept.
func (s WitnessState) AlarmPath(chainID string) string {
	return filepath.Join(s.dir, "ALARM-"+fileName(chainID)+".json")
}

// RecordAlarm keeps an alarm in the witness's directory
// (ALARM-<chain>.json), so that it outlives the process that raised it;
// the view is left as it was.
func (s WitnessState) RecordAlarm(a *WitnessAlarm, msg string, at time.Time) error {
	data, err := json.MarshalIndent(map[string]any{
		"kind": a.Kind, "chain_id": a.ChainID, "origin": a.Origin, "detail": a.Detail, "note": msg, "at": at.UTC(),
	}, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(s.AlarmPath(a.ChainID), append(data, '\n'), 0o600)
}

// WriteMetrics writes the witness's state as Prometheus text
// (witness.prom in its directory, for node_exporter's textfile
// collector): per origin the tree size and time of its view, and 1 for an
// origin with an alarm recorded.
func (s WitnessState) WriteMetrics() error {
	entries, err := os.ReadDir(s.dir)
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
		data, err := os.ReadFile(filepath.Join(s.dir, name))
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
	tmp := filepath.Join(s.dir, "witness.prom.tmp")
	if err := os.WriteFile(tmp, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(s.dir, "witness.prom"))
}
