// Package images administers the images a node's daemon holds: it builds
// the sandbox image (FROM scratch, from a static busybox) and the language
// images of the recipes (Debian packages, with mmdebstrap), loads image
// tarballs (air-gapped sites have no other way in), lists and prunes them,
// and lists those sandgate built for GET /v1/config. It is not on the run
// path: a run's image is resolved by the executor, which only inspects
// and, when the policy allows, pulls.
package images

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/hex"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"sort"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/api/types/network"
	"github.com/docker/docker/client"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"
	"github.com/sethvargo/go-retry"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/internal/daemon"
)

// SandboxImage is the default sandbox image that BuildSandboxImage builds.
const SandboxImage = "sandgate/sandbox:latest"

// imageAPI is the Docker calls that build, load, list and prune images.
// *client.Client satisfies it; unit tests fake exactly these.
type imageAPI interface {
	ImageBuild(ctx context.Context, buildContext io.Reader, opts build.ImageBuildOptions) (build.ImageBuildResponse, error)
	ImageLoad(ctx context.Context, input io.Reader, opts ...client.ImageLoadOption) (image.LoadResponse, error)
	ImageInspect(ctx context.Context, ref string, opts ...client.ImageInspectOption) (image.InspectResponse, error)
	ImageList(ctx context.Context, opts image.ListOptions) ([]image.Summary, error)
	ImageRemove(ctx context.Context, ref string, opts image.RemoveOptions) ([]image.DeleteResponse, error)
	ContainerList(ctx context.Context, opts container.ListOptions) ([]container.Summary, error)
	// The checks of a recipe image (recipe_build.go) run in a container.
	ContainerCreate(ctx context.Context, config *container.Config, hostConfig *container.HostConfig, networking *network.NetworkingConfig, platform *ocispec.Platform, name string) (container.CreateResponse, error)
	ContainerStart(ctx context.Context, id string, opts container.StartOptions) error
	ContainerWait(ctx context.Context, id string, condition container.WaitCondition) (<-chan container.WaitResponse, <-chan error)
	ContainerLogs(ctx context.Context, id string, opts container.LogsOptions) (io.ReadCloser, error)
	ContainerRemove(ctx context.Context, id string, opts container.RemoveOptions) error
}

// Config configures Images. The zero value of every field has a usable
// default; Validate fills the defaults in.
type Config struct {
	// DockerHost is the daemon ("unix:///var/run/docker.sock", "tcp://…");
	// empty means the local socket.
	DockerHost string
	// CallTimeout bounds one attempt of a quick Docker call. Default 30s.
	CallTimeout time.Duration
	// MaxRetries caps the retries of a call after a transient error.
	// Default 4.
	MaxRetries uint64
	// Backoff returns a fresh backoff for each retried call. Default:
	// exponential from 100ms, capped at 2s, with 10% jitter.
	Backoff func() retry.Backoff
	// Logger receives operational logs. Default: discard.
	Logger *slog.Logger
}

