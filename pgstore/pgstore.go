// Package pgstore holds what sandgate's two Postgres packages, audit and
// runstore, do alike: gorm over a pgx connection pool, times as Postgres
// keeps them, and the opaque keyset cursors of their paged lists.
package pgstore

import (
	"bytes"
	"database/sql"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"time"

	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"

	"github.com/sandgate/sandgate"
)

// Gorm returns gorm over db (a pgx handle it does not own), with no
// logging, no default transaction, no ping, and clock for the times gorm
// fills in.
func Gorm(db *sql.DB, clock func() time.Time) (*gorm.DB, error) {
	g, err := gorm.Open(postgres.New(postgres.Config{Conn: db}), &gorm.Config{
		Logger:                 logger.Discard,
		SkipDefaultTransaction: true,
		DisableAutomaticPing:   true,
		NowFunc:                func() time.Time { return clock().UTC() },
	})
	if err != nil {
		return nil, fmt.Errorf("open gorm: %w", err)
	}
	return g, nil
}

// Time is t as Postgres keeps it: UTC, truncated to microseconds.
func Time(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// TimePtr is Time of *t, nil for nil or the zero time.
func TimePtr(t *time.Time) *time.Time {
	if t == nil || t.IsZero() {
		return nil
	}
	u := Time(*t)
	return &u
}

// EncodeCursor encodes where a page ended (v, a small struct) as an
// opaque cursor.
func EncodeCursor(v any) string {
	data, _ := json.Marshal(v)
	return base64.RawURLEncoding.EncodeToString(data)
}

// DecodeCursor decodes a cursor EncodeCursor made into v;
// INVALID-REQUEST naming the field "cursor" for anything else.
func DecodeCursor(s string, v any) error {
	data, err := base64.RawURLEncoding.DecodeString(s)
	if err != nil {
		return sandgate.FieldError("cursor", "not a cursor this server issued")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return sandgate.FieldError("cursor", "not a cursor this server issued")
	}
	return nil
}
