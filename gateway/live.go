package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/admission"
	"github.com/sandgate/sandgate/gateway/api"
)

// sseEvent is one event of a run's log stream. Data is one line of JSON.
type sseEvent struct {
	id   string
	name string
	data []byte
}

// logEntry is one entry of a live run's log. Every entry records how far
// each stream's buffer reached (ends: stdout, stderr) when it was last
// touched; reading it sends each stream up to there. Consecutive output of
// one stream extends the same entry, so a program writing a byte at a time
// costs bytes, not entries. State and exit entries carry their JSON.
type logEntry struct {
	name string
	ends [2]int64
	data []byte
}

// maxEventBytes bounds the output one log event carries.
const maxEventBytes = 64 << 10

// eventEnd is where the event of b that starts at off ends: at most
// maxEventBytes on, and not inside a UTF-8 sequence (a run's text is sent
// as text) unless a sequence that long is no text anyway.
func eventEnd(b []byte, off int64) int64 {
	end := min(int64(len(b)), off+maxEventBytes)
	if end == int64(len(b)) {
		return end
	}
	for e := end; e > off && e > end-utf8.UTFMax; e-- {
		if utf8.RuneStart(b[e]) {
			return e
		}
	}
	return end
}

// maxLogEntries bounds a run's log. Beyond it, output extends the last
// entry whatever its stream: the interleaving of stdout and stderr becomes
// approximate, the bytes of each stream stay exact and in order.
const maxLogEntries = 4096

// streamIndex is a stream's index in logEntry.ends.
func streamIndex(s sandgate.Stream) int {
	if s == sandgate.Stderr {
		return 1
	}
	return 0
}

// logCursor is a follower's position: the next entry to read and how many
// bytes of each stream it has sent. It is the SSE event id
// ("next.stdout.stderr"), so a client resumes with Last-Event-ID.
type logCursor struct {
	next           int
	stdout, stderr int64
}

// String is the cursor as an SSE event id.
func (c logCursor) String() string { return fmt.Sprintf("%d.%d.%d", c.next, c.stdout, c.stderr) }

func (c *logCursor) off(s sandgate.Stream) *int64 {
	if s == sandgate.Stderr {
		return &c.stderr
	}
	return &c.stdout
}

// parseCursor reads a Last-Event-ID.
func parseCursor(v string) (logCursor, error) {
	parts := strings.Split(v, ".")
	if len(parts) != 3 {
		return logCursor{}, sandgate.FieldError("Last-Event-ID", "must be an event id of this stream")
	}
	var n [3]int64
	for i, p := range parts {
		x, err := strconv.ParseInt(p, 10, 64)
		if err != nil || x < 0 {
			return logCursor{}, sandgate.FieldError("Last-Event-ID", "must be an event id of this stream")
		}
		n[i] = x
	}
	return logCursor{next: int(min(n[0], 1<<31)), stdout: n[1], stderr: n[2]}, nil
}

// liveRun is a run executing on this node: its current state and the log
// its followers read from any position. The log is bounded: each stream
// keeps at most the run's output limit, and entries are coalesced.
type liveRun struct {
	mu  sync.Mutex
	run sandgate.Run
	// spec is what the executor runs: the admitted spec with its secrets,
	// which run.Spec (stored and served) carries only as keyed hashes.
	spec sandgate.Normalized
	// enforce is what the decision tells the executor to hold it to.
	enforce sandgate.Enforcement
	// teamConcurrency is the team's limit of runs holding a container.
	teamConcurrency int
	// upload is the run's workspace archive, removed when the run ends.
	upload *admission.Upload
	// session is the session a command runs in; empty for other runs.
	session string
	entries []logEntry
	changed chan struct{}
	done    chan struct{}
	// out are the streams as the executor captures them: the run's
	// output is held there once, for followers and for the final run.
	out    map[sandgate.Stream]*sandgate.OutputBuffer
	cancel context.CancelFunc
	// storeMu orders the run's store updates; finalStored, under it, says
	// the end is stored, after which no earlier state is.
	storeMu     sync.Mutex
	finalStored bool
	// pending is the latest state not yet stored that storeLater was
	// given; storing says a goroutine is storing them (under pendingMu).
	pendingMu sync.Mutex
	pending   *sandgate.Run
	storing   bool
}

// newLiveRun makes the live state of run, whose streams each keep at most
// limit bytes (the admitted spec's output limit).
func newLiveRun(run sandgate.Run, limit int64) *liveRun {
	return &liveRun{
		run:     run,
		changed: make(chan struct{}),
		done:    make(chan struct{}),
		out: map[sandgate.Stream]*sandgate.OutputBuffer{
			sandgate.Stdout: sandgate.NewOutputBuffer(limit),
			sandgate.Stderr: sandgate.NewOutputBuffer(limit),
		},
		cancel: func() {},
	}
}

