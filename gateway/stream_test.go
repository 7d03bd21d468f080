package gateway

import (
	"bufio"
	"context"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
)

// TestLogsStreamBeforeRunEnds reads the first output of a followed run
// while the executor still blocks, then sees the rest and the exit.
func TestLogsStreamBeforeRunEnds(t *testing.T) {
	e := newEnv(t)
	v := e.submit(tokAlice, "block")
	e.waitRunning(v.ID)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.ts.URL+"/v1/runs/"+v.ID+"/logs?follow=true", nil)
	req.Header.Set("Authorization", "Bearer "+tokAlice)
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type = %q", ct)
	}
	if resp.Header.Get("X-Correlation-ID") == "" {
		t.Errorf("stream without X-Correlation-ID")
	}
	events := make(chan LogEvent, 16)
	go func() {
		defer close(events)
		_ = readSSE(resp.Body, func(ev LogEvent) error { events <- ev; return nil })
	}()
	next := func() LogEvent {
		t.Helper()
		select {
		case ev, ok := <-events:
			if !ok {
				t.Fatal("stream ended early")
			}
			return ev
		case <-ctx.Done():
			t.Fatal("no event in time")
		}
		return LogEvent{}
	}
	// Everything up to "first" arrives while the run is still blocked.
	var seen []string
	for {
		ev := next()
		seen = append(seen, ev.Event)
		if ev.Event == EventStdout {
			b, err := ev.Chunk()
			if err != nil || string(b) != "first\n" {
				t.Fatalf("first chunk = %q, %v", b, err)
			}
			break
		}
	}
	if e.srv.svc.live.get(v.ID) == nil {
		t.Fatal("the run ended before the first bytes were read")
	}
	if !e.exec.release(v.ID) {
		t.Fatal("the run was not blocked in the executor")
	}
	for {
		ev := next()
		seen = append(seen, ev.Event)
		if ev.Event == EventExit {
			x, err := ev.Exit()
			if err != nil || x.Outcome != sandgate.OutcomeSucceeded || x.ExitCode == nil || *x.ExitCode != 0 {
				t.Errorf("exit = %+v, %v", x, err)
			}
			break
		}
	}
	want := []string{EventState, EventState, EventStdout, EventStdout, EventExit}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if _, ok := <-events; ok {
		t.Errorf("events after exit")
	}
}

// TestLogsFinishedRun replays a finished run's stored output.
func TestLogsFinishedRun(t *testing.T) {
	e := newEnv(t)
	tests := []struct {
		name string
		cmd  []string
		want string
	}{
		{"stdout", []string{"echo", "hello"}, "id: 1\nevent: stdout\ndata: {\"data\":\"hello\\n\",\"encoding\":\"utf-8\"}\n\n" +
			"id: 2\nevent: exit\ndata: {\"state\":\"finished\",\"outcome\":\"succeeded\",\"exit_code\":0,\"oom_killed\":false,\"error\":null,\"duration_ms\":1500,\"stdout\":{\"bytes\":6,\"truncated\":false},\"stderr\":{\"bytes\":0,\"truncated\":false}}\n\n"},
		{"stderr", []string{"stderr", "oops"}, "id: 1\nevent: stderr\ndata: {\"data\":\"oops\\n\",\"encoding\":\"utf-8\"}\n\n" +
			"id: 2\nevent: exit\ndata: {\"state\":\"finished\",\"outcome\":\"succeeded\",\"exit_code\":0,\"oom_killed\":false,\"error\":null,\"duration_ms\":1500,\"stdout\":{\"bytes\":0,\"truncated\":false},\"stderr\":{\"bytes\":5,\"truncated\":false}}\n\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			v := e.submit(tokAlice, tc.cmd...)
			e.waitFinished(v.ID)
			for _, q := range []string{"", "?follow=true"} {
				r := e.do(http.MethodGet, "/v1/runs/"+v.ID+"/logs"+q, tokAlice, "")
				if r.status != http.StatusOK {
					t.Fatalf("status %d: %s", r.status, r.body)
				}
				if diff := cmp.Diff(tc.want, string(r.body)); diff != "" {
					t.Errorf("stream%s (-want +got):\n%s", q, diff)
				}
			}
		})
	}
	if r := e.do(http.MethodGet, "/v1/runs/01900000-0000-7000-8000-000000000000/logs", tokAlice, ""); r.status != http.StatusNotFound {
		t.Errorf("missing run logs: %d", r.status)
	}
	if r := e.do(http.MethodGet, "/v1/runs/01900000-0000-7000-8000-000000000000/logs?follow=maybe", tokAlice, ""); r.status != http.StatusBadRequest {
		t.Errorf("bad follow: %d", r.status)
	}
}

