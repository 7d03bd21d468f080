package runstore

import (
	"context"
	"errors"
	"time"

	"gorm.io/gorm"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/pgstore"
)

// The secrets table (migration 15) keeps each secret's last version
// sealed (sandgate.SealedSecret); package secrets seals and opens them.
// A removed secret keeps its row without ciphertexts, so that its
// versions go on from where they were.

var _ sandgate.SecretStore = (*Store)(nil)

// secretRow is one secrets row.
type secretRow struct {
	Name       string     `gorm:"column:name"`
	Version    int64      `gorm:"column:version"`
	KeyID      *string    `gorm:"column:key_id"`
	WrappedKey []byte     `gorm:"column:wrapped_key"`
	Ciphertext []byte     `gorm:"column:ciphertext"`
	ValueHash  *string    `gorm:"column:value_hash"`
	SetBy      string     `gorm:"column:set_by"`
	SetAt      time.Time  `gorm:"column:set_at"`
	CreatedBy  string     `gorm:"column:created_by"`
	CreatedAt  time.Time  `gorm:"column:created_at"`
	DeletedAt  *time.Time `gorm:"column:deleted_at"`
}

func (r secretRow) sealed() sandgate.SealedSecret {
	s := sandgate.SealedSecret{
		SecretInfo: sandgate.SecretInfo{Name: r.Name, Version: r.Version, SetBy: r.SetBy, SetAt: r.SetAt.UTC(),
			CreatedBy: r.CreatedBy, CreatedAt: r.CreatedAt.UTC()},
		WrappedKey: r.WrappedKey, Ciphertext: r.Ciphertext,
	}
	if r.KeyID != nil {
		s.KeyID = *r.KeyID
	}
	if r.ValueHash != nil {
		s.ValueHash = *r.ValueHash
	}
	return s
}

const secretColumns = `name, version, key_id, wrapped_key, ciphertext, value_hash, set_by, set_at, created_by, created_at, deleted_at`

// lockedSecret is name's row, locked for the transaction: a name not
// stored yet is locked by an advisory lock on it, so that two first puts
// of one name are one after the other.
func lockedSecret(tx *gorm.DB, name string) (*secretRow, error) {
	if err := tx.Exec("SELECT pg_advisory_xact_lock(hashtextextended(?, 0))", "secret:"+name).Error; err != nil {
		return nil, err
	}
	var rows []secretRow
	if err := tx.Raw(`SELECT `+secretColumns+` FROM secrets WHERE name = ? FOR UPDATE`, name).Scan(&rows).Error; err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, nil
	}
	return &rows[0], nil
}

// errSeal carries an error of the caller's function out of a transaction
// as it is, apart from the database's own.
type errSeal struct{ err error }

func (e errSeal) Error() string { return e.err.Error() }

// inTx runs fn in a transaction: the database's errors are UNAVAILABLE,
// fn's callers' (errSeal) come out as they are.
func (s *Store) inTx(ctx context.Context, what string, fn func(tx *gorm.DB) error) error {
	err := s.db.WithContext(ctx).Transaction(fn)
	var se errSeal
	switch {
	case err == nil:
		return nil
	case errors.As(err, &se):
		return se.err
	case sandgate.ErrorCodeOf(err) == sandgate.CodeNotFound:
		return err
	default:
		return storeErr(err, what)
	}
}

// PutSecret stores a new version of name (sandgate.SecretStore).
func (s *Store) PutSecret(ctx context.Context, name string, seal func(version int64, prev *sandgate.SecretInfo) (sandgate.SealedSecret, error)) error {
	return s.inTx(ctx, "put secret", func(tx *gorm.DB) error {
		row, err := lockedSecret(tx, name)
		if err != nil {
			return err
		}
		version, prev := int64(1), (*sandgate.SecretInfo)(nil)
		if row != nil {
			version = row.Version + 1
			if row.DeletedAt == nil {
				info := row.sealed().SecretInfo
				prev = &info
			}
		}
		sealed, err := seal(version, prev)
		if err != nil {
			return errSeal{err}
		}
		// The first version's author stays while the secret lives; one
		// set after a removal is a first version again.
		return tx.Exec(`INSERT INTO secrets (`+secretColumns+`)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, NULL)
			ON CONFLICT (name) DO UPDATE SET version = EXCLUDED.version, key_id = EXCLUDED.key_id,
				wrapped_key = EXCLUDED.wrapped_key, ciphertext = EXCLUDED.ciphertext, value_hash = EXCLUDED.value_hash,
				set_by = EXCLUDED.set_by, set_at = EXCLUDED.set_at,
				created_by = CASE WHEN secrets.deleted_at IS NULL THEN secrets.created_by ELSE EXCLUDED.created_by END,
				created_at = CASE WHEN secrets.deleted_at IS NULL THEN secrets.created_at ELSE EXCLUDED.created_at END,
				deleted_at = NULL`,
			name, version, sealed.KeyID, sealed.WrappedKey, sealed.Ciphertext, sealed.ValueHash,
			sealed.SetBy, pgstore.Time(sealed.SetAt), sealed.CreatedBy, pgstore.Time(sealed.CreatedAt)).Error
	})
}

