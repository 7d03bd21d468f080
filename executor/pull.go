package executor

import (
	"context"
	"strings"
	"time"

	"github.com/docker/docker/api/types/image"

	"github.com/sandgate/sandgate/executor/internal/daemon"
)

// Pulls. One attempt of a pull is bounded by Config.PullTimeout
// (SANDGATE_PULL_TIMEOUT, 5 minutes by default); an attempt that exceeds
// it, or that the daemon ends because its connection to the registry
// broke (daemon.StreamError.Interrupted), is retried like any transient
// failure of a Docker call, each retry an executor.retry event with op
// "pull". While an attempt runs, its progress is recorded as
// image.pull_progress events: at most one every pullProgressEvery, and
// one as the attempt ends, each with the layers seen and done and the
// bytes fetched of those known.

// pullProgressEvery is the least time between two progress events of one
// pull.
const pullProgressEvery = time.Second

// pull pulls ref and reads the progress stream to its end, where the
// daemon reports a failed pull.
func (rs *resolver) pull(ctx context.Context, t *trail, ref string) error {
	rs.forget(ref)
	attempt := 0
	return rs.calls.with(ctx, t, "pull", rs.pullTimeout, func(ctx context.Context) error {
		attempt++
		body, err := rs.docker.ImagePull(ctx, ref, image.PullOptions{})
		if err != nil {
			return err
		}
		defer body.Close()
		p := pullProgress{t: t, ref: ref, attempt: attempt, every: rs.pullEvery, now: rs.now, layers: map[string]*layerProgress{}}
		err = daemon.ReadMessages(body, p.message)
		if err == nil && ctx.Err() != nil {
			err = ctx.Err()
		}
		p.end(err)
		return err
	})
}

// layerProgress is how far one layer of a pull has come.
type layerProgress struct {
	current, total int64
	done           bool
}

// pullProgress turns one pull attempt's progress stream into throttled
// image.pull_progress events.
type pullProgress struct {
	t       *trail
	ref     string
	attempt int
	every   time.Duration
	now     func() time.Time
	last    time.Time
	layers  map[string]*layerProgress
}

// message takes one message of the stream.
func (p *pullProgress) message(m daemon.Message) {
	if m.ID == "" || len(m.ID) < 12 || m.Status == "" || strings.HasPrefix(m.Status, "Pulling from") {
		return // the pull's own status lines, not a layer's
	}
	l := p.layers[m.ID]
	if l == nil {
		l = &layerProgress{}
		p.layers[m.ID] = l
	}
	switch m.Status {
	case "Downloading":
		l.current, l.total = m.ProgressDetail.Current, max(l.total, m.ProgressDetail.Total)
	case "Download complete", "Verifying Checksum":
		l.current = max(l.current, l.total)
	case "Pull complete", "Already exists":
		l.current, l.done = max(l.current, l.total), true
	}
	if now := p.now(); now.Sub(p.last) >= p.every {
		p.last = now
		p.emit(false, nil)
	}
}

// end records the attempt's last progress, with its error if it failed.
func (p *pullProgress) end(err error) { p.emit(true, err) }

func (p *pullProgress) emit(final bool, err error) {
	var done int
	var fetched, known int64
	for _, l := range p.layers {
		if l.done {
			done++
		}
		known += l.total
		fetched += l.current
	}
	payload := map[string]any{
		"image": p.ref, "attempt": p.attempt, "layers": len(p.layers), "layers_done": done,
		"bytes_fetched": fetched, "bytes_total": known, "final": final,
	}
	if final && err != nil {
		payload["error"] = err.Error()
	}
	p.t.pullProgress(payload)
	if f := p.t.job.PullProgress; f != nil {
		f(payload)
	}
}
