package gateway

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/admission"
	"github.com/sandgate/sandgate/gateway/api"
)

// storePoll is how often a followed stream of a run that executes on
// another node looks at the store.
const storePoll = time.Second

// runLogs is GET /v1/runs/{id}/logs: the run's output as Server-Sent
// Events. A run executing here streams from its live log, every event
// flushed as it happens; with follow=true the stream stays open until the
// exit event. A finished run replays its stored output. Each event's id is
// the stream position after it ("entry.stdout_bytes.stderr_bytes"), so a
// client may resume with Last-Event-ID, live or after the run ended.
func (s logRoutes) runLogs(c echo.Context) error {
	if err := checkQuery(c, "follow"); err != nil {
		return err
	}
	follow := false
	if v := c.QueryParam("follow"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return sandgate.FieldError("follow", "must be true or false; got %q", v)
		}
		follow = b
	}
	var cur logCursor
	if v := c.Request().Header.Get("Last-Event-ID"); v != "" {
		var err error
		if cur, err = parseCursor(v); err != nil {
			return err
		}
	}
	ctx := c.Request().Context()
	p := principal(c)
	ans, err := s.admit(c, admission.ReadRun{Run: c.Param("id")})
	if err != nil {
		return err
	}
	run := ans.Run
	sw := &sseWriter{c: c}
	sw.begin()
	if lr := s.node.runs.live.get(run.ID); lr != nil {
		return s.streamLive(ctx, sw, lr, cur, follow)
	}
	return s.streamStored(ctx, sw, p, run, cur, follow)
}

func (s logRoutes) streamLive(ctx context.Context, sw *sseWriter, lr *liveRun, cur logCursor, follow bool) error {
	heartbeat := time.NewTicker(s.cfg.HeartbeatInterval)
	defer heartbeat.Stop()
	for {
		evs, changed, finished := lr.read(&cur)
		for _, ev := range evs {
			if err := sw.event(ev.id, ev.name, ev.data); err != nil {
				return nil
			}
		}
		if finished || !follow {
			return nil
		}
		select {
		case <-changed:
		case <-heartbeat.C:
			if err := sw.comment("keepalive"); err != nil {
				return nil
			}
		case <-ctx.Done():
			return nil
		case <-s.stopping:
			return nil
		}
	}
}

// streamStored replays a run from the store, from the cursor's offsets. A
// run that is not finished and not live here executes on another node: its
// state is sent, and when following, the store is polled until it ends.
func (s logRoutes) streamStored(ctx context.Context, sw *sseWriter, p sandgate.Principal, run *sandgate.Run, cur logCursor, follow bool) error {
	cur.next = 0
	send := func(name string, v any) error {
		data, err := marshal(v)
		if err != nil {
			return err
		}
		return sw.event(cur.String(), name, data)
	}
	if run.State != sandgate.StateFinished {
		if err := send(api.EventState, api.StateData{State: run.State, ContainerID: run.ContainerID, At: s.d.Clock()}); err != nil || !follow {
			return nil
		}
		t := time.NewTicker(storePoll)
		defer t.Stop()
		for run.State != sandgate.StateFinished {
			select {
			case <-t.C:
			case <-ctx.Done():
				return nil
			case <-s.stopping:
				return nil
			}
			r, err := s.readRun(ctx, p, run.ID)
			if err != nil {
				s.logger(sw.c).Warn("poll run for logs", "error", err)
				continue
			}
			if lr := s.node.runs.live.get(r.ID); lr != nil {
				return s.streamLive(ctx, sw, lr, logCursor{stdout: cur.stdout, stderr: cur.stderr}, follow)
			}
			run = r
		}
	}
	for _, o := range []struct {
		stream sandgate.Stream
		out    sandgate.Output
	}{{sandgate.Stdout, run.Stdout}, {sandgate.Stderr, run.Stderr}} {
		b, err := o.out.Content()
		if err != nil {
			s.logger(sw.c).Warn("stored output does not decode", "stream", o.stream, "error", err)
			continue
		}
		off := cur.off(o.stream)
		for *off < int64(len(b)) {
			// At most maxEventBytes of output an event.
			end := eventEnd(b, *off)
			chunk := chunkData(b[*off:end])
			*off = end
			if err := send(string(o.stream), chunk); err != nil {
				return nil
			}
		}
	}
	cur.next = 1
	_ = send(api.EventExit, exitData(run))
	return nil
}

// sseWriter writes Server-Sent Events and flushes each one.
type sseWriter struct {
	c echo.Context
}

func (w *sseWriter) begin() {
	h := w.c.Response().Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.c.Response().WriteHeader(http.StatusOK)
	w.c.Response().Flush()
}

// event writes one event; data must be one line (JSON is).
func (w *sseWriter) event(id, name string, data []byte) error {
	if _, err := fmt.Fprintf(w.c.Response(), "id: %s\nevent: %s\ndata: %s\n\n", id, name, data); err != nil {
		return err
	}
	w.c.Response().Flush()
	return nil
}

func (w *sseWriter) comment(text string) error {
	if _, err := fmt.Fprintf(w.c.Response(), ": %s\n\n", text); err != nil {
		return err
	}
	w.c.Response().Flush()
	return nil
}