// ListSecrets is every stored secret, by name, without ciphertexts.
func (s *Store) ListSecrets(ctx context.Context) ([]sandgate.SecretInfo, error) {
	var rows []secretRow
	err := s.db.WithContext(ctx).Raw(`SELECT name, version, key_id, value_hash, set_by, set_at, created_by, created_at
		FROM secrets WHERE deleted_at IS NULL ORDER BY name`).Scan(&rows).Error
	if err != nil {
		return nil, storeErr(err, "list secrets")
	}
	out := make([]sandgate.SecretInfo, len(rows))
	for i, r := range rows {
		out[i] = r.sealed().SecretInfo
	}
	return out, nil
}

// SealedSecrets are the stored secrets among names.
func (s *Store) SealedSecrets(ctx context.Context, names []string) ([]sandgate.SealedSecret, error) {
	if len(names) == 0 {
		return nil, nil
	}
	var rows []secretRow
	err := s.db.WithContext(ctx).Raw(`SELECT `+secretColumns+` FROM secrets
		WHERE name IN ? AND deleted_at IS NULL ORDER BY name`, names).Scan(&rows).Error
	if err != nil {
		return nil, storeErr(err, "read secrets")
	}
	out := make([]sandgate.SealedSecret, len(rows))
	for i, r := range rows {
		out[i] = r.sealed()
	}
	return out, nil
}

// DeleteSecret removes name's value and keeps its row (sandgate.SecretStore).
func (s *Store) DeleteSecret(ctx context.Context, name string, done func(sandgate.SecretInfo) error) error {
	return s.inTx(ctx, "delete secret", func(tx *gorm.DB) error {
		row, err := lockedSecret(tx, name)
		if err != nil {
			return err
		}
		if row == nil || row.DeletedAt != nil {
			return sandgate.Errorf(sandgate.CodeNotFound, "secret %s not found", name)
		}
		info := row.sealed().SecretInfo
		if err := done(info); err != nil {
			return errSeal{err}
		}
		// Who removed it is the trail's secret.deleted.
		return tx.Exec(`UPDATE secrets SET key_id = NULL, wrapped_key = NULL, ciphertext = NULL, value_hash = NULL,
			deleted_at = ? WHERE name = ?`, pgstore.Time(s.cfg.Clock()), name).Error
	})
}

// RewrapSecrets rewraps every stored secret (sandgate.SecretStore), each
// in a transaction of its own.
func (s *Store) RewrapSecrets(ctx context.Context, rewrap func(sandgate.SealedSecret) (sandgate.SealedSecret, bool, error)) (int, error) {
	var names []string
	if err := s.db.WithContext(ctx).Raw(`SELECT name FROM secrets WHERE deleted_at IS NULL ORDER BY name`).Scan(&names).Error; err != nil {
		return 0, storeErr(err, "list secrets")
	}
	changed := 0
	for _, name := range names {
		rewrapped := false
		err := s.inTx(ctx, "rewrap secret", func(tx *gorm.DB) error {
			row, err := lockedSecret(tx, name)
			if err != nil || row == nil || row.DeletedAt != nil {
				return err
			}
			next, ok, err := rewrap(row.sealed())
			if err != nil {
				return errSeal{err}
			}
			if !ok {
				return nil
			}
			rewrapped = true
			return tx.Exec(`UPDATE secrets SET key_id = ?, wrapped_key = ? WHERE name = ? AND version = ?`,
				next.KeyID, next.WrappedKey, name, row.Version).Error
		})
		if err != nil {
			return changed, err
		}
		if rewrapped {
			changed++
		}
	}
	return changed, nil
}