// TestLogsNoFollowLive answers what a live run produced so far, then ends.
func TestLogsNoFollowLive(t *testing.T) {
	e := newEnv(t)
	v := e.submit(tokAlice, "block")
	e.waitRunning(v.ID)
	r := e.do(http.MethodGet, "/v1/runs/"+v.ID+"/logs", tokAlice, "")
	if !strings.Contains(string(r.body), "event: stdout\ndata: {\"data\":\"first\\n\"") || strings.Contains(string(r.body), "event: exit") {
		t.Errorf("body = %s", r.body)
	}
	// Resuming after the last event id gives nothing new.
	sc := bufio.NewScanner(strings.NewReader(string(r.body)))
	last := ""
	for sc.Scan() {
		if id, ok := strings.CutPrefix(sc.Text(), "id: "); ok {
			last = id
		}
	}
	again := e.do(http.MethodGet, "/v1/runs/"+v.ID+"/logs", tokAlice, "", "Last-Event-ID: "+last)
	if strings.Contains(string(again.body), "event:") {
		t.Errorf("resume returned old events: %s", again.body)
	}
	got := e.do(http.MethodGet, "/v1/runs/"+v.ID, tokAlice, "").run(t)
	if got.State != sandgate.StateRunning || got.Stdout.Data != "first\n" {
		t.Errorf("live GET = state %q stdout %q", got.State, got.Stdout.Data)
	}
	e.exec.release(v.ID)
}

// TestLiveOutputBounded checks that a live run keeps at most its output
// limit per stream and encodes invalid UTF-8 as base64.
func TestLiveOutputBounded(t *testing.T) {
	lr := newLiveRun(sandgate.Run{ID: "r", Spec: sandgate.RunSpec{OutputLimitBytes: 8}})
	lr.output(sandgate.Stdout, []byte("12345"))
	lr.output(sandgate.Stdout, []byte("67890"))
	lr.output(sandgate.Stdout, []byte("more"))
	lr.output(sandgate.Stderr, []byte{0xff, 0xfe})
	evs, _, _ := lr.since(0)
	var got []ChunkData
	for _, ev := range evs {
		got = append(got, chunkDataOf(t, ev))
	}
	want := []ChunkData{{"12345", "utf-8"}, {"678", "utf-8"}, {"//4=", "base64"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("chunks (-want +got):\n%s", diff)
	}
	if snap := lr.snapshot(); snap.Stdout.Bytes != 8 || snap.Stdout.Data != "12345678" {
		t.Errorf("snapshot stdout = %+v", snap.Stdout)
	}
}

func chunkDataOf(t *testing.T, ev sseEvent) ChunkData {
	t.Helper()
	b, err := LogEvent{Event: ev.name, Data: ev.data}.Chunk()
	if err != nil {
		t.Fatal(err)
	}
	return chunkData(b)
}

// TestReadSSE checks the client's event parser against the format's
// corner cases.
func TestReadSSE(t *testing.T) {
	in := ": comment\n\nid: 1\nevent: stdout\ndata: {\"a\":1}\n\ndata: one\ndata: two\n\nevent: exit\ndata:{}\n\n"
	var got []LogEvent
	if err := readSSE(strings.NewReader(in), func(ev LogEvent) error { got = append(got, ev); return nil }); err != nil {
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
