package pgstore

import (
	"errors"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
)

// TestCursor: a cursor decodes into what it encoded; anything else, or a
// cursor of another shape, is INVALID-REQUEST naming the cursor.
func TestCursor(t *testing.T) {
	type at struct {
		T time.Time `json:"t"`
		S int64     `json:"s"`
	}
	want := at{T: time.Date(2026, 11, 28, 1, 2, 3, 4000, time.UTC), S: 7}
	var got at
	if err := DecodeCursor(EncodeCursor(want), &got); err != nil || got != want {
		t.Fatalf("round trip = %+v, %v; want %+v", got, err, want)
	}
	for _, bad := range []string{"%%%", EncodeCursor(map[string]any{"x": 1}), ""} {
		err := DecodeCursor(bad, &got)
		var se *sandgate.Error
		if !errors.As(err, &se) || se.Code != sandgate.CodeInvalidRequest || se.Field != "cursor" {
			t.Errorf("DecodeCursor(%q) = %v, want INVALID-REQUEST on cursor", bad, err)
		}
	}
	if tm := Time(time.Date(2026, 1, 1, 0, 0, 0, 1999, time.FixedZone("x", 3600))); tm.Nanosecond() != 1000 || tm.Location() != time.UTC {
		t.Errorf("Time = %v, want UTC microseconds", tm)
	}
}
