package executor

import (
	"context"
	"strings"
	"testing"
	"time"
)

// TestReconcilerHolder: a survivor's look at a lapsed node's lease names
// a holder renewing it elsewhere, and nothing for one that lapsed or
// whose process on this host is gone (those nodes are dead, and taken
// over).
func TestReconcilerHolder(t *testing.T) {
	for _, tc := range []struct {
		name    string
		created time.Duration // before now
		self    bool
		held    bool
	}{
		{"live elsewhere", time.Second, false, true},
		{"lapsed", time.Hour, false, false},
		{"dead on this host", time.Second, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeDocker()
			leaseVolume(f, "unit", "other", time.Now().Add(-tc.created), tc.self)
			e, _ := unitExecutor(t, f, nil)
			holder, err := e.Reconciler().Holder(context.Background())
			if err != nil {
				t.Fatal(err)
			}
			if tc.held != (holder != "") || tc.held && !strings.Contains(holder, "instance other") {
				t.Errorf("Holder = %q, want held %v naming instance other", holder, tc.held)
			}
		})
	}
}