// notifyLocked wakes the followers. l.mu must be held.
func (l *liveRun) notifyLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// appendLocked adds a state or exit entry. l.mu must be held.
func (l *liveRun) appendLocked(name string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		data = []byte(`{}`)
	}
	l.entries = append(l.entries, logEntry{name: name, ends: l.endsLocked(), data: data})
	l.notifyLocked()
}

// output records that a chunk of a stream was captured into its buffer
// (the executor wrote it there; p is what it kept).
func (l *liveRun) output(stream sandgate.Stream, p []byte) {
	l.mu.Lock()
	defer l.mu.Unlock()
	buf, ok := l.out[stream]
	if !ok || len(p) == 0 || l.finishedLocked() {
		return
	}
	if n := len(l.entries); n > 0 && (l.entries[n-1].name == string(stream) || n >= maxLogEntries) {
		l.entries[n-1].ends[streamIndex(stream)] = buf.Len()
	} else {
		l.entries = append(l.entries, logEntry{name: string(stream), ends: l.endsLocked()})
	}
	l.notifyLocked()
}

// pullProgress records a pull's progress in the log, as an event of its
// own (the executor sends at most one a second per pull).
func (l *liveRun) pullProgress(p map[string]any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.finishedLocked() || len(l.entries) >= maxLogEntries {
		return
	}
	l.appendLocked(api.EventPull, p)
}

// endsLocked returns how far each stream's buffer reaches. l.mu must be
// held.
func (l *liveRun) endsLocked() [2]int64 {
	return [2]int64{l.out[sandgate.Stdout].Len(), l.out[sandgate.Stderr].Len()}
}

func chunkData(p []byte) api.ChunkData {
	data, enc := sandgate.EncodeOutput(p)
	return api.ChunkData{Data: data, Encoding: enc}
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
	l.appendLocked(api.EventState, api.StateData{State: state, ContainerID: l.run.ContainerID, At: at})
	return l.run, true
}

// finish records the final run, appends the exit entry and releases the
// followers.
func (l *liveRun) finish(run sandgate.Run) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.finishedLocked() {
		return
	}
	l.run = run
	l.appendLocked(api.EventExit, exitData(&run))
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

// read returns the events after cur and advances it, a channel closed at
// the next change, and whether the log is complete. Each event's id is the
// cursor just after it.
func (l *liveRun) read(cur *logCursor) ([]sseEvent, <-chan struct{}, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	cur.next = max(0, min(cur.next, len(l.entries)))
	var evs []sseEvent
	flush := func(ends [2]int64) {
		for _, s := range []sandgate.Stream{sandgate.Stdout, sandgate.Stderr} {
			off := cur.off(s)
			for *off < ends[streamIndex(s)] {
				// At most maxEventBytes of output an event, so a follower
				// that comes late gets the backlog in pieces.
				p := l.out[s].Slice(*off, min(ends[streamIndex(s)], *off+maxEventBytes))
				if len(p) == 0 {
					break
				}
				p = p[:eventEnd(p, 0)]
				data, _ := marshal(chunkData(p))
				*off += int64(len(p))
				evs = append(evs, sseEvent{id: cur.String(), name: string(s), data: data})
			}
		}
	}
	// The entry last read may have grown since.
	if cur.next > 0 {
		flush(l.entries[cur.next-1].ends)
	}
	for cur.next < len(l.entries) {
		e := l.entries[cur.next]
		switch e.name {
		case api.EventStdout, api.EventStderr:
			cur.next++
			flush(e.ends)
		default:
			flush(e.ends)
			cur.next++
			evs = append(evs, sseEvent{id: cur.String(), name: e.name, data: e.data})
		}
	}
	return evs, l.changed, l.finishedLocked()
}

// snapshot returns the run with the output captured so far (not copied).
func (l *liveRun) snapshot() sandgate.Run {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.run
	if !l.finishedLocked() {
		r.Stdout = l.out[sandgate.Stdout].Output()
		r.Stderr = l.out[sandgate.Stderr].Output()
	}
	return r
}

// snapshotMeta is snapshot without the output's data: its sizes only.
func (l *liveRun) snapshotMeta() sandgate.Run {
	l.mu.Lock()
	defer l.mu.Unlock()
	r := l.run
	if !l.finishedLocked() {
		for _, s := range []struct {
			o *sandgate.Output
			b *sandgate.OutputBuffer
		}{{&r.Stdout, l.out[sandgate.Stdout]}, {&r.Stderr, l.out[sandgate.Stderr]}} {
			total := s.b.Total()
			*s.o = sandgate.Output{Encoding: sandgate.EncodingUTF8, Bytes: total, Truncated: total > s.b.Len()}
		}
	}
	r.Stdout.Data, r.Stdout.Raw = "", nil
	r.Stderr.Data, r.Stderr.Raw = "", nil
	return r
}

// requestCancel returns the run's context's cancel function, for a
// cancel the executor did not take (the run was not in it yet). The
// outcome is the executor's: a job whose context ends is cancelled.
func (l *liveRun) requestCancel() context.CancelFunc {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.cancel
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
