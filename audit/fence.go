package audit

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/sandgate/sandgate"
)

// Fencing (migration 15): a survivor that takes a node over fences the
// node's chains at their heads, and the database refuses their events
// past the fence, and their checkpoints but the closing one, with
// SQLSTATE SGFNC. A writer that meets the refusal is fenced: it commits
// nothing more, seals what comes into its spool (where it is kept, never
// delivered), signs no checkpoint, and its Store reports the fence and
// the events it holds. A writer that starts on a chain fenced while its
// process was away sets that spool aside (fenced-<chain>.log in the spool
// directory, kept for the operator) and begins a new chain.

// sqlstateFenced is the SQLSTATE of a refusal by a fence.
const sqlstateFenced = "SGFNC"

// fencedPrefix names the spool files of fenced chains set aside.
const fencedPrefix = "fenced-"

// Fence is a chain a survivor fenced: the database takes none of its
// events past Seq.
type Fence struct {
	ChainID  string    `json:"chain_id"`
	Seq      int64     `json:"seq"`
	FencedBy string    `json:"fenced_by"`
	FencedAt time.Time `json:"fenced_at"`
	Reason   string    `json:"reason"`
}

// FenceStatus is what a Store knows of fences on its node's chains.
type FenceStatus struct {
	// Fenced is set while a chain this process writes is fenced: the
	// node was taken over, and it records nothing more.
	Fenced *Fence
	// Held counts the events refused by a fence and kept: in this
	// process's spools and in the files of HeldFiles.
	Held int64
	// HeldFiles are the spool files of fenced chains that earlier
	// processes of this node set aside.
	HeldFiles []string
}

// Err is the fence as an error: AUDIT-UNAVAILABLE, naming who fenced the
// chain and how many events are held.
func (f FenceStatus) Err() error {
	if f.Fenced == nil {
		return nil
	}
	return sandgate.Errorf(sandgate.CodeAuditUnavailable,
		"this node's audit chain %s was fenced at seq %d by node %s at %s (%s); it records nothing more, and holds %d events in its spool",
		f.Fenced.ChainID, f.Fenced.Seq, f.Fenced.FencedBy, f.Fenced.FencedAt.UTC().Format(time.RFC3339), f.Fenced.Reason, f.Held)
}

// FenceStatus reports whether a survivor fenced this Store's chains, and
// the events held because of a fence.
func (s *Store) FenceStatus() FenceStatus {
	var st FenceStatus
	if s.w == nil {
		return st
	}
	for _, w := range []*writer{s.w, s.dw} {
		if f := w.fenced.Load(); f != nil {
			if st.Fenced == nil {
				st.Fenced = f
			}
			st.Held += w.pendingN.Load()
		}
		st.Held += w.heldSetAside
		st.HeldFiles = append(st.HeldFiles, w.heldFiles...)
		if s.dw == s.w {
			break
		}
	}
	return st
}

// Fenced returns the events held because of a fence, and
// AUDIT-UNAVAILABLE naming the fence while this process's chains are
// fenced (what the gateway's FenceReporter asks).
func (s *Store) Fenced() (int64, error) {
	st := s.FenceStatus()
	return st.Held, st.Err()
}

// isFenced reports whether the database refused err's statement because
// of a fence.
func isFenced(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == sqlstateFenced
}

// readFence returns chain's fence, nil when it has none.
func readFence(ctx context.Context, q interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, chain string) (*Fence, error) {
	f := Fence{ChainID: chain}
	err := q.QueryRow(ctx, `SELECT seq, fenced_by, fenced_at, reason FROM audit_fences WHERE chain_id = $1`, chain).
		Scan(&f.Seq, &f.FencedBy, &f.FencedAt, &f.Reason)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	return &f, nil
}

// fence marks the writer fenced after the database refused err; once.
func (w *writer) fence(err error) {
	if w.fenced.Load() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f, rerr := readFence(ctx, w.s.ctl, w.chainID)
	if rerr != nil || f == nil {
		f = &Fence{ChainID: w.chainID, Reason: err.Error()}
	}
	w.fenced.Store(f)
	w.cfg.Logger.Error("audit: this node's chain was fenced by the node that took it over; nothing more is recorded on it, and its events are held in the spool",
		"chain_id", f.ChainID, "seq", f.Seq, "fenced_by", f.FencedBy, "fenced_at", f.FencedAt, "held", len(w.pending), "spool", w.sp.dir)
}

// fencedErr is the error a Record on a fenced writer gets.
func (w *writer) fencedErr() error {
	f := w.fenced.Load()
	return fmt.Errorf("chain %s was fenced at seq %d by node %s (this node was taken over)", f.ChainID, f.Seq, f.FencedBy)
}

// setAsideFenced runs at start, before the chain's head is read: when
// the chain the spool directory names was fenced while this node was
// away, its spool (what the node recorded after the fence, refused) is
// kept as fenced-<chain>.log and a new chain begins. It returns the
// records still to deliver.
func (w *writer) setAsideFenced(ctx context.Context, dir string, recs []*sealed, explicit bool, newID func() string) ([]*sealed, error) {
	f, err := readFence(ctx, w.s.ctl, w.chainID)
	if err != nil {
		return nil, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read the chain's fence")
	}
	if f == nil {
		return recs, nil
	}
	if explicit {
		return nil, fmt.Errorf("audit: chain %s was fenced at seq %d by node %s; configure another chain ID", w.chainID, f.Seq, f.FencedBy)
	}
	kept := filepath.Join(dir, fencedPrefix+w.chainID+".log")
	if len(recs) == 0 {
		kept = "" // nothing held: no file to keep
	} else if err := w.sp.setAside(kept); err != nil {
		return nil, fmt.Errorf("audit: set the fenced chain's spool aside: %w", err)
	}
	old := w.chainID
	if err := os.Remove(filepath.Join(dir, spoolChainFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("audit: %w", err)
	}
	if w.chainID, err = chainIDFile(dir, newID); err != nil {
		return nil, fmt.Errorf("audit: %w", err)
	}
	w.cfg.Logger.Error("audit: this node's chain was fenced while it was away (a survivor took it over); the events it held are kept aside and a new chain begins",
		"fenced_chain", old, "seq", f.Seq, "fenced_by", f.FencedBy, "fenced_at", f.FencedAt, "records_kept", len(recs), "kept_in", kept, "chain_id", w.chainID)
	return nil, nil
}

// countHeldFiles finds the fenced spools set aside in dir and counts
// their records.
func (w *writer) countHeldFiles(dir string) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range entries {
		if !strings.HasPrefix(e.Name(), fencedPrefix) || !strings.HasSuffix(e.Name(), ".log") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		f, err := os.Open(path)
		if err != nil {
			continue
		}
		recs, _, _ := readSpool(f)
		f.Close()
		w.heldFiles = append(w.heldFiles, path)
		w.heldSetAside += int64(len(recs))
	}
}
