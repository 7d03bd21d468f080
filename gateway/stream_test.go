package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
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
	events := make(chan api.LogEvent, 16)
	go func() {
		defer close(events)
		_ = api.ReadEvents(resp.Body, func(ev api.LogEvent) error { events <- ev; return nil })
	}()
	next := func() api.LogEvent {
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
		return api.LogEvent{}
	}
	// Everything up to "first" arrives while the run is still blocked.
	var seen []string
	for {
		ev := next()
		seen = append(seen, ev.Event)
		if ev.Event == api.EventStdout {
			b, err := ev.Chunk()
			if err != nil || string(b) != "first\n" {
				t.Fatalf("first chunk = %q, %v", b, err)
			}
			break
		}
	}
	if e.srv.node.runs.live.get(v.ID) == nil {
		t.Fatal("the run ended before the first bytes were read")
	}
	if !e.exec.release(v.ID) {
		t.Fatal("the run was not blocked in the executor")
	}
	for {
		ev := next()
		seen = append(seen, ev.Event)
		if ev.Event == api.EventExit {
			x, err := ev.Exit()
			if err != nil || x.Outcome != sandgate.OutcomeSucceeded || x.ExitCode == nil || *x.ExitCode != 0 {
				t.Errorf("exit = %+v, %v", x, err)
			}
			break
		}
	}
	want := []string{api.EventState, api.EventState, api.EventStdout, api.EventStdout, api.EventExit}
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
		{"stdout", []string{"echo", "hello"}, "id: 0.6.0\nevent: stdout\ndata: {\"data\":\"hello\\n\",\"encoding\":\"utf-8\"}\n\n" +
			"id: 1.6.0\nevent: exit\ndata: {\"state\":\"finished\",\"outcome\":\"succeeded\",\"exit_code\":0,\"oom_killed\":false,\"error\":null,\"duration_ms\":1500,\"stdout\":{\"bytes\":6,\"truncated\":false},\"stderr\":{\"bytes\":0,\"truncated\":false},\"usage\":{\"cpu_ms\":250,\"cpu_user_ms\":200,\"cpu_system_ms\":50,\"memory_peak_bytes\":8388608,\"pids_peak\":3,\"wall_ms\":1500,\"source\":\"cgroup-v2\",\"sampled_at\":\"2026-01-01T00:00:02.5Z\"}}\n\n"},
		{"stderr", []string{"stderr", "oops"}, "id: 0.0.5\nevent: stderr\ndata: {\"data\":\"oops\\n\",\"encoding\":\"utf-8\"}\n\n" +
			"id: 1.0.5\nevent: exit\ndata: {\"state\":\"finished\",\"outcome\":\"succeeded\",\"exit_code\":0,\"oom_killed\":false,\"error\":null,\"duration_ms\":1500,\"stdout\":{\"bytes\":0,\"truncated\":false},\"stderr\":{\"bytes\":5,\"truncated\":false},\"usage\":{\"cpu_ms\":250,\"cpu_user_ms\":200,\"cpu_system_ms\":50,\"memory_peak_bytes\":8388608,\"pids_peak\":3,\"wall_ms\":1500,\"source\":\"cgroup-v2\",\"sampled_at\":\"2026-01-01T00:00:02.5Z\"}}\n\n"},
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
	// Resuming a finished run's replay continues after the given bytes.
	v := e.submit(tokAlice, "echo", "hello")
	e.waitFinished(v.ID)
	r := e.do(http.MethodGet, "/v1/runs/"+v.ID+"/logs", tokAlice, "", "Last-Event-ID: 3.2.0")
	if !strings.HasPrefix(string(r.body), "id: 0.6.0\nevent: stdout\ndata: {\"data\":\"llo\\n\"") {
		t.Errorf("resumed replay = %s", r.body)
	}
	if r := e.do(http.MethodGet, "/v1/runs/"+v.ID+"/logs", tokAlice, "", "Last-Event-ID: 7"); r.status != http.StatusBadRequest {
		t.Errorf("bad Last-Event-ID: %d", r.status)
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
	lr := newLiveRun(sandgate.Run{ID: "r"}, 8)
	captureOut(lr, sandgate.Stdout, []byte("12345"))
	captureOut(lr, sandgate.Stdout, []byte("67890"))
	captureOut(lr, sandgate.Stdout, []byte("more"))
	captureOut(lr, sandgate.Stderr, []byte{0xff, 0xfe})
	var cur logCursor
	got := readChunks(t, lr, &cur)
	want := []string{"stdout 12345678 utf-8 1.8.0", "stderr //4= base64 2.8.2"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("chunks (-want +got):\n%s", diff)
	}
	if snap := lr.snapshot(); snap.Stdout.Bytes != 14 || !snap.Stdout.Truncated || string(snap.Stdout.Raw) != "12345678" {
		t.Errorf("snapshot stdout = %+v", snap.Stdout)
	}
}

