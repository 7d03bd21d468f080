package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/sandgate/sandgate"
)

// The event names of GET /v1/runs/{id}/logs, a stream of Server-Sent
// Events. Each event's data is one line of JSON: ChunkData for stdout and
// stderr, StateData for state, ExitData for exit, the last of a stream.
const (
	EventStdout = "stdout"
	EventStderr = "stderr"
	EventState  = "state"
	EventExit   = "exit"
	// EventPull is an image pull's progress while the run waits for its
	// image: the payload of its image.pull_progress audit event (image,
	// attempt, layers, layers_done, bytes_fetched, bytes_total, final,
	// error). Live runs only: a finished run's replay has none.
	EventPull = "pull"
)

// ChunkData is the data of a stdout or stderr event.
type ChunkData struct {
	Data     string `json:"data"`
	Encoding string `json:"encoding"`
}

// Bytes returns the chunk's bytes.
func (c ChunkData) Bytes() ([]byte, error) {
	return OutputView{Data: c.Data, Encoding: c.Encoding}.Decode()
}

// StateData is the data of a state event.
type StateData struct {
	State       sandgate.State `json:"state"`
	ContainerID string         `json:"container_id,omitempty"`
	At          time.Time      `json:"at"`
}

// ExitData is the data of the exit event, the last of a stream.
type ExitData struct {
	State      sandgate.State      `json:"state"`
	Outcome    sandgate.Outcome    `json:"outcome"`
	ExitCode   *int                `json:"exit_code"`
	OOMKilled  bool                `json:"oom_killed"`
	Error      *sandgate.ErrorInfo `json:"error"`
	DurationMS int64               `json:"duration_ms"`
	Stdout     StreamTotals        `json:"stdout"`
	Stderr     StreamTotals        `json:"stderr"`
	// Usage is what the run's container used; nil for a run whose command
	// never ran.
	Usage *sandgate.Usage `json:"usage,omitempty"`
}

// StreamTotals says how much a stream produced.
type StreamTotals struct {
	Bytes     int64 `json:"bytes"`
	Truncated bool  `json:"truncated"`
}

// LogEvent is one Server-Sent Event of a run's log stream. ID is the
// stream position after it, which a client sends back as Last-Event-ID
// to resume there.
type LogEvent struct {
	ID    string
	Event string
	Data  []byte
}

// Chunk decodes a stdout or stderr event.
func (e LogEvent) Chunk() ([]byte, error) {
	var c ChunkData
	if err := json.Unmarshal(e.Data, &c); err != nil {
		return nil, fmt.Errorf("decode %s event: %w", e.Event, err)
	}
	return c.Bytes()
}

// Exit decodes an exit event.
func (e LogEvent) Exit() (ExitData, error) {
	var x ExitData
	if err := json.Unmarshal(e.Data, &x); err != nil {
		return ExitData{}, fmt.Errorf("decode exit event: %w", err)
	}
	return x, nil
}

// State decodes a state event.
func (e LogEvent) State() (StateData, error) {
	var st StateData
	if err := json.Unmarshal(e.Data, &st); err != nil {
		return StateData{}, fmt.Errorf("decode state event: %w", err)
	}
	return st, nil
}

// maxEventLine bounds one line of an event stream; the gateway's events
// are far smaller.
const maxEventLine = 8 << 20

// ReadEvents parses an event stream (the subset the gateway writes, plus
// multi-line data as the format allows), calling fn for each event in
// order; fn's error ends it and is returned.
func ReadEvents(r io.Reader, fn func(LogEvent) error) error {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxEventLine)
	var ev LogEvent
	var data [][]byte
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			if ev.Event != "" || len(data) > 0 {
				if ev.Event == "" {
					ev.Event = "message"
				}
				ev.Data = bytes.Join(data, []byte("\n"))
				if err := fn(ev); err != nil {
					return err
				}
			}
			ev, data = LogEvent{}, nil
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := bytes.Cut(line, []byte(":"))
		value = bytes.TrimPrefix(value, []byte(" "))
		switch string(field) {
		case "id":
			ev.ID = string(value)
		case "event":
			ev.Event = string(value)
		case "data":
			data = append(data, append([]byte(nil), value...))
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read log stream: %w", err)
	}
	return nil
}