// Validate fills in defaults.
func (c *Config) Validate() error {
	if c.CallTimeout <= 0 {
		c.CallTimeout = 30 * time.Second
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = 4
	}
	if c.Backoff == nil {
		c.Backoff = func() retry.Backoff {
			return retry.WithJitterPercent(10, retry.WithCappedDuration(2*time.Second, retry.NewExponential(100*time.Millisecond)))
		}
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Images administers the images of one daemon.
type Images struct {
	cfg    Config
	api    imageAPI
	closer io.Closer
	log    *slog.Logger
}

// New returns the image administration of the daemon cfg.DockerHost
// names. It does not contact the daemon until asked.
func New(cfg Config) (*Images, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	c, err := daemon.Dial(cfg.DockerHost)
	if err != nil {
		return nil, err
	}
	return &Images{cfg: cfg, api: c, closer: c, log: cfg.Logger}, nil
}

// Close releases the Docker client.
func (im *Images) Close() error {
	if im.closer != nil {
		return im.closer.Close()
	}
	return nil
}

// call runs one Docker call under the retry policy.
func (im *Images) call(ctx context.Context, op string, f func(ctx context.Context) error) error {
	rt := daemon.Retrier{MaxRetries: im.cfg.MaxRetries, Backoff: im.cfg.Backoff, Log: im.log}
	return rt.Do(ctx, op, im.cfg.CallTimeout, f, nil)
}

// BuildOptions configures BuildSandboxImage.
type BuildOptions struct {
	// Busybox is the statically linked busybox binary to put in the image.
	// Default: the host's /bin/busybox (Debian's busybox-static) when it
	// passes the check (busybox.go), else busybox-static of BusyboxSuite.
	Busybox string
	// BusyboxSuite is the Debian release whose busybox-static is taken
	// when the host's does not pass. Default DefaultBusyboxSuite.
	BusyboxSuite string
	// Mmdebstrap is the mmdebstrap program that extracts it. Default
	// "mmdebstrap".
	Mmdebstrap string
	// Sources are one-line apt sources for it. Default: deb.debian.org's
	// suite, suite-updates and suite-security, main.
	Sources []string
	// Tag names the image. Default SandboxImage.
	Tag string
	// Progress receives the daemon's build output; nil discards it.
	Progress io.Writer
}

// SandboxUID is the user and group every sandbox image process runs as.
const SandboxUID = 10001

// BuildSandboxImage builds the default sandbox image with the daemon's
// classic builder, from an in-memory context and FROM scratch, so neither
// a registry nor a pull is needed: a static busybox (pickBusybox) with a
// link for every applet it lists, /etc/passwd and /etc/group with the
// unprivileged user 10001, /tmp, /cache (for cache volumes) and
// /workspace, and USER 10001:10001. It returns the image ID. It fails when
// the busybox is not statically linked, or its wget crashes on -T.
func (im *Images) BuildSandboxImage(ctx context.Context, opts BuildOptions) (string, error) {
	if opts.Tag == "" {
		opts.Tag = SandboxImage
	}
	if opts.Progress == nil {
		opts.Progress = io.Discard
	}
	dir, err := os.MkdirTemp("", "sandgate-busybox-")
	if err != nil {
		return "", err
	}
	defer os.RemoveAll(dir)
	bb, err := pickBusybox(ctx, opts, dir)
	if err != nil {
		return "", sandgate.WrapError(sandgate.CodeImageUnavailable, err, "build %s", opts.Tag)
	}
	buildCtx, err := sandboxContext(ctx, bb)
	if err != nil {
		return "", err
	}
	resp, err := im.api.ImageBuild(ctx, bytes.NewReader(buildCtx), build.ImageBuildOptions{
		Tags:        []string{opts.Tag},
		Dockerfile:  "Dockerfile",
		Remove:      true,
		ForceRemove: true,
		PullParent:  false,
		NetworkMode: "none",
		Version:     build.BuilderV1,
		Labels:      map[string]string{"org.opencontainers.image.title": "sandgate sandbox", "org.opencontainers.image.source": "sandgate image build"},
	})
	if err != nil {
		return "", daemon.Error(sandgate.CodeImageUnavailable, err, "build %s", opts.Tag)
	}
	defer resp.Body.Close()
	err = daemon.ReadMessages(resp.Body, func(m daemon.Message) {
		if m.Stream != "" {
			io.WriteString(opts.Progress, m.Stream)
		}
	})
	if err != nil {
		return "", sandgate.WrapError(sandgate.CodeImageUnavailable, err, "build %s", opts.Tag)
	}
	img, err := im.api.ImageInspect(ctx, opts.Tag)
	if err != nil {
		return "", daemon.Error(sandgate.CodeImageUnavailable, err, "inspect %s after build", opts.Tag)
	}
	return img.ID, nil
}

// sandboxDockerfile is the recipe. COPY keeps the symlinks and the modes
// of the context; no RUN step, so the build needs no shell and no base.
const sandboxDockerfile = `FROM scratch
COPY rootfs/ /
COPY --chown=10001:10001 workspace/ /workspace/
ENV PATH=/bin:/usr/bin HOME=/workspace
USER 10001:10001
WORKDIR /workspace
`

// sandboxContext returns the build context as a tar archive.
func sandboxContext(ctx context.Context, bb busybox) ([]byte, error) {
	bin, err := os.ReadFile(bb.path)
	if err != nil {
		return nil, fmt.Errorf("read busybox: %w (install Debian's busybox-static)", err)
	}
	out, err := exec.CommandContext(ctx, bb.path, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", bb.path, err)
	}
	applets := map[string]bool{}
	for _, a := range strings.Fields(string(out)) {
		if a != "busybox" && !strings.ContainsAny(a, "/\x00") && a != "." && a != ".." {
			applets[a] = true
		}
	}
	if !applets["sh"] {
		return nil, fmt.Errorf("%s has no sh applet", bb.path)
	}
	names := make([]string, 0, len(applets))
	for a := range applets {
		names = append(names, a)
	}
	sort.Strings(names)

	sum := sha256.Sum256(bin)
	// A fixed time keeps the context, and so the builder's cache, stable.
	mtime := time.Unix(0, 0)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	add := func(h *tar.Header, body []byte) error {
		h.ModTime, h.Format = mtime, tar.FormatPAX
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := tw.Write(body)
		return err
	}
	dir := func(name string, mode int64) error {
		return add(&tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: mode}, nil)
	}
	file := func(name string, mode int64, body []byte) error {
		return add(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(body))}, body)
	}
	link := func(name, target string) error {
		return add(&tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}, nil)
	}
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/sbin/nologin\nsandbox:x:%d:%d:sandgate sandbox:/workspace:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\n", SandboxUID, SandboxUID)
	group := fmt.Sprintf("root:x:0:\nsandbox:x:%d:\nnogroup:x:65534:\n", SandboxUID)
	steps := []func() error{
		func() error { return file("Dockerfile", 0o644, []byte(sandboxDockerfile)) },
		func() error { return dir("rootfs/", 0o755) },
		func() error { return dir("rootfs/bin/", 0o755) },
		func() error { return file("rootfs/bin/busybox", 0o755, bin) },
		func() error { return dir("rootfs/sbin/", 0o755) },
		func() error { return link("rootfs/sbin/nologin", "/bin/busybox") },
		func() error { return dir("rootfs/usr/", 0o755) },
		func() error { return dir("rootfs/usr/bin/", 0o755) },
		func() error { return link("rootfs/usr/bin/env", "/bin/busybox") },
		func() error { return dir("rootfs/etc/", 0o755) },
		func() error { return file("rootfs/etc/passwd", 0o644, []byte(passwd)) },
		func() error { return file("rootfs/etc/group", 0o644, []byte(group)) },
		func() error {
			release := fmt.Sprintf("busybox_sha256=%s\nbusybox_version=%s\nbusybox_source=%s\n", hex.EncodeToString(sum[:]), bb.version, bb.source)
			return file("rootfs/etc/sandgate-release", 0o644, []byte(release))
		},
		func() error { return dir("rootfs/tmp/", 0o1777) },
		// A cache volume gets the owner and mode of the image's directory
		// where it is first mounted, and root's 0755 where there is none,
		// which the unprivileged user cannot write. /cache, like /tmp, is
		// for every user (sticky), so a volume mounted there is too.
		func() error { return dir("rootfs/cache/", 0o1777) },
		func() error { return dir("workspace/", 0o755) },
	}
	for _, s := range steps {
		if err := s(); err != nil {
			return nil, fmt.Errorf("build context: %w", err)
		}
	}
	for _, a := range names {
		if err := link("rootfs/bin/"+a, "busybox"); err != nil {
			return nil, fmt.Errorf("build context: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return nil, fmt.Errorf("build context: %w", err)
	}
	return buf.Bytes(), nil
}

// checkStatic refuses a dynamically linked binary: FROM scratch has no
// loader and no libraries.
func checkStatic(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return fmt.Errorf("%s is not an ELF binary: %w", path, err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return fmt.Errorf("%s is dynamically linked; install Debian's busybox-static", path)
		}
	}
	if libs, err := f.ImportedLibraries(); err == nil && len(libs) > 0 {
		return fmt.Errorf("%s needs shared libraries %v; install Debian's busybox-static", path, libs)
	}
	return nil
}

