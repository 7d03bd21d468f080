package executor

import (
	"context"

	"github.com/sandgate/sandgate"
)

// Execute runs job to completion in a fresh container and reports how it
// ended. It waits for a free slot when MaxConcurrent runs already hold
// one. It returns an error only when the job could not be run at all:
// SBX-001 (refused or not created or not started), SBX-002 (image
// unavailable), SBX-003 (mount), SBX-004 (resource limit) or
// DOCKER-UNAVAILABLE; the result then still says when it ended and why.
// Every result has an outcome, decided by the run's handle. Cancelling
// ctx cancels the run like Cancel does.
func (e *Executor) Execute(ctx context.Context, job sandgate.Job) (sandgate.Result, error) {
	h := e.newHandle(ctx, job)
	if err := e.runs.add(h); err != nil {
		return h.end(ending{err: err, quiet: true})
	}
	defer e.runs.remove(h)
	return h.end(e.launch(h))
}

// launch takes a live run from its slot to its end: a slot (fairly
// between teams, a session place for a session's container), the image resolved, then a warm container claimed or a
// container prepared, created, checked, started and followed.
func (e *Executor) launch(h *handle) ending {
	ctx := h.ctx
	set, err := containerSettings(h.job, e.cfg)
	if err != nil {
		return failed(err)
	}
	if err := e.runtimes.check(ctx, h.trail, set.host.Runtime); err != nil {
		return h.failedOr(err)
	}
	// Queue for a place, fairly between teams: a run slot, or a session
	// place for a session's container; a run cancelled while queued never
	// gets a container.
	places := e.slots
	if h.job.SessionContainer {
		places = e.sessions
	}
	if !places.acquire(ctx, h.job.Team, h.job.TeamConcurrency) {
		return cancelledBeforeStart()
	}
	h.slot = places
	imageID, err := e.resolver.resolve(ctx, h.trail, h.job, set.config.Image)
	if err != nil {
		return h.failedOr(err)
	}
	// A warm container has no workspace but a warm session's own: a run
	// with one is created, and so is a session without an agent.
	spec := h.job.Spec
	if !spec.HasWorkspace() && spec.Network != sandgate.NetworkEgress && (!h.job.SessionContainer || e.cfg.AgentBinary != "") {
		if m := e.pool.claim(ctx, h.job, set, imageID); m != nil {
			return h.runWarm(set, imageID, m)
		}
	}
	if pinned, ok := localPinID(set.config.Image, imageID); ok {
		set.config.Image = pinned // the daemon resolves name@digest only against registry digests
	} else if signatureRequired(h.job, set.config.Image) {
		// The container is made from the image whose signature was
		// checked, not from whatever its name points at by then.
		set.config.Image = imageID
	}
	payload, err := e.prepare(h, &set)
	if err != nil {
		return failed(err)
	}
	useAgent := h.job.SessionContainer && e.cfg.AgentBinary != ""
	if useAgent {
		withAgent(&set, e.cfg.AgentBinary)
	}
	id, err := h.create(ctx, set)
	if err != nil {
		if ctx.Err() != nil {
			// The create may have happened after all; find it by name,
			// and the handle's end removes it.
			h.removeByName(set.name)
			return cancelledBeforeStart()
		}
		return failed(err)
	}
	h.setContainer(id, e.now())
	payload["name"], payload["image"], payload["image_id"] = set.name, set.config.Image, imageID
	h.trail.created(payload)
	if err := e.identities.check(ctx, h, id, imageID); err != nil {
		return h.failedOr(err)
	}
	return h.startAndFollow(useAgent)
}

// prepare readies what a cold container needs before it is created and
// points set at it: bind-mount sources pinned (what was admitted is what
// is mounted, whatever happened to the paths while the run queued), the
// team's cache volumes, the bridge or egress network (the proxy's address
// in the run's environment), and the run's workspace with its files. It
// returns what container.created records of them. The handle owns each
// from here, and its end undoes them.
func (e *Executor) prepare(h *handle, set *settings) (map[string]any, error) {
	ctx := h.ctx
	payload := map[string]any{}
	staged, err := e.stager.stageRun(h, set)
	if err != nil {
		return nil, err
	}
	if len(staged) > 0 {
		h.staged = true
		payload["mounts"] = stagedDocs(staged, h.job.Spec.Mounts)
	}
	if err := e.volumes.ensureAll(ctx, h, set); err != nil {
		return nil, err
	}
	switch string(set.host.NetworkMode) {
	case e.cfg.BridgeNetwork:
		if err := e.nets.ensureBridge(ctx, h.trail); err != nil {
			return nil, err
		}
	case e.cfg.EgressNetwork:
		if h.job.AirGapped {
			break
		}
		eg, err := e.nets.ensureEgress(ctx, h.trail)
		if err != nil {
			return nil, err
		}
		set.config.Env = append(set.config.Env, eg.env...)
		// Docker's embedded DNS server would forward the run's queries
		// to the host's resolvers, a channel out that no proxy sees:
		// its only upstream is the gateway address, where the firewall
		// drops them. Names are resolved by the proxy.
		set.host.DNS = []string{eg.gateway.String()}
		if h.secrets, err = e.withSecrets(h, set); err != nil {
			return nil, err
		}
	}
	if h.job.Spec.HasWorkspace() || h.job.SessionContainer {
		ws, wp, err := e.workspaces.prepare(ctx, h.trail, h.job, set)
		if err != nil {
			return nil, err
		}
		h.setLink(nil, ws)
		payload["workspace"] = wp
	}
	return payload, nil
}
