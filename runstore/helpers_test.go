package runstore

import (
	"errors"
	"testing"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/audittest"
)

// testStore returns a Store on dsn, which the test closes at cleanup;
// mod adjusts the config.
func testStore(t testing.TB, dsn string, mod func(*Config)) *Store {
	t.Helper()
	var cfg Config
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(audittest.OpenDB(t, dsn), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func isCode(err error, code sandgate.ErrorCode) bool {
	var e *sandgate.Error
	return errors.As(err, &e) && e.Code == code
}
