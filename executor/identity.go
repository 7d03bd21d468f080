package executor

import (
	"archive/tar"
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"sync"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/internal/daemon"
)

// Policy judges the user a run asks for, but only the image knows which
// groups that user ends up in: the runtime adds every group of the image's
// /etc/group that lists the user's name (from /etc/passwd) as a member,
// and the passwd entry's group when the request names none. An image that
// puts its user in the Docker socket's group, or in disk or shadow, would
// hand a run what the policy refused. So before a container starts, the
// executor reads the image's account files and refuses it when the user
// is root or any of its groups is privileged (the decision's
// Enforcement.PrivilegedGIDs, gid 0 always among them). It counts a
// group the image's /etc/group adds even when the request names the
// primary group: some runtimes add them then too, and refusing such an
// image costs nothing legitimate.

// maxAccountFile bounds how much of an image's /etc/passwd or /etc/group
// is read.
const maxAccountFile = 1 << 20

// maxAccountCache bounds the images whose account files are remembered.
const maxAccountCache = 256

// accounts is what an image's /etc/passwd and /etc/group say.
type accounts struct {
	users  []passwdEntry
	groups []groupEntry
}

type passwdEntry struct {
	name     string
	uid, gid int64
}

type groupEntry struct {
	name    string
	gid     int64
	members []string
}

// copyAPI is the Docker call that reads a file out of a container.
type copyAPI interface {
	CopyFromContainer(ctx context.Context, id, srcPath string) (io.ReadCloser, container.PathStat, error)
}

// identities checks the identity a container's process gets from its
// image, and remembers the account files of images by image ID: an
// image's content never changes under its ID.
type identities struct {
	docker copyAPI
	calls  calls
	// host are the host's groups no container may hold, whatever the
	// decision's enforcement says.
	host []sandgate.HostGroup

	mu   sync.Mutex
	byID map[string]*accounts
}

func newIdentities(d copyAPI, c calls, host []sandgate.HostGroup) *identities {
	return &identities{docker: d, calls: c, host: host}
}

func (c *identities) get(id string) (*accounts, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	a, ok := c.byID[id]
	return a, ok
}

func (c *identities) put(id string, a *accounts) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.byID == nil || len(c.byID) >= maxAccountCache {
		c.byID = map[string]*accounts{}
	}
	c.byID[id] = a
}

// identity is the uid, primary gid and supplementary gids a container's
// process gets.
type identity struct {
	name   string
	uid    int64
	gid    int64
	groups []int64
}

// resolve works out the identity the runtime gives user in an image with
// these accounts, as runc does: a numeric or named user, the request's
// group or else the passwd entry's (gid 0 for a uid the image does not
// know), plus every group that lists the user's name.
func (a *accounts) resolve(user string) (identity, error) {
	name, group, hasGroup := strings.Cut(user, ":")
	var id identity
	var entry *passwdEntry
	if uid, err := strconv.ParseInt(name, 10, 64); err == nil {
		id.uid = uid
		for i := range a.users {
			if a.users[i].uid == uid {
				entry = &a.users[i]
				break
			}
		}
	} else {
		for i := range a.users {
			if a.users[i].name == name {
				entry = &a.users[i]
				break
			}
		}
		if entry == nil {
			return identity{}, fmt.Errorf("user %q is not in the image's /etc/passwd", name)
		}
		id.uid = entry.uid
	}
	if entry != nil {
		id.name, id.gid = entry.name, entry.gid
	}
	if hasGroup {
		if gid, err := strconv.ParseInt(group, 10, 64); err == nil {
			id.gid = gid
		} else {
			found := false
			for _, g := range a.groups {
				if g.name == group {
					id.gid, found = g.gid, true
					break
				}
			}
			if !found {
				return identity{}, fmt.Errorf("group %q is not in the image's /etc/group", group)
			}
		}
	}
	id.groups = []int64{id.gid}
	if id.name != "" {
		for _, g := range a.groups {
			if slices.Contains(g.members, id.name) && !slices.Contains(id.groups, g.gid) {
				id.groups = append(id.groups, g.gid)
			}
		}
	}
	return id, nil
}

// check refuses to start h's container when the image makes its user
// root or puts it in a privileged group. It reads the image's account
// files from the created container, once per image.
func (c *identities) check(ctx context.Context, h *handle, containerID, imageID string) error {
	a, ok := c.get(imageID)
	if !ok {
		var err error
		if a, err = c.read(ctx, h.trail, containerID); err != nil {
			return err
		}
		c.put(imageID, a)
	}
	privileged := map[int64]string{0: "root's group"}
	for _, g := range h.job.Enforcement.PrivilegedGIDs {
		privileged[g] = "privileged (data.sandgate.config.privileged_gids)"
	}
	for _, g := range c.host {
		privileged[g.GID] = "the group that owns " + g.Owns + " on the daemon's host"
	}
	return refuseIdentity(a, h.job.Spec.User, privileged)
}

