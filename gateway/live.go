package gateway

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sandgate/sandgate"
)

// sseEvent is one event of a run's log stream. Data is one line of JSON.
type sseEvent struct {
	id   int64
	name string
	data []byte
}

// liveRun is a run executing on this node: its current state and the log
// of its events, which followers read from any position. The log is
// bounded: each stream keeps at most the run's output limit.
type liveRun struct {
	mu      sync.Mutex
	run     sandgate.Run
	events  []sseEvent
	changed chan struct{}
	done    chan struct{}
	out     map[sandgate.Stream]*bytes.Buffer
	limit   int64
	// cancelRequested records that DELETE asked for the run's end, so an
	// executor that saw only its context cancelled is reported as cancelled.
	cancelRequested bool
	cancel          context.CancelFunc
	// storeMu orders the run's store updates.
	storeMu sync.Mutex
}

func newLiveRun(run sandgate.Run) *liveRun {
	limit := run.Spec.OutputLimitBytes
	if limit <= 0 {
		limit = sandgate.BuiltinDefaults.OutputLimitBytes
	}
	return &liveRun{
		run:     run,
		changed: make(chan struct{}),
		done:    make(chan struct{}),
		out:     map[sandgate.Stream]*bytes.Buffer{sandgate.Stdout: {}, sandgate.Stderr: {}},
		limit:   limit,
		cancel:  func() {},
	}
}

// appendLocked adds an event and wakes the followers. l.mu must be held.
func (l *liveRun) appendLocked(name string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		data = []byte(`{}`)
	}
	l.events = append(l.events, sseEvent{id: int64(len(l.events)) + 1, name: name, data: data})
	close(l.changed)
	l.changed = make(chan struct{})
}

// output records a chunk of a stream, dropping what exceeds the limit.
func (l *liveRun) output(stream sandgate.Stream, p []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	buf, ok := l.out[stream]
	if !ok || len(p) == 0 || l.finishedLocked() {
		return
	}
	room := l.limit - int64(buf.Len())
	if room <= 0 {
		return
	}
	if int64(len(p)) > room {
		p = p[:room]
	}
	buf.Write(p)
	l.appendLocked(string(stream), chunkData(p))
}

func chunkData(p []byte) ChunkData {
	if utf8.Valid(p) {
		return ChunkData{Data: string(p), Encoding: "utf-8"}
	}
	return ChunkData{Data: base64.StdEncoding.EncodeToString(p), Encoding: "base64"}
}

// setState moves the run to state and tells followers. It returns the run
// as it now is, or false when the run has finished already.
func (l *liveRun) setState(state sandgate.State, containerID string, at time.Time) (sandgate.Run, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.finishedLocked() {
		return sandgate.Run{}, false
	}
	l.run.State = state
	if containerID != "" {
		l.run.ContainerID = containerID
	}
	if state == sandgate.StateRunning && !at.IsZero() {
		t := at
		l.run.StartedAt = &t
	}
	l.appendLocked(EventState, StateData{State: state, ContainerID: l.run.ContainerID, At: at})
	return l.run, true
}

// finish records the final run, appends the exit event and releases the
// followers.
func (l *liveRun) finish(run sandgate.Run) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.finishedLocked() {
		return
	}
	l.run = run
	l.appendLocked(EventExit, exitData(&run))
	close(l.done)
}

func (l *liveRun) finishedLocked() bool {
	select {
	case <-l.done:
		return true
	default:
		return false
	}
}

// since returns the events after id, a channel closed at the next change,
// and whether the log is complete.
func (l *liveRun) since(id int64) ([]sseEvent, <-chan struct{}, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if id < 0 {
		id = 0
	}
	var evs []sseEvent
	if id < int64(len(l.events)) {
		evs = append(evs, l.events[id:]...)
	}
	return evs, l.changed, l.finishedLocked()
}

// snapshot returns the run with the output captured so far.
func (l *liveRun) snapshot() sandgate.Run {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.run
	if !l.finishedLocked() {
		r.Stdout = liveOutput(l.out[sandgate.Stdout])
		r.Stderr = liveOutput(l.out[sandgate.Stderr])
	}
	return r
}

func liveOutput(b *bytes.Buffer) sandgate.Output {
	c := chunkData(b.Bytes())
	return sandgate.Output{Data: c.Data, Encoding: c.Encoding, Bytes: int64(b.Len())}
}

// requestCancel marks the run as cancelled by a client and returns its
// context's cancel function.
func (l *liveRun) requestCancel() context.CancelFunc {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.cancelRequested = true
	return l.cancel
}

func (l *liveRun) wasCancelRequested() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cancelRequested
}

// hub holds the runs executing on this node.
type hub struct {
	mu   sync.Mutex
	runs map[string]*liveRun
}

func newHub() *hub { return &hub{runs: map[string]*liveRun{}} }

func (h *hub) add(id string, l *liveRun) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.runs[id] = l
}

func (h *hub) get(id string) *liveRun {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.runs[id]
}

func (h *hub) remove(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.runs, id)
}

func (h *hub) all() map[string]*liveRun {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]*liveRun, len(h.runs))
	for k, v := range h.runs {
		out[k] = v
	}
	return out
}

func (h *hub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.runs)
}
