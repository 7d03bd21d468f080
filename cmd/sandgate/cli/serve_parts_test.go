package cli

import (
	"context"
	"io"
	"slices"
	"sync"
	"testing"

	"github.com/sandgate/sandgate"
)

// TestHeldEvents: what serve emits before the trail opens is held, then
// handed over in order ahead of everything emitted later; nothing goes
// anywhere before the release.
func TestHeldEvents(t *testing.T) {
	var mu sync.Mutex
	var got []sandgate.EventType
	trail := sandgate.EventSinkFunc(func(ev sandgate.Event) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, ev.Type)
	})
	var h heldEvents
	h.Emit(sandgate.Event{Type: sandgate.EventPolicyLoaded})
	h.Emit(sandgate.Event{Type: sandgate.EventPolicyLoadFailed})
	if len(got) != 0 {
		t.Fatalf("events reached the trail before it opened: %v", got)
	}
	h.release(trail)
	h.Emit(sandgate.Event{Type: sandgate.EventRunRequested})
	want := []sandgate.EventType{sandgate.EventPolicyLoaded, sandgate.EventPolicyLoadFailed, sandgate.EventRunRequested}
	if !slices.Equal(got, want) {
		t.Errorf("the trail got %v, want %v", got, want)
	}
}

// TestLaterBlobs: before the run store is open, the executor's blob store
// answers UNAVAILABLE instead of losing or faking a blob.
func TestLaterBlobs(t *testing.T) {
	var b laterBlobs
	if _, _, err := b.PutBlob(context.Background(), nil); sandgate.ErrorCodeOf(err) != sandgate.CodeUnavailable {
		t.Errorf("PutBlob before the run store = %v, want %s", err, sandgate.CodeUnavailable)
	}
	if err := b.WriteBlob(context.Background(), "00", 0, -1, io.Discard); sandgate.ErrorCodeOf(err) != sandgate.CodeUnavailable {
		t.Errorf("WriteBlob before the run store = %v, want %s", err, sandgate.CodeUnavailable)
	}
}

// TestTeardownLastMadeFirstUndone: serve's teardown undoes in reverse, so
// the executor (made before the trail, shut down after it opened) is
// gone before the trail closes.
func TestTeardownLastMadeFirstUndone(t *testing.T) {
	var order []string
	var down teardown
	for _, step := range []string{"close executor", "close trail", "shut down executor"} {
		down.push(func() { order = append(order, step) })
	}
	down.run()
	if want := []string{"shut down executor", "close trail", "close executor"}; !slices.Equal(order, want) {
		t.Errorf("teardown ran %v, want %v", order, want)
	}
}
