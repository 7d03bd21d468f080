package executor

import (
	"sort"
	"strings"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/agent"
)

// shellVars are the variables busybox ash exports by itself; the script
// unsets those the container's environment did not have, so the command
// sees the environment a cold container would give it.
var shellVars = []string{"OLDPWD", "PWD", "SHLVL"}

// warmScript is the shell script a claimed member's launcher evaluates:
// unset what the shell added to the environment, export the run's
// environment, and exec the command (after the image's entrypoint, as
// Docker would), with stdin from /dev/null when the run has none, as a
// cold container's. Every word is single-quoted, so no value is ever
// interpreted by the shell.
func (m *member) warmScript(spec sandgate.Normalized) string {
	var b strings.Builder
	var unset []string
	for _, v := range shellVars {
		if _, set := spec.Env[v]; !set && !m.env[v] {
			unset = append(unset, v)
		}
	}
	if len(unset) > 0 {
		b.WriteString("unset " + strings.Join(unset, " ") + "\n")
	}
	keys := make([]string, 0, len(spec.Env))
	for k := range spec.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		b.WriteString("export " + shellQuote(k+"="+spec.Env[k]) + "\n")
	}
	b.WriteString("exec")
	for _, a := range append(append([]string(nil), m.entrypoint...), spec.Command...) {
		b.WriteString(" " + shellQuote(a))
	}
	if spec.Stdin == "" {
		b.WriteString(" </dev/null")
	}
	b.WriteString("\n")
	return b.String()
}

// shellQuote single-quotes s for the shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// runWarm runs the job in the claimed warm member m: its container is
// started already, so the run hands its command in (through the
// launcher's stdin, or to its agent) and from there on is followed like
// a cold one. A warm session's member has its agent dialled and its
// workspace mounted already: the session is open as soon as the member
// is checked and recorded.
func (h *handle) runWarm(set settings, imageID string, m *member) ending {
	h.member = m
	h.setContainer(m.id, h.now())
	h.main = newMainProc(h)
	h.main.hj, h.main.waitC, h.main.waitErr = m.hj, m.waitC, m.errC
	payload := map[string]any{
		"name": m.name, "image": set.config.Image, "image_id": imageID,
		"warm_pool": m.prof.key, "pooled_at": m.created.UTC().Format(time.RFC3339Nano),
	}
	switch {
	case m.prof.session:
		payload["agent"] = true
		payload["workspace"] = map[string]any{"workspace_mb": h.job.Spec.Resources.WorkspaceMB}
		h.setLink(m.agent, m.ws)
	case m.agent != nil:
		payload["agent"] = true
		h.setLink(m.agent, nil)
		// Removal is off the run's path: the pool and the run own the
		// container until it is gone, so the reaper leaves it alone.
		h.asyncRemove = true
	}
	h.trail.created(payload)
	if err := h.e.identities.check(h.ctx, h, m.id, imageID); err != nil {
		return failed(err)
	}
	switch {
	case m.prof.session:
		h.started(h.now(), map[string]any{"warm_pool": m.prof.key, "agent": true}, true)
		return h.follow(h.main)
	case m.agent != nil:
		return h.runWarmAgent(m)
	}
	// Started before the script is handed in, so that the first reading
	// of the container's counters, its baseline, comes before the command.
	h.started(h.now(), map[string]any{"warm_pool": m.prof.key}, true)
	// As on the cold path: the script, then the run's stdin, on the one
	// stream; a command that exits without reading its input closes it.
	h.main.writeStdin(m.warmScript(h.job.Spec) + "\x00" + h.job.Spec.Stdin)
	return h.follow(h.main)
}

// runWarmAgent runs the job in a claimed warm member whose agent is
// authenticated already: the command is started by the agent and its
// exit comes back over the stream; the container is removed after the
// run has answered. The trail is the same as a warm run's: created,
// started, exited with its code (and OOM, timeout or cancellation), then
// removed.
func (h *handle) runWarmAgent(m *member) ending {
	spec := h.job.Spec
	ooms := h.e.meter.oomKills(m.id)
	p, err := m.agent.conn.Start(agentCommand(spec, m.entrypoint), h.stdout, h.stderr, []byte(spec.Stdin))
	if maybeRan, err := awaitStart(p, err); err != nil {
		if maybeRan {
			// The container is removed (its processes killed) by the
			// handle's end.
			h.ending.Store(true)
			return unconfirmed(err)
		}
		return failed(sandgate.WrapError(sandgate.CodeContainerCreate, err, "start the command in warm container %s", m.name))
	}
	h.started(h.now(), map[string]any{"warm_pool": m.prof.key, "agent": true, "pid": p.PID()}, true)
	return h.follow(&agentProc{h: h, p: p, cid: m.id, ooms: ooms,
		usage: func(_ agent.Exit, res sandgate.Result) *sandgate.Usage { return h.sampled(res) },
		// The agent ended first (killed, out of memory): the container
		// ends with it, and is judged as any container's end.
		gone: func(reason stopReason, _ error) ending {
			h.main.stop()
			return h.main.end(reason)
		},
	})
}
