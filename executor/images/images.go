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
	"github.com/docker/docker/api/types/build"
	"github.com/docker/docker/api/types/container"
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
	labels, err := sandboxPackageLabels(bb)
	if err != nil {
		return "", sandgate.WrapError(sandgate.CodeImageUnavailable, err, "build %s", opts.Tag)
	}
	labels["org.opencontainers.image.title"], labels[sandboxLabel] = "sandgate sandbox", sandboxLabelValue
	resp, err := im.api.ImageBuild(ctx, bytes.NewReader(buildCtx), build.ImageBuildOptions{
		Tags:        []string{opts.Tag},
		Dockerfile:  "Dockerfile",
		Remove:      true,
		ForceRemove: true,
		PullParent:  false,
		NetworkMode: "none",
		Version:     build.BuilderV1,
		Labels:      labels,
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
	names, err := applets(ctx, bb.path)
	if err != nil {
		return nil, err
	}
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

// applets are the applets busybox at path lists, by name, sh among them.
func applets(ctx context.Context, path string) ([]string, error) {
	out, err := exec.CommandContext(ctx, path, "--list").Output()
	if err != nil {
		return nil, fmt.Errorf("%s --list: %w", path, err)
	}
	seen := map[string]bool{}
	for _, a := range strings.Fields(string(out)) {
		if a != "busybox" && !strings.ContainsAny(a, "/\x00") && a != "." && a != ".." {
			seen[a] = true
		}
	}
	if !seen["sh"] {
		return nil, fmt.Errorf("%s has no sh applet", path)
	}
	names := make([]string, 0, len(seen))
	for a := range seen {
		names = append(names, a)
	}
	sort.Strings(names)
	return names, nil
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