// readChunks reads the live log from cur as "name data encoding id" lines.
func readChunks(t *testing.T, lr *liveRun, cur *logCursor) []string {
	t.Helper()
	evs, _, _ := lr.read(cur)
	var out []string
	for _, ev := range evs {
		if ev.name != api.EventStdout && ev.name != api.EventStderr {
			out = append(out, ev.name+" "+ev.id)
			continue
		}
		var c api.ChunkData
		if err := json.Unmarshal(ev.data, &c); err != nil {
			t.Fatal(err)
		}
		out = append(out, ev.name+" "+c.Data+" "+c.Encoding+" "+ev.id)
	}
	return out
}

// TestLiveLogOrderAndResume checks that the log keeps the order of the
// streams, coalesces a stream's consecutive writes, and resumes from any
// event id without loss or repetition.
func TestLiveLogOrderAndResume(t *testing.T) {
	lr := newLiveRun(sandgate.Run{ID: "r"}, 1<<20)
	var a logCursor
	captureOut(lr, sandgate.Stdout, []byte("a"))
	if diff := cmp.Diff([]string{"stdout a utf-8 1.1.0"}, readChunks(t, lr, &a)); diff != "" {
		t.Errorf("first read (-want +got):\n%s", diff)
	}
	captureOut(lr, sandgate.Stdout, []byte("b")) // extends the entry a has passed
	captureOut(lr, sandgate.Stderr, []byte("X"))
	captureOut(lr, sandgate.Stdout, []byte("c"))
	lr.setState(sandgate.StateRunning, "c1", time.Time{})
	want := []string{"stdout b utf-8 1.2.0", "stderr X utf-8 2.2.1", "stdout c utf-8 3.3.1", "state 4.3.1"}
	if diff := cmp.Diff(want, readChunks(t, lr, &a)); diff != "" {
		t.Errorf("second read (-want +got):\n%s", diff)
	}
	if len(lr.entries) != 4 {
		t.Errorf("entries = %d, want 4 (a+b coalesced)", len(lr.entries))
	}
	// A fresh follower sees the coalesced log.
	var b logCursor
	want = []string{"stdout ab utf-8 1.2.0", "stderr X utf-8 2.2.1", "stdout c utf-8 3.3.1", "state 4.3.1"}
	if diff := cmp.Diff(want, readChunks(t, lr, &b)); diff != "" {
		t.Errorf("fresh read (-want +got):\n%s", diff)
	}
	// Resuming from any id continues exactly after it.
	for i, id := range []string{"1.2.0", "2.2.1", "3.3.1"} {
		cur, err := parseCursor(id)
		if err != nil {
			t.Fatal(err)
		}
		if got := readChunks(t, lr, &cur); len(got) != len(want)-i-1 {
			t.Errorf("resume from %s: %v", id, got)
		}
	}
	captureOut(lr, sandgate.Stdout, []byte("d"))
	lr.finish(sandgate.Run{ID: "r", State: sandgate.StateFinished, Outcome: sandgate.OutcomeSucceeded})
	got := readChunks(t, lr, &b)
	if diff := cmp.Diff([]string{"stdout d utf-8 5.4.1", "exit 6.4.1"}, got); diff != "" {
		t.Errorf("end (-want +got):\n%s", diff)
	}
	for _, bad := range []string{"1", "a.b.c", "1.2", "-1.0.0", "1.2.3.4"} {
		if _, err := parseCursor(bad); err == nil {
			t.Errorf("parseCursor(%q) accepted", bad)
		}
	}
}

