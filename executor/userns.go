package executor

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/docker/docker/api/types/system"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/internal/daemon"
)

// idShift is how the daemon's user namespace (userns-remap) shifts a
// container's ids onto the host's: uid u inside is UID+u outside. A daemon
// without userns-remap shifts nothing. Files the gateway writes for a run
// (its workspace, a session's files) belong to the shifted ids, or the
// run, whose ids are the shifted ones on the host, could not write them.
type idShift struct {
	UID, GID int
}

// hostIDs learns the daemon's shift once, from `docker info`: a daemon
// with userns-remap lists "name=userns" among its security options and
// keeps its data under <data-root>/<uid>.<gid>, the first ids of its
// range. A daemon's remap changes only with a restart on another data
// root, which a gateway's restart follows.
type hostIDs struct {
	docker infoAPI
	calls  calls

	mu    sync.Mutex
	known bool
	shift idShift
}

// of returns the daemon's shift, asking it the first time; a run's trail
// t (nil for none) records the retries.
func (h *hostIDs) of(ctx context.Context, t *trail) (idShift, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.known {
		return h.shift, nil
	}
	var info system.Info
	err := h.calls.do(ctx, t, "docker info", func(ctx context.Context) error {
		var err error
		info, err = h.docker.Info(ctx)
		return err
	})
	if err != nil {
		return idShift{}, daemon.Error(sandgate.CodeDockerUnavailable, err, "docker info")
	}
	shift, err := shiftOf(info)
	if err != nil {
		return idShift{}, &sandgate.Error{Code: sandgate.CodeMountError, Field: "workspace", Message: err.Error()}
	}
	h.shift, h.known = shift, true
	return shift, nil
}

// shiftOf reads a daemon's userns-remap shift from its info.
func shiftOf(info system.Info) (idShift, error) {
	if !slices.ContainsFunc(info.SecurityOptions, func(o string) bool {
		return slices.Contains(strings.Split(o, ","), "name=userns")
	}) {
		return idShift{}, nil
	}
	uid, gid, ok := strings.Cut(filepath.Base(info.DockerRootDir), ".")
	u, err1 := strconv.Atoi(uid)
	g, err2 := strconv.Atoi(gid)
	if !ok || err1 != nil || err2 != nil || u <= 0 || g <= 0 {
		return idShift{}, fmt.Errorf("the daemon runs with userns-remap, but its data root %q does not name the remapped ids (<uid>.<gid>)", info.DockerRootDir)
	}
	return idShift{UID: u, GID: g}, nil
}
