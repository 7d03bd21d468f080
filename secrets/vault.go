// Package secrets keeps the secrets runs use without holding them: each
// value encrypted with AES-256-GCM under a data key of its own, the data
// key wrapped with AES-256-GCM under a key-encryption key of
// SANDGATE_SECRETS_KEY_FILE (Keyring), stored through a
// sandgate.SecretStore, every change recorded in the trail (Vault).
//
// Nothing here prints, logs or records a value: the trail and the API see
// a secret's name, its version and its value's keyed hash. A value is
// revealed for one purpose, a run's egress proxy (Vault.Reveal), as a
// sandgate.SecretValue that prints as "[secret]" (docs/secrets.md).
package secrets

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/sandgate/sandgate"
)

// Vault is the secrets' one owner: their values set, listed without
// them, removed, revealed for a run, and rewrapped under the primary key.
// It is safe for concurrent use.
type Vault struct {
	keys  *Keyring
	store sandgate.SecretStore
	rec   sandgate.Recorder
	mask  sandgate.Masker
	now   sandgate.Clock
}

// Options are a Vault's parts. Keys, Store and a keyed Masker are
// required; Recorder is required to change secrets.
type Options struct {
	Keys     *Keyring
	Store    sandgate.SecretStore
	Recorder sandgate.Recorder
	// Masker makes the values' keyed hashes (the trail's mask key).
	Masker sandgate.Masker
	Clock  sandgate.Clock
}

// New returns the vault of o.
func New(o Options) (*Vault, error) {
	switch {
	case o.Keys == nil, o.Store == nil:
		return nil, errors.New("secrets: Keys and Store are required")
	case !o.Masker.Keyed():
		return nil, errors.New("secrets: a keyed Masker is required")
	}
	if o.Clock == nil {
		o.Clock = time.Now
	}
	return &Vault{keys: o.Keys, store: o.Store, rec: o.Recorder, mask: o.Masker, now: o.Clock}, nil
}

// Put stores value as name's next version, set by s's actor, and records
// secret.set (a name with no value stored: created is true) or
// secret.rotated, committed before the version is: a change the trail
// cannot take is not made (AUDIT-UNAVAILABLE). INVALID-REQUEST names the
// field at fault: "name" or "value".
func (v *Vault) Put(ctx context.Context, s sandgate.Subject, name, value string) (info sandgate.SecretInfo, created bool, err error) {
	if err := sandgate.CheckSecretName("name", name); err != nil {
		return sandgate.SecretInfo{}, false, err
	}
	if err := sandgate.CheckSecretValue(value); err != nil {
		return sandgate.SecretInfo{}, false, err
	}
	if v.rec == nil {
		return sandgate.SecretInfo{}, false, errors.New("secrets: no Recorder to record the change")
	}
	err = v.store.PutSecret(ctx, name, func(version int64, prev *sandgate.SecretInfo) (sandgate.SealedSecret, error) {
		now := v.now().UTC().Truncate(time.Microsecond)
		sealed := sandgate.SealedSecret{SecretInfo: sandgate.SecretInfo{
			Name: name, Version: version, ValueHash: v.mask.Hash(value), SetBy: s.Actor, SetAt: now,
			CreatedBy: s.Actor, CreatedAt: now,
		}}
		if prev != nil {
			sealed.CreatedBy, sealed.CreatedAt = prev.CreatedBy, prev.CreatedAt
		}
		if err := v.keys.seal(&sealed, value); err != nil {
			return sealed, err
		}
		payload := infoPayload(sealed.SecretInfo)
		ev := sandgate.NewSecretSet(s, now, payload)
		if prev != nil {
			payload["previous_version"] = prev.Version
			ev = sandgate.NewSecretRotated(s, now, payload)
		}
		if err := v.rec.Record(ctx, ev); err != nil {
			return sealed, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "the audit trail cannot record the change now; the secret was not changed, retry later")
		}
		info, created = sealed.SecretInfo, prev == nil
		return sealed, nil
	})
	if err != nil {
		return sandgate.SecretInfo{}, false, err
	}
	return info, created, nil
}

// infoPayload is what the trail records of a secret: never its value.
func infoPayload(i sandgate.SecretInfo) map[string]any {
	return map[string]any{"name": i.Name, "version": i.Version, "value_hash": i.ValueHash, "key_id": i.KeyID}
}

// List is every stored secret, without values, by name.
func (v *Vault) List(ctx context.Context) ([]sandgate.SecretInfo, error) {
	return v.store.ListSecrets(ctx)
}

// Delete removes name's value, by s's actor, and records secret.deleted,
// committed before the removal is. NOT-FOUND when none is stored.
func (v *Vault) Delete(ctx context.Context, s sandgate.Subject, name string) error {
	if err := sandgate.CheckSecretName("name", name); err != nil {
		return err
	}
	if v.rec == nil {
		return errors.New("secrets: no Recorder to record the change")
	}
	return v.store.DeleteSecret(ctx, name, func(info sandgate.SecretInfo) error {
		if err := v.rec.Record(ctx, sandgate.NewSecretDeleted(s, v.now(), infoPayload(info))); err != nil {
			return sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "the audit trail cannot record the change now; the secret was not removed, retry later")
		}
		return nil
	})
}

// States are the stored secrets among names with their versions: what a
// policy input says of them (input.secrets).
func (v *Vault) States(ctx context.Context, names []string) (map[string]sandgate.SecretState, error) {
	if len(names) == 0 {
		return nil, nil
	}
	sealed, err := v.store.SealedSecrets(ctx, names)
	if err != nil {
		return nil, err
	}
	out := make(map[string]sandgate.SecretState, len(sealed))
	for _, s := range sealed {
		out[s.Name] = sandgate.SecretState{Version: s.Version}
	}
	return out, nil
}

// Reveal is the values of the secrets bindings name, for the egress
// proxy of the run the bindings admitted. A secret removed since, or one
// that does not open (its key is no longer in the key file), fails the
// whole run: NOT-FOUND or INTERNAL naming "secrets", never the value.
func (v *Vault) Reveal(ctx context.Context, bindings []sandgate.SecretBinding) ([]sandgate.RunSecret, error) {
	if len(bindings) == 0 {
		return nil, nil
	}
	names := make([]string, len(bindings))
	for i, b := range bindings {
		names[i] = b.Name
	}
	sealed, err := v.store.SealedSecrets(ctx, names)
	if err != nil {
		return nil, err
	}
	out := make([]sandgate.RunSecret, 0, len(bindings))
	for _, b := range bindings {
		i := slices.IndexFunc(sealed, func(s sandgate.SealedSecret) bool { return s.Name == b.Name })
		if i < 0 {
			return nil, &sandgate.Error{Code: sandgate.CodeNotFound, Field: "secrets",
				Message: fmt.Sprintf("secret %s was removed after the run was admitted", b.Name)}
		}
		value, err := v.keys.open(sealed[i])
		if err != nil {
			return nil, &sandgate.Error{Code: sandgate.CodeInternal, Field: "secrets", Message: err.Error()}
		}
		out = append(out, sandgate.RunSecret{SecretBinding: b, Version: sealed[i].Version, Value: sandgate.NewSecretValue(value)})
	}
	return out, nil
}

// ReEncrypt wraps every secret of store's data key under keys' primary
// key (after a new key was put first in the key file), and returns how
// many it rewrapped; the values' ciphertexts are left as they are. A
// secret whose key the file no longer holds stops it with an error
// naming the secret and the key.
func ReEncrypt(ctx context.Context, keys *Keyring, store sandgate.SecretStore) (int, error) {
	return store.RewrapSecrets(ctx, keys.rewrap)
}
