package api

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestReadSSE checks ReadEvents against the format's
// corner cases.
func TestReadSSE(t *testing.T) {
	in := ": comment\n\nid: 1\nevent: stdout\ndata: {\"a\":1}\n\ndata: one\ndata: two\n\nevent: exit\ndata:{}\n\n"
	var got []LogEvent
	if err := ReadEvents(strings.NewReader(in), func(ev LogEvent) error { got = append(got, ev); return nil }); err != nil {
		t.Fatal(err)
	}
	want := []LogEvent{
		{ID: "1", Event: "stdout", Data: []byte(`{"a":1}`)},
		{Event: "message", Data: []byte("one\ntwo")},
		{Event: "exit", Data: []byte("{}")},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
}
