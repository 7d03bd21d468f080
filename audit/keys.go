package audit

import (
	"context"
	"crypto/ed25519"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/sandgate/sandgate"
)

// The key registry. Each node's checkpoint key is registered in audit_keys
// when the node first uses it, before it signs its first checkpoint,
// through audit_register_key (the application role cannot write the table
// itself), and in the same transaction the registration becomes an event
// of the trail: audit.key_registered for a node's first key,
// audit.key_rotated for a later one, which names the key it replaces and
// carries that key's endorsement. Verify trusts what the registry vouches
// for: a node's first key, a rotation endorsed by the key it replaces, and
// the keys migration 5 registered from the checkpoints that existed then.

// Sources of a registration.
const (
	KeySourceWriter    = "writer"    // a writer registered its key on first use
	KeySourceMigration = "migration" // migration 5 found it in older checkpoints
)

// KeyRecord is one registration of a node's checkpoint key.
type KeyRecord struct {
	Node      string `json:"node"`
	KeyID     string `json:"key_id"`
	PublicKey string `json:"public_key"` // hex
	// FirstUsedAt is the database's clock at registration (for keys
	// registered by migration, their first checkpoint's time).
	FirstUsedAt time.Time `json:"first_used_at"`
	ChainID     string    `json:"chain_id,omitempty"` // the chain whose writer registered it
	// Replaces is the node's key this one replaced (a rotation), and
	// Endorsement (hex) that key's signature over KeyRotationMessage.
	Replaces    string `json:"replaces,omitempty"`
	Endorsement string `json:"endorsement,omitempty"`
	Source      string `json:"source"`
	// Known and Pinned are verify's verdicts: the registry vouches for the
	// key (first key of its node, endorsed rotation, or registered by
	// migration), and the key is among the pinned trusted keys.
	Known  bool `json:"known"`
	Pinned bool `json:"pinned"`
}

// KeyRotationMessage returns the bytes a rotation's endorsement signs, with
// the replaced key:
//
//	sandgate-key-rotation-v1\n node\n replaced key_id\n hex(new public key)
func KeyRotationMessage(node, replaces string, pub ed25519.PublicKey) []byte {
	return fmt.Appendf(nil, "sandgate-key-rotation-v1\n%s\n%s\n%x", node, replaces, []byte(pub))
}

// publicKey returns k's public key, or nil when it is not one.
func (k KeyRecord) publicKey() ed25519.PublicKey {
	b, err := hex.DecodeString(k.PublicKey)
	if err != nil || len(b) != ed25519.PublicKeySize || KeyID(b) != k.KeyID {
		return nil
	}
	return b
}

// payload is k as the payload of its trail event.
func (k KeyRecord) payload() map[string]any {
	p := map[string]any{
		"node": k.Node, "key_id": k.KeyID, "public_key": k.PublicKey, "source": k.Source,
		"first_used_at": k.FirstUsedAt.UTC().Format(time.RFC3339Nano),
	}
	for name, v := range map[string]string{"chain_id": k.ChainID, "replaces": k.Replaces, "endorsement": k.Endorsement} {
		if v != "" {
			p[name] = v
		}
	}
	return p
}

// keyFromEvent reads the registration an audit.key_registered or
// audit.key_rotated event records; ok is false for any other event.
func keyFromEvent(ev sandgate.Event, recordedAt time.Time) (KeyRecord, bool) {
	if ev.Type != sandgate.EventAuditKeyRegistered && ev.Type != sandgate.EventAuditKeyRotated {
		return KeyRecord{}, false
	}
	str := func(name string) string {
		s, _ := ev.Payload[name].(string)
		return s
	}
	k := KeyRecord{Node: str("node"), KeyID: str("key_id"), PublicKey: str("public_key"), ChainID: str("chain_id"),
		Replaces: str("replaces"), Endorsement: str("endorsement"), Source: str("source"), FirstUsedAt: recordedAt}
	if t, err := time.Parse(time.RFC3339Nano, str("first_used_at")); err == nil {
		k.FirstUsedAt = t
	}
	return k, k.publicKey() != nil
}