// LoadImage loads the images of a `docker save` tarball and returns the
// references (or IDs) the daemon reports loading. Errors are SBX-002, or
// DOCKER-UNAVAILABLE.
func (im *Images) LoadImage(ctx context.Context, r io.Reader) ([]string, error) {
	resp, err := im.api.ImageLoad(ctx, r, client.ImageLoadWithQuiet(true))
	if err != nil {
		return nil, daemon.Error(sandgate.CodeImageUnavailable, err, "load images")
	}
	defer resp.Body.Close()
	var loaded []string
	err = daemon.ReadMessages(resp.Body, func(m daemon.Message) {
		// The daemon reports each image as a line of text.
		for _, line := range strings.Split(m.Stream, "\n") {
			for _, p := range []string{"Loaded image: ", "Loaded image ID: "} {
				if ref, ok := strings.CutPrefix(strings.TrimSpace(line), p); ok {
					loaded = append(loaded, ref)
				}
			}
		}
	})
	if err != nil {
		return loaded, sandgate.WrapError(sandgate.CodeImageUnavailable, err, "load images")
	}
	return loaded, nil
}

// ImageID returns the ID of the local image ref, or SBX-002 when the
// daemon does not have it (DOCKER-UNAVAILABLE when it does not answer).
func (im *Images) ImageID(ctx context.Context, ref string) (string, error) {
	var id string
	err := im.call(ctx, "inspect image", func(ctx context.Context) error {
		img, err := im.api.ImageInspect(ctx, ref)
		id = img.ID
		return err
	})
	if cerrdefs.IsNotFound(err) {
		return "", sandgate.WrapError(sandgate.CodeImageUnavailable, err, "image %s is not present", ref)
	}
	if err != nil {
		return "", daemon.Error(sandgate.CodeImageUnavailable, err, "inspect image %s", ref)
	}
	return id, nil
}