// TestLiveLogBounded writes a byte at a time, alternating streams past the
// entry cap: the log stays small and every byte arrives once, in order
// per stream, before the exit.
func TestLiveLogBounded(t *testing.T) {
	lr := newLiveRun(sandgate.Run{ID: "r"}, 1<<20)
	var cur logCursor
	var gotOut, gotErr strings.Builder
	read := func() []sseEvent {
		evs, _, _ := lr.read(&cur)
		for _, ev := range evs {
			switch ev.name {
			case api.EventStdout, api.EventStderr:
				b, err := api.LogEvent{Event: ev.name, Data: ev.data}.Chunk()
				if err != nil {
					t.Fatal(err)
				}
				if ev.name == api.EventStdout {
					gotOut.Write(b)
				} else {
					gotErr.Write(b)
				}
			}
		}
		return evs
	}
	var wantOut, wantErr strings.Builder
	for i := range 20000 {
		c := byte('a' + i%26)
		captureOut(lr, sandgate.Stdout, []byte{c})
		wantOut.WriteByte(c)
		if i%2 == 0 {
			captureOut(lr, sandgate.Stderr, []byte{c})
			wantErr.WriteByte(c)
		}
		if i%997 == 0 {
			read()
		}
	}
	lr.finish(sandgate.Run{ID: "r", State: sandgate.StateFinished})
	evs := read()
	if len(lr.entries) > maxLogEntries+1 {
		t.Errorf("entries = %d, want at most %d", len(lr.entries), maxLogEntries+1)
	}
	if gotOut.String() != wantOut.String() || gotErr.String() != wantErr.String() {
		t.Errorf("bytes differ: stdout %d/%d, stderr %d/%d", gotOut.Len(), wantOut.Len(), gotErr.Len(), wantErr.Len())
	}
	if last := evs[len(evs)-1]; last.name != api.EventExit {
		t.Errorf("last event = %s", last.name)
	}
	// A follower from the start reads the same bytes.
	cur, gotOut, gotErr = logCursor{}, strings.Builder{}, strings.Builder{}
	read()
	if gotOut.String() != wantOut.String() || gotErr.String() != wantErr.String() {
		t.Errorf("replay differs: stdout %d/%d, stderr %d/%d", gotOut.Len(), wantOut.Len(), gotErr.Len(), wantErr.Len())
	}
}

// captureOut writes p to a stream of lr as the executor does: into the
// stream's buffer, then telling lr.
func captureOut(lr *liveRun, stream sandgate.Stream, p []byte) {
	lr.output(stream, lr.out[stream].Write(p))
}

// TestLogsStreamPullProgress: a follower of a live run sees its image
// pull's progress, as the executor reports it, before the run's running
// state and its output.
func TestLogsStreamPullProgress(t *testing.T) {
	e := newEnv(t)
	v := e.submit(tokAlice, "block", "pull")
	e.waitRunning(v.ID)
	defer e.exec.release(v.ID)

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, e.ts.URL+"/v1/runs/"+v.ID+"/logs?follow=true", nil)
	req.Header.Set("Authorization", "Bearer "+tokAlice)
	resp, err := e.ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var seen []string
	var pulls []map[string]any
	_ = api.ReadEvents(resp.Body, func(ev api.LogEvent) error {
		seen = append(seen, ev.Event)
		if ev.Event == api.EventPull {
			var p map[string]any
			if err := json.Unmarshal(ev.Data, &p); err != nil {
				t.Errorf("pull event %q: %v", ev.Data, err)
			}
			pulls = append(pulls, p)
		}
		if ev.Event == api.EventStdout {
			return io.EOF
		}
		return nil
	})
	want := []string{api.EventState, api.EventPull, api.EventPull, api.EventState, api.EventStdout}
	if diff := cmp.Diff(want, seen); diff != "" {
		t.Errorf("events (-want +got):\n%s", diff)
	}
	if len(pulls) != 2 || pulls[0]["layers_done"] != 1.0 || pulls[1]["final"] != true {
		t.Errorf("pull events = %v, want the executor's two", pulls)
	}
}
