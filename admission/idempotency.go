package admission

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"time"

	"github.com/sandgate/sandgate"
)

// An Idempotency-Key is decided once, by its claim in the database
// (sandgate.IdempotencyKeys), made for the new run's ID before the
// request is decided: the primary key orders two requests with one key,
// on any nodes, and only the winner is decided and recorded. Nothing on a
// node remembers a key on its own.

// claim claims the pass's key for its run, or answers with the run the
// key names (errAnswered) when the same request made it, or CONFLICT when
// another request did.
func (p *pass) claim(ctx context.Context) error {
	if p.key == "" {
		return nil
	}
	g := p.g
	if g.d.Keys == nil {
		return sandgate.FieldError("Idempotency-Key", "this gateway keeps no idempotency keys")
	}
	spec := p.input.Request
	digest := g.d.Masker.Hash(specDigest(spec.RunSpec))
	principal := p.who.Principal.Name
	held, heldDigest, err := g.claimKey(ctx, principal, p.key, p.id, digest)
	if err != nil {
		return err
	}
	if held == "" {
		p.onFail(func() { g.releaseKey(principal, p.key, p.id) })
		return nil
	}
	existing, err := g.d.Runs.GetRun(ctx, held)
	if err != nil {
		return unavailable(err, "the run store")
	}
	same := heldDigest == digest
	if heldDigest == "" {
		// A key claimed before claims kept the request's digest: compare
		// the stored spec.
		same = specDigest(existing.Spec) == specDigest(g.d.Masker.StoredSpec(spec.RunSpec, nil))
	}
	if !same {
		return &sandgate.Error{Code: sandgate.CodeConflict,
			Message: fmt.Sprintf("Idempotency-Key %q was used for a different request (run %s); use a new key", p.key, existing.ID),
			Details: map[string]any{"run_id": existing.ID}}
	}
	if live := g.d.Live.Run(existing.ID); live != nil {
		existing = live
	}
	p.answer = Answer{Run: existing, Replayed: true}
	return errAnswered
}

// claimKey claims a key for runID and digest. It returns "" when this
// request is the one to decide, else the run the key names once that run
// exists, and the digest of the request that made it. A claim whose run
// does not appear (its request was being decided elsewhere, and was
// refused) is taken again.
func (g *Gate) claimKey(ctx context.Context, principal, key, runID, digest string) (string, string, error) {
	deadline := time.Now().Add(storeTimeout)
	for {
		held, heldDigest, err := g.d.Keys.ClaimIdempotencyKey(ctx, principal, key, runID, digest)
		if err != nil {
			return "", "", failClosed(err, "the idempotency keys")
		}
		if held == "" {
			return "", "", nil
		}
		if _, err := g.d.Runs.GetRun(ctx, held); err == nil {
			return held, heldDigest, nil
		}
		if time.Now().After(deadline) {
			return "", "", &sandgate.Error{Code: sandgate.CodeConflict,
				Message: fmt.Sprintf("a request with Idempotency-Key %q is still being admitted; retry later", key),
				Details: map[string]any{"run_id": held}}
		}
		select {
		case <-ctx.Done():
			return "", "", unavailable(ctx.Err(), "the idempotency keys")
		case <-time.After(25 * time.Millisecond):
		}
	}
}

// releaseKey gives up a claim whose request made no run.
func (g *Gate) releaseKey(principal, key, runID string) {
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if err := g.d.Keys.ReleaseIdempotencyKey(ctx, principal, key, runID); err != nil {
		g.d.Logger.Warn("release idempotency key", "error", err)
	}
}

// specDigest identifies a spec by its content, ignoring how empty lists
// and maps are spelled (null, [], {}), so that a spec read back from the
// store digests like the one that was stored.
func specDigest(s sandgate.RunSpec) string {
	raw, _ := json.Marshal(s)
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var g any
	_ = dec.Decode(&g)
	raw, _ = json.Marshal(prune(g))
	sum := sha256.Sum256(raw)
	return hex.EncodeToString(sum[:])
}

// prune drops nulls and empty lists and maps from a generic JSON value.
func prune(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if e = prune(e); e == nil {
				delete(x, k)
			} else {
				x[k] = e
			}
		}
		if len(x) == 0 {
			return nil
		}
		return x
	case []any:
		if len(x) == 0 {
			return nil
		}
		for i := range x {
			x[i] = prune(x[i])
		}
		return x
	}
	return v
}