// sandboxLabel marks the images BuildSandboxImage makes; `docker save`
// and `docker load` keep it, so a loaded sandbox image carries it too.
const sandboxLabel = "org.opencontainers.image.source"

// sandboxLabelValue is sandboxLabel's value on sandbox images.
const sandboxLabelValue = "sandgate image build"

// ImageInfo is one local image as `sandgate image list` shows it.
type ImageInfo struct {
	// ID is the image ID: the SHA-256 of its configuration, which names
	// every layer by digest, so it pins the content like a registry
	// digest does.
	ID string `json:"id"`
	// RepoTags are the image's names (empty for a dangling image).
	RepoTags []string `json:"repo_tags"`
	// RepoDigests are registry manifest digests (name@sha256:…), present
	// only for images pulled from or pushed to a registry.
	RepoDigests []string `json:"repo_digests"`
	// Pins are the digest-pinned references a run spec may name when the
	// policy requires digests: the RepoDigests, and repository@ID for
	// each tag, which the executor resolves to this local image.
	Pins []string `json:"pins"`
	// Size is the image's size in bytes, shared layers included.
	Size int64 `json:"size"`
	// Created is when the image was built.
	Created time.Time `json:"created"`
	// Sandbox says the image was made by `sandgate image build`.
	Sandbox bool `json:"sandbox"`
	// Dangling says the image has no name any more.
	Dangling bool `json:"dangling"`
	// Containers counts the containers (running or not) made from it.
	Containers int `json:"containers"`

	labels map[string]string
}

// ListOptions narrows ListImages.
type ListOptions struct {
	// Label keeps only images with this label ("key" or "key=value").
	Label string
}

// ListImages returns the daemon's images (not intermediate build layers),
// sandbox images first, then by name. Errors are DOCKER-UNAVAILABLE or
// SBX-002.
func (im *Images) ListImages(ctx context.Context, opts ListOptions) ([]ImageInfo, error) {
	f := filters.NewArgs()
	if opts.Label != "" {
		f.Add("label", opts.Label)
	}
	var list []image.Summary
	err := im.call(ctx, "list images", func(ctx context.Context) error {
		var err error
		list, err = im.api.ImageList(ctx, image.ListOptions{Filters: f})
		return err
	})
	if err != nil {
		return nil, daemon.Error(sandgate.CodeImageUnavailable, err, "list images")
	}
	var used []container.Summary
	err = im.call(ctx, "list containers", func(ctx context.Context) error {
		var err error
		used, err = im.api.ContainerList(ctx, container.ListOptions{All: true})
		return err
	})
	if err != nil {
		return nil, daemon.Error(sandgate.CodeDockerUnavailable, err, "list containers")
	}
	uses := map[string]int{}
	for _, c := range used {
		uses[c.ImageID]++
	}
	out := make([]ImageInfo, 0, len(list))
	for _, s := range list {
		info := ImageInfo{
			ID:          s.ID,
			RepoTags:    []string{},
			RepoDigests: []string{},
			Pins:        []string{},
			Size:        s.Size,
			Created:     time.Unix(s.Created, 0).UTC(),
			Sandbox:     s.Labels[sandboxLabel] == sandboxLabelValue,
			Containers:  uses[s.ID],
			labels:      s.Labels,
		}
		for _, t := range s.RepoTags {
			if t != "<none>:<none>" {
				info.RepoTags = append(info.RepoTags, t)
			}
		}
		for _, d := range s.RepoDigests {
			if d != "<none>@<none>" {
				info.RepoDigests = append(info.RepoDigests, d)
				info.Pins = append(info.Pins, d)
			}
		}
		seen := map[string]bool{}
		for _, t := range info.RepoTags {
			if named, err := reference.ParseNormalizedNamed(t); err == nil && !seen[named.Name()] {
				seen[named.Name()] = true
				info.Pins = append(info.Pins, reference.FamiliarName(named)+"@"+s.ID)
			}
		}
		info.Dangling = len(info.RepoTags) == 0 && len(info.RepoDigests) == 0
		out = append(out, info)
	}
	sort.SliceStable(out, func(i, j int) bool {
		a, b := out[i], out[j]
		if a.Sandbox != b.Sandbox {
			return a.Sandbox
		}
		return firstName(a) < firstName(b)
	})
	return out, nil
}

