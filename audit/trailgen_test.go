package audit

import (
	"context"
	"crypto/ed25519"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"
	"golang.org/x/mod/sumdb/tlog"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/proof"
)

// trailGen makes a trail as gateways write one, straight into Postgres
// with COPY, for the scale benchmarks: runs of seven events each
// (run.requested with the decision record's size of payload,
// admission.allowed, image.resolved, container.created, started, exited,
// removed), each event a proof.Canonical body hashed into its chain, the chain's
// Merkle tree stored a run of hashes per 1000 events, a checkpoint with a
// signed note every 1000 events and a final one at the chain's end, signed
// by the node's registered key. Each chain is a process lifetime of one
// node, at most chainLen events; chains are placed one before another in
// time, the newest events about a minute old, one event every few
// seconds. Verify finds nothing wrong with what it makes.
type trailGen struct {
	key      ed25519.PrivateKey
	node     string
	rnd      *rand.Rand
	now      time.Time
	step     time.Duration // between two events of a chain
	chainLen int
	n        int // events made so far, over every chain

	// samples of what the queries ask for, spread over the trail
	runIDs, eventIDs []string
}

// newTrailGen registers node's key with a real writer (one event, then a
// clean close) and returns a generator that signs with it.
func newTrailGen(b *testing.B, dsn string) *trailGen {
	dir := b.TempDir()
	const node = "bench-node"
	s := testStore(b, dsn, func(c *Config) { c.Node, c.SigningKeyFile = node, dir+"/key" })
	s.Emit(sandgate.Event{Type: sandgate.EventPolicyLoaded, Actor: "sandgate", Payload: map[string]any{"revision": "sha256:0"}})
	if err := s.Close(context.Background()); err != nil {
		b.Fatal(err)
	}
	key, err := proof.LoadSigningKey(dir+"/key", false)
	if err != nil {
		b.Fatal(err)
	}
	return &trailGen{key: key, node: node, rnd: rand.New(rand.NewPCG(7, 11)), now: time.Now().UTC().Add(-time.Minute),
		step: 3 * time.Second, chainLen: 1_000_000}
}

// v7 is a UUIDv7 at t.
func (g *trailGen) v7(t time.Time) string {
	var u [16]byte
	binary.BigEndian.PutUint64(u[:8], uint64(t.UnixMilli())<<16|g.rnd.Uint64()&0xfff)
	binary.BigEndian.PutUint64(u[8:], g.rnd.Uint64())
	u[6] = 0x70 | u[6]&0x0f
	u[8] = 0x80 | u[8]&0x3f
	return uuid.UUID(u).String()
}

