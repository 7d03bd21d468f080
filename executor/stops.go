package executor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"time"

	"github.com/docker/docker/api/types/events"
	"github.com/docker/docker/api/types/filters"
)

// eventsAPI is the Docker call that tells who stopped a container.
// *client.Client has it; a daemon client without it is never asked.
type eventsAPI interface {
	Events(ctx context.Context, opts events.ListOptions) (<-chan events.Message, <-chan error)
}

// oomEventGrace is how long a SIGKILLed container's OOM event is given
// to arrive after its exit.
const oomEventGrace = 300 * time.Millisecond

// stoppedOutside asks the daemon's events how the container,
// which died of a signal sandgate did not send, was ended. oom is true
// when the kernel's OOM killer struck: the daemon records that
// asynchronously, so an inspect right after the exit may not show it yet.
// why says who stopped it through the daemon otherwise: a daemon that
// shuts down (a restart of the Docker service) stops every container, and
// so does an operator's `docker stop` or `docker kill`; such an end is
// not the program's, whatever its exit code. A program that kills itself
// leaves no daemon event. Both are zero when the events show neither, or
// cannot be read.
func (p *mainProc) stoppedOutside(started time.Time, code int64) (why string, oom bool) {
	h := p.h
	ev, ok := h.docker.(eventsAPI)
	id := h.res.ContainerID
	if !ok || code < 128 || id == "" {
		return "", false
	}
	why, oom = p.daemonStops(ev, id, started, code)
	if why == "" && !oom && code == 137 {
		// SIGKILL with no event yet: the OOM event may still be on its
		// way from the runtime; look once more a moment later.
		select {
		case <-time.After(oomEventGrace):
			why, oom = p.daemonStops(ev, id, started, code)
		case <-h.ctx.Done():
		}
	}
	return why, oom
}

// daemonStops reads the container's kill and oom events once.
func (p *mainProc) daemonStops(ev eventsAPI, id string, started time.Time, code int64) (why string, oom bool) {
	h := p.h
	since := started
	if since.IsZero() {
		since = h.now().Add(-time.Hour)
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(h.ctx), h.e.cfg.CallTimeout)
	defer cancel()
	msgs, errs := ev.Events(ctx, events.ListOptions{
		Since: strconv.FormatInt(since.Add(-time.Second).Unix(), 10),
		Until: strconv.FormatInt(h.now().Add(time.Second).Unix(), 10),
		Filters: filters.NewArgs(
			filters.Arg("type", string(events.ContainerEventType)),
			filters.Arg("container", id),
			filters.Arg("event", string(events.ActionKill)),
			filters.Arg("event", string(events.ActionOOM)),
		),
	})
	for {
		select {
		case m := <-msgs:
			switch m.Action {
			case events.ActionOOM:
				oom = true
			case events.ActionKill:
				why = fmt.Sprintf("the container was stopped through the Docker daemon with signal %s (a restart of the daemon, or an operator), not by its program or by sandgate; exit code %d",
					m.Actor.Attributes["signal"], code)
			}
		case err := <-errs:
			// io.EOF once the window is read; anything else means the
			// events cannot be read.
			if oom {
				why = ""
			}
			if why == "" && !oom && err != nil && !errors.Is(err, io.EOF) && !p.daemonAnswers(ctx) {
				// A daemon that shuts down stops every container and then
				// closes its API, sometimes before the kill events can be
				// read: a signal death followed at once by a daemon that
				// no longer answers is the daemon's doing.
				why = fmt.Sprintf("the container died of a signal (exit code %d) as the Docker daemon stopped answering: a restart of the daemon stops every container", code)
			}
			return why, oom
		case <-ctx.Done():
			return "", oom
		}
	}
}

// daemonAnswers pings the daemon once, without retries: is it there now?
func (p *mainProc) daemonAnswers(ctx context.Context) bool {
	ctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	_, err := p.h.docker.Ping(ctx)
	return err == nil
}