// refuseIdentity is the verdict of check for one user: privileged maps
// the gids no container may hold to why.
func refuseIdentity(a *accounts, user string, privileged map[int64]string) error {
	refuse := func(format string, args ...any) error {
		return &sandgate.Error{Code: sandgate.CodeContainerCreate, Field: "user",
			Message: "refused by the executor: " + fmt.Sprintf(format, args...)}
	}
	id, err := a.resolve(user)
	if err != nil {
		return refuse("%v", err)
	}
	if id.uid == 0 {
		return refuse("user %q is uid 0 (root) in this image", user)
	}
	for _, g := range id.groups {
		if why, ok := privileged[g]; ok || g == 0 {
			how := "its primary group"
			if g != id.gid {
				how = "a supplementary group the image's /etc/group gives " + strconv.Quote(id.name)
			}
			if why == "" {
				why = "root's group"
			}
			return refuse("user %q would run with gid %d%s, %s: %s", user, g, groupName(a, g), how, why)
		}
	}
	return nil
}

func groupName(a *accounts, gid int64) string {
	for _, g := range a.groups {
		if g.gid == gid && g.name != "" {
			return " (" + g.name + ")"
		}
	}
	return ""
}

// read reads /etc/passwd and /etc/group out of a created container. A
// file the image does not have counts as empty.
func (c *identities) read(ctx context.Context, t *trail, containerID string) (*accounts, error) {
	a := &accounts{}
	for _, name := range []string{"/etc/passwd", "/etc/group"} {
		data, err := readFile(ctx, c.docker, c.calls, t, containerID, name, maxAccountFile)
		if err != nil {
			return nil, daemon.Error(sandgate.CodeContainerCreate, err, "read %s of the image", name)
		}
		if name == "/etc/passwd" {
			a.users = parsePasswd(data)
		} else {
			a.groups = parseGroup(data)
		}
	}
	return a, nil
}

// readFile reads one regular file of at most limit bytes out of a
// container's filesystem; nil when there is no such file.
func readFile(ctx context.Context, d copyAPI, c calls, t *trail, containerID, path string, limit int64) ([]byte, error) {
	var data []byte
	err := c.do(ctx, t, "copy "+path, func(ctx context.Context) error {
		rc, _, err := d.CopyFromContainer(ctx, containerID, path)
		if cerrdefs.IsNotFound(err) {
			data = nil
			return nil
		}
		if err != nil {
			return err
		}
		defer rc.Close()
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				data = nil
				return nil
			}
			if err != nil {
				return fmt.Errorf("read the archive of %s: %w", path, err)
			}
			if h.Typeflag != tar.TypeReg {
				continue
			}
			if h.Size > limit {
				return &sandgate.Error{Code: sandgate.CodeContainerCreate, Message: fmt.Sprintf("%s of the image is over %d bytes", path, limit)}
			}
			var buf bytes.Buffer
			if _, err := io.Copy(&buf, io.LimitReader(tr, limit)); err != nil {
				return fmt.Errorf("read %s: %w", path, err)
			}
			data = buf.Bytes()
			return nil
		}
	})
	return data, err
}

func parsePasswd(data []byte) []passwdEntry {
	var out []passwdEntry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxAccountFile)
	for sc.Scan() {
		f := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(f) < 4 || strings.HasPrefix(f[0], "#") {
			continue
		}
		uid, err1 := strconv.ParseInt(f[2], 10, 64)
		gid, err2 := strconv.ParseInt(f[3], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		out = append(out, passwdEntry{name: f[0], uid: uid, gid: gid})
	}
	return out
}

func parseGroup(data []byte) []groupEntry {
	var out []groupEntry
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 4096), maxAccountFile)
	for sc.Scan() {
		f := strings.Split(strings.TrimSpace(sc.Text()), ":")
		if len(f) < 3 || strings.HasPrefix(f[0], "#") {
			continue
		}
		gid, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			continue
		}
		g := groupEntry{name: f[0], gid: gid}
		if len(f) > 3 && f[3] != "" {
			for _, m := range strings.Split(f[3], ",") {
				if m = strings.TrimSpace(m); m != "" {
					g.members = append(g.members, m)
				}
			}
		}
		out = append(out, g)
	}
	return out
}
