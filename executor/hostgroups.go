package executor

import (
	"fmt"
	"os"
	"os/user"
	"slices"
	"strconv"
	"syscall"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/internal/daemon"
)

// Groups of the host that open doors on it are found at start rather
// than named in the bundle's data, which cannot know them: the gid of the
// Docker socket differs from host to host (105 here, 998 there). A run
// that holds the socket's group reaches the daemon through any socket
// file it can see, and one that holds a mount root's group reaches every
// team's directory under it that the group may enter. They are denied as
// the data's privileged_gids are: by policy (input.settings.host_groups)
// and again by the executor, which refuses them as a container's primary
// or supplementary group (identity.go) whatever the decision said.

// HostGroups finds the groups of this host that no run may hold: the
// group of the socket of the daemon at dockerHost and the group named
// "docker" (what dockerd gives its socket by default, in case the socket
// is not there yet), when the daemon is local; and the group that owns
// each mount root. gid 0, privileged always, is left out. A remote
// daemon's groups are its host's, which this host cannot see: they are
// none here, and docs/security.md says to name them in the data.
func HostGroups(dockerHost string, mountRoots []string) ([]sandgate.HostGroup, error) {
	var out []sandgate.HostGroup
	add := func(gid int64, owns string) {
		if gid == 0 || slices.ContainsFunc(out, func(g sandgate.HostGroup) bool { return g.GID == gid }) {
			return
		}
		out = append(out, sandgate.HostGroup{GID: gid, Owns: owns})
	}
	if daemon.Local(dockerHost) {
		socket := daemon.SocketPath(dockerHost)
		if gid, err := fileGroup(socket); err == nil {
			add(gid, "the Docker socket "+socket)
		} else if !os.IsNotExist(err) {
			return nil, fmt.Errorf("the group of the Docker socket %s: %w", socket, err)
		}
		if g, err := user.LookupGroup("docker"); err == nil {
			if gid, err := strconv.ParseInt(g.Gid, 10, 64); err == nil {
				add(gid, "the Docker socket (group docker)")
			}
		}
	}
	for _, root := range mountRoots {
		gid, err := fileGroup(root)
		switch {
		case os.IsNotExist(err):
			// A root that is not there grants nothing; a mount under it
			// fails.
		case err != nil:
			return nil, fmt.Errorf("the group of mount root %s: %w", root, err)
		default:
			add(gid, "the mount root "+root)
		}
	}
	return out, nil
}

// fileGroup is the gid that owns path (followed through symlinks).
func fileGroup(path string) (int64, error) {
	st, err := os.Stat(path)
	if err != nil {
		return 0, err
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, fmt.Errorf("%s: no owner", path)
	}
	return int64(sys.Gid), nil
}