func firstName(i ImageInfo) string {
	if len(i.RepoTags) > 0 {
		return i.RepoTags[0]
	}
	return "~" + i.ID // nameless images last
}

// PruneOptions configures PruneImages.
type PruneOptions struct {
	// DryRun reports what would be removed and removes nothing.
	DryRun bool
	// DanglingOnly removes only nameless images, keeping every tagged one.
	DanglingOnly bool
	// Label limits pruning to images with this label ("key" or "key=value").
	Label string
	// Keep are repositories (as tagged: "python", "registry.local/tool")
	// whose images are kept even when unused.
	Keep []string
}

// PrunedImage is an image PruneImages removed, or would remove.
type PrunedImage struct {
	ID       string   `json:"id"`
	RepoTags []string `json:"repo_tags"`
	Size     int64    `json:"size"`
	Reason   string   `json:"reason"` // "dangling" or "unused"
}

// PruneReport is what PruneImages did.
type PruneReport struct {
	DryRun  bool          `json:"dry_run"`
	Removed []PrunedImage `json:"removed"`
	// Kept counts the images left alone: sandbox images, images some
	// container uses, kept repositories (and tagged images with
	// DanglingOnly).
	Kept int `json:"kept"`
	// Failed lists the images that could not be removed, with why (an
	// image taken into use between listing and removal, for example).
	Failed []string `json:"failed"`
	// Bytes is the sum of the removed images' sizes; layers they share
	// with kept images are not freed, so the disk gains at most this.
	Bytes int64 `json:"bytes"`
}

// PruneImages removes dangling images and, unless DanglingOnly, every
// tagged image that no container (running or stopped) uses, except
// sandbox images and the Keep repositories. A tagged image is removed tag
// by tag without force, so an image that a container takes into use
// meanwhile is refused by the daemon and reported in Failed rather than
// pulled from under it. Errors are DOCKER-UNAVAILABLE or SBX-002.
func (im *Images) PruneImages(ctx context.Context, opts PruneOptions) (PruneReport, error) {
	rep := PruneReport{DryRun: opts.DryRun, Removed: []PrunedImage{}, Failed: []string{}}
	list, err := im.ListImages(ctx, ListOptions{Label: opts.Label})
	if err != nil {
		return rep, err
	}
	keep := map[string]bool{}
	for _, k := range opts.Keep {
		if named, err := reference.ParseNormalizedNamed(k); err == nil {
			keep[named.Name()] = true
		}
	}
	kept := func(tags []string) bool {
		for _, t := range tags {
			if named, err := reference.ParseNormalizedNamed(t); err == nil && keep[named.Name()] {
				return true
			}
		}
		return false
	}
	for _, img := range list {
		// A dangling sandbox image is an old build, pruned like any other.
		if img.Containers > 0 || !img.Dangling && (img.Sandbox || opts.DanglingOnly || kept(img.RepoTags)) {
			rep.Kept++
			continue
		}
		reason := "unused"
		if img.Dangling {
			reason = "dangling"
		}
		p := PrunedImage{ID: img.ID, RepoTags: img.RepoTags, Size: img.Size, Reason: reason}
		if !opts.DryRun {
			if err := im.removeImage(ctx, img); err != nil {
				rep.Failed = append(rep.Failed, fmt.Sprintf("%s: %v", img.ID, err))
				continue
			}
		}
		rep.Removed = append(rep.Removed, p)
		rep.Bytes += img.Size
	}
	return rep, nil
}

// removeImage removes each of img's names, then the image itself when
// it is still there, never with force.
func (im *Images) removeImage(ctx context.Context, img ImageInfo) error {
	refs := append(append([]string{}, img.RepoTags...), img.RepoDigests...)
	refs = append(refs, img.ID)
	for i, ref := range refs {
		err := im.call(ctx, "remove image", func(ctx context.Context) error {
			_, err := im.api.ImageRemove(ctx, ref, image.RemoveOptions{PruneChildren: true})
			return err
		})
		// Removing the last name removes the image, so later names and
		// the ID may be gone already.
		if cerrdefs.IsNotFound(err) && i > 0 {
			continue
		}
		if err != nil {
			return daemon.Error(sandgate.CodeImageUnavailable, err, "remove image %s", ref)
		}
	}
	return nil
}