// registryKeys decides which registrations the registry vouches for,
// given in registration order, and marks them Known and Pinned: each
// node's first key, every key migration 5 registered, and a rotation
// endorsed by the vouched-for key it replaces; a pinned key always. It
// returns the keys vouched for, by key ID, and the rotations it rejects.
func registryKeys(keys []KeyRecord, pinned map[string]ed25519.PublicKey) (map[string]ed25519.PublicKey, []KeyRecord) {
	known := map[string]ed25519.PublicKey{}
	valid := map[[2]string]ed25519.PublicKey{} // node, key ID
	seen := map[string]bool{}                  // nodes with a key
	var rejected []KeyRecord
	for i := range keys {
		k := &keys[i]
		pub := k.publicKey()
		if pub == nil {
			continue
		}
		_, k.Pinned = pinned[k.KeyID]
		ok := k.Pinned || k.Source == KeySourceMigration
		if !ok && !seen[k.Node] && k.Replaces == "" {
			ok = true // the node's first key
		}
		if !ok && k.Replaces != "" {
			sig, err := hex.DecodeString(k.Endorsement)
			old := valid[[2]string{k.Node, k.Replaces}]
			ok = err == nil && old != nil && ed25519.Verify(old, KeyRotationMessage(k.Node, k.Replaces, pub), sig)
		}
		seen[k.Node] = true
		if !ok {
			rejected = append(rejected, *k)
			continue
		}
		k.Known = true
		valid[[2]string{k.Node, k.KeyID}] = pub
		known[k.KeyID] = pub
	}
	return known, rejected
}

// Keys returns the key registry, in registration order.
func (s *Store) Keys(ctx context.Context) ([]KeyRecord, error) {
	rows, err := s.pool.Query(ctx, `SELECT node, key_id, public_key, first_used_at, coalesce(chain_id, ''),
		coalesce(replaces, ''), endorsement, source FROM audit_keys ORDER BY id`)
	if err != nil {
		return nil, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read the key registry")
	}
	keys, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (KeyRecord, error) {
		var k KeyRecord
		var pub, endorsement []byte
		err := r.Scan(&k.Node, &k.KeyID, &pub, &k.FirstUsedAt, &k.ChainID, &k.Replaces, &endorsement, &k.Source)
		k.PublicKey, k.Endorsement, k.FirstUsedAt = hex.EncodeToString(pub), hex.EncodeToString(endorsement), k.FirstUsedAt.UTC()
		return k, err
	})
	if err != nil {
		return nil, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read the key registry")
	}
	return keys, nil
}

// checkSchema makes sure the database has what this writer needs: the key
// registry and the database-stamped recorded_at of migration 5.
func (s *Store) checkSchema(ctx context.Context) error {
	var ok bool
	if err := s.pool.QueryRow(ctx, `SELECT to_regprocedure('audit_register_key(text,bytea,text,bytea)') IS NOT NULL`).Scan(&ok); err != nil {
		return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "read the audit schema")
	}
	if !ok {
		return errors.New("audit: the database schema is older than this sandgate (no audit key registry): run sandgate migrate up")
	}
	return nil
}

// RegisterKey registers this Store's signing key for its node now (a
// rotation endorsed by Config.PreviousSigningKeyFile when the node had
// another key), records it in the trail unless it is there already, signs
// a checkpoint, and returns the registration. A writer does this by itself
// before its first checkpoint; sandgate audit rotate-key calls it. The
// error is AUDIT-UNAVAILABLE when the trail cannot take it now.
func (s *Store) RegisterKey(ctx context.Context) (KeyRecord, error) {
	if s.w == nil {
		return KeyRecord{}, sandgate.Errorf(sandgate.CodeAuditUnavailable, "audit store is read-only")
	}
	r := &request{key: true, done: make(chan error, 1), ctx: ctx}
	if !s.w.enqueue(r) {
		return KeyRecord{}, sandgate.Errorf(sandgate.CodeAuditUnavailable, "audit store is closed")
	}
	select {
	case err := <-r.done:
		if err != nil {
			return KeyRecord{}, err
		}
		return s.w.lastKey, nil
	case <-ctx.Done():
		return KeyRecord{}, sandgate.WrapError(sandgate.CodeAuditUnavailable, ctx.Err(), "the key registration did not finish in time")
	}
}

// registerNow answers a RegisterKey request in the writer.
func (w *writer) registerNow(r *request) {
	if len(w.pending) > 0 || w.broken != nil {
		r.done <- unavailable(errors.Join(w.broken, errors.New("postgres unreachable; events are being spooled")))
		return
	}
	w.keyReady = false
	if !w.ensureKey() {
		r.done <- unavailable(errors.New("the signing key could not be registered (see the log)"))
		return
	}
	w.checkpoint(false)
	r.done <- nil
}