// runEvents are the seven events of one run at t, proof.Canonical.
func (g *trailGen) runEvents(t time.Time) []proof.Canonical {
	run := g.v7(t)
	team := fmt.Sprintf("team-%d", g.rnd.IntN(200))
	actor := team + "-ci"
	decision := g.v7(t)
	code := 0
	if g.rnd.IntN(10) == 0 {
		code = 1
	}
	base := sandgate.Event{CorrelationID: run, RunID: run, DecisionID: decision, Actor: actor, Team: team, Node: g.node,
		PolicyRevision: "sha256:9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}
	spec := map[string]any{"image": "sandgate/sandbox:latest", "command": []any{"sh", "-c", "make test"},
		"env": map[string]any{"CI": "hmac-sha256:3c1f"}, "user": "10001:10001", "network": "none", "read_only_rootfs": true,
		"resources":       map[string]any{"memory_mb": 512, "cpus": 1, "pids": 256, "tmpfs_mb": 100, "nofile": 1024},
		"timeout_seconds": 1800, "output_limit_bytes": 1048576, "labels": map[string]any{"ticket": "ENG-1"}}
	mk := func(typ sandgate.EventType, outcome string, payload map[string]any) sandgate.Event {
		ev := base
		ev.ID, ev.Type, ev.Time, ev.Outcome, ev.Payload = g.v7(t), typ, t, outcome, payload
		return ev
	}
	exited := mk(sandgate.EventContainerExited, "succeeded", map[string]any{"duration_ms": 1200,
		"stdout": map[string]any{"bytes": 1024, "sha256": "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"}})
	exited.ExitCode = &code
	if code != 0 {
		exited.Outcome = "failed"
	}
	evs := []sandgate.Event{
		mk(sandgate.EventRunRequested, "", map[string]any{"operation": "run", "via": "api",
			"principal": map[string]any{"name": actor, "team": team, "roles": []any{"submitter"}, "method": "token"},
			"input":     map[string]any{"api_version": "sandgate/v1", "operation": "run", "request": spec}}),
		mk(sandgate.EventAdmissionAllowed, "allowed", map[string]any{"violations": []any{}, "warnings": []any{}, "mutations": []any{}}),
		mk(sandgate.EventImageResolved, "", map[string]any{"image": "sandgate/sandbox:latest", "image_id": "sha256:4b1c"}),
		mk(sandgate.EventContainerCreated, "", map[string]any{"name": "sandgate-none-none-" + run[24:]}),
		mk(sandgate.EventContainerStarted, "", nil),
		exited,
		mk(sandgate.EventContainerRemoved, "", nil),
	}
	out := make([]proof.Canonical, len(evs))
	for i, ev := range evs {
		c, err := proof.Canonicalize(ev)
		if err != nil {
			panic(err)
		}
		c.ContainerID = "3f2a9c" + run[30:]
		out[i] = c
	}
	return out
}

// grow adds chains of events until the trail holds total generated events.
func (g *trailGen) grow(b *testing.B, s *pgx.Conn, total int) {
	ctx := context.Background()
	if _, err := s.Exec(ctx, `SELECT audit_ensure_partitions($1, $2)`,
		g.now.Add(-time.Duration(total+g.chainLen)*g.step), g.now); err != nil {
		b.Fatal(err)
	}
	for g.n < total {
		n := min(g.chainLen, total-g.n)
		// The chains already made are the newest; this one ends where
		// the oldest of them begins.
		end := g.now.Add(-time.Duration(g.n) * g.step)
		if err := g.chain(ctx, s, n, end.Add(-time.Duration(n)*g.step)); err != nil {
			b.Fatal(err)
		}
		g.n += n
	}
	if _, err := s.Exec(ctx, `ANALYZE audit_events`); err != nil {
		b.Fatal(err)
	}
}

// chain writes one closed chain of n events, the first at start.
func (g *trailGen) chain(ctx context.Context, s *pgx.Conn, n int, start time.Time) error {
	chainID := newChainID(g.node)
	pub := g.key.Public().(ed25519.PublicKey)
	if _, err := s.Exec(ctx, `INSERT INTO audit_chains (chain_id, node, key_id, created_at) VALUES ($1, $2, $3, $4)`,
		chainID, g.node, proof.KeyID(pub), start); err != nil {
		return err
	}
	w := &writer{chainID: chainID, cols: eventColumnNames}
	var head []byte
	var lastSig []byte
	stored := make([]tlog.Hash, 0, tlog.StoredHashCount(int64(n)))
	hr := tlog.HashReaderFunc(func(idx []int64) ([]tlog.Hash, error) {
		out := make([]tlog.Hash, len(idx))
		for i, x := range idx {
			out[i] = stored[x]
		}
		return out, nil
	})
	var pending []proof.Canonical
	var rows, treeRows, cps [][]any
	flush := func() error {
		if len(rows) > 0 {
			if _, err := s.CopyFrom(ctx, pgx.Identifier{"audit_events"}, eventColumnNames, pgx.CopyFromRows(rows)); err != nil {
				return fmt.Errorf("copy events: %w", err)
			}
		}
		if len(treeRows) > 0 {
			if _, err := s.CopyFrom(ctx, pgx.Identifier{"audit_tree_hashes"}, treeColumns, pgx.CopyFromRows(treeRows)); err != nil {
				return fmt.Errorf("copy tree: %w", err)
			}
		}
		if len(cps) > 0 {
			if _, err := s.CopyFrom(ctx, pgx.Identifier{"audit_checkpoints"}, []string{"chain_id", "seq", "head_hash",
				"created_at", "final", "prev_signature", "signature", "key_id", "public_key", "note"}, pgx.CopyFromRows(cps)); err != nil {
				return fmt.Errorf("copy checkpoints: %w", err)
			}
		}
		rows, treeRows, cps = rows[:0], treeRows[:0], cps[:0]
		return nil
	}
	treeFrom := int64(0)
	for seq := int64(1); seq <= int64(n); seq++ {
		at := proof.CanonicalTime(start.Add(time.Duration(seq) * g.step))
		if len(pending) == 0 {
			pending = g.runEvents(at)
		}
		c := pending[0]
		pending = pending[1:]
		c.Time = at
		body := c.Body(at)
		h := proof.ChainHash(head, chainID, seq, body)
		rec := &sealed{Event: c.Event, ChainID: chainID, Seq: seq, RecordedAt: at, Body: body, PrevHash: head, Hash: h, payload: c.PayloadJSON()}
		if head == nil {
			rec.PrevHash = make([]byte, proof.HashSize)
		}
		r, err := w.eventRows([]*sealed{rec})
		if err != nil {
			return err
		}
		rows = append(rows, r[0])
		head = h
		hs, err := tlog.StoredHashesForRecordHash(seq-1, proof.LeafHash(h), hr)
		if err != nil {
			return err
		}
		stored = append(stored, hs...)
		if g.rnd.IntN(2000) == 0 {
			g.runIDs, g.eventIDs = append(g.runIDs, c.RunID), append(g.eventIDs, c.ID)
		}
		if final := seq == int64(n); seq%1000 == 0 || final {
			to := tlog.StoredHashCount(seq)
			treeRows = append(treeRows, treeRow(chainID, treeFrom, stored[treeFrom:to]))
			treeFrom = to
			root, err := tlog.TreeHash(seq, hr)
			if err != nil {
				return err
			}
			note, err := proof.SignNote(g.key, proof.Origin(g.node, chainID), seq, root)
			if err != nil {
				return err
			}
			cp := proof.SignCheckpoint(g.key, chainID, seq, head, at, final, lastSig)
			sig, _ := hex.DecodeString(cp.Signature)
			cps = append(cps, []any{chainID, seq, head, cp.CreatedAt, final, nilIfEmpty(lastSig), sig, cp.KeyID, []byte(pub), note})
			lastSig = sig
		}
		if len(rows) >= 20_000 {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := flush(); err != nil {
		return err
	}
	_, err := s.Exec(ctx, `INSERT INTO audit_heads (chain_id, seq, hash) VALUES ($1, $2, $3)`, chainID, n, head)
	return err
}