// endorsement returns the previous key's signature over the rotation to
// this writer's key, or nil without a previous key.
func (w *writer) endorsement() []byte {
	prev := w.s.prevKey
	if prev == nil {
		return nil
	}
	pub := w.key.Public().(ed25519.PublicKey)
	return ed25519.Sign(prev, KeyRotationMessage(w.cfg.Node, KeyID(prev.Public().(ed25519.PublicKey)), pub))
}

// ensureKey makes sure, once per writer, that its key is registered for
// its node and that the trail records the registration: both in one
// transaction, the event appended to this chain so that the checkpoint
// about to be signed covers it. It returns false when that cannot be done
// now; the checkpoint then waits.
func (w *writer) ensureKey() bool {
	if w.keyReady {
		return true
	}
	if len(w.pending) > 0 || w.broken != nil {
		return false
	}
	pub := w.key.Public().(ed25519.PublicKey)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tx, err := w.s.ctl.Begin(ctx)
	if err != nil {
		w.markDown(err)
		return false
	}
	defer func() { _ = tx.Rollback(ctx) }()
	var keyID, status string
	var recorded bool
	err = tx.QueryRow(ctx, `SELECT key_id, status, recorded FROM audit_register_key($1, $2, $3, $4)`,
		w.cfg.Node, []byte(pub), w.chainID, nilIfEmpty(w.endorsement())).Scan(&keyID, &status, &recorded)
	var rec KeyRecord
	if err == nil {
		var pk, endorsement []byte
		var chain, replaces *string
		err = tx.QueryRow(ctx, `SELECT public_key, first_used_at, chain_id, replaces, endorsement, source
			FROM audit_keys WHERE node = $1 AND key_id = $2`, w.cfg.Node, keyID).
			Scan(&pk, &rec.FirstUsedAt, &chain, &replaces, &endorsement, &rec.Source)
		rec.Node, rec.KeyID, rec.PublicKey, rec.Endorsement = w.cfg.Node, keyID, hex.EncodeToString(pk), hex.EncodeToString(endorsement)
		rec.FirstUsedAt = rec.FirstUsedAt.UTC()
		if chain != nil {
			rec.ChainID = *chain
		}
		if replaces != nil {
			rec.Replaces = *replaces
		}
	}
	if err != nil {
		w.keyFailed(err)
		return false
	}
	if recorded {
		if err := tx.Commit(ctx); err != nil {
			w.keyFailed(err)
			return false
		}
		w.keyReady, w.lastKey = true, rec
		return true
	}
	ev := sandgate.NewAuditKeyRegistered(sandgate.NodeSubject(w.cfg.Node), time.Time{}, rec.payload())
	if rec.Replaces != "" {
		ev = sandgate.NewAuditKeyRotated(sandgate.NodeSubject(w.cfg.Node), time.Time{}, rec.payload())
	}
	oldSeq, oldHash := w.headSeq, w.headHash
	recs := w.seal([]canonical{w.s.prepare(ev)})
	rows, err := w.eventRows(recs)
	if err == nil {
		err = w.copyFresh(ctx, tx, recs, rows)
	}
	if err != nil {
		w.headSeq, w.headHash = oldSeq, oldHash
		w.keyFailed(err)
		return false
	}
	if err := tx.Commit(ctx); err != nil {
		committed, known := w.resolve(recs)
		switch {
		case committed:
		case known:
			w.headSeq, w.headHash = oldSeq, oldHash
			w.keyFailed(err)
			return false
		default:
			// Delivered (idempotently) with the spool; the registration,
			// if it did not land, is made again on the next checkpoint.
			w.markDown(err)
			w.addPending(recs)
			return false
		}
	}
	w.sinceCP++
	w.keyReady, w.lastKey = true, rec
	w.cfg.Logger.Info("audit: checkpoint key registered", "status", status, "node", rec.Node, "key_id", rec.KeyID,
		"replaces", rec.Replaces, "source", rec.Source)
	return true
}

// keyFailed notes that the key could not be registered now.
func (w *writer) keyFailed(err error) {
	if !w.dbDown {
		w.logf("audit: cannot register the checkpoint key now; checkpoints wait for it", "err", err)
	}
	w.markDown(err)
}
