package images

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"github.com/docker/docker/pkg/stdcopy"
	digest "github.com/opencontainers/go-digest"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/internal/daemon"
	"github.com/sandgate/sandgate/executor/seccomp"
)

// Labels every recipe image carries, besides sandboxLabel (which makes
// `sandgate image prune` keep it and GET /v1/config list it).
const (
	// LabelRecipe names the recipe ("python").
	LabelRecipe = "sandgate.recipe"
	// LabelRecipeDigest is Recipe.Digest: the recipe file and builder
	// version the image was built from.
	LabelRecipeDigest = "sandgate.recipe.sha256"
	// LabelDebianSuite is the Debian release of the packages.
	LabelDebianSuite = "sandgate.debian.suite"
	// LabelDebianPackages lists every Debian package in the image as
	// name=version, space-separated, sorted.
	LabelDebianPackages = "sandgate.debian.packages"
)

// RecipeBuildOptions configures BuildRecipeImage.
type RecipeBuildOptions struct {
	// Mmdebstrap is the mmdebstrap program. Default "mmdebstrap".
	Mmdebstrap string
	// Sources are one-line apt sources ("deb URL SUITE main"). Default:
	// deb.debian.org's SUITE, SUITE-updates and SUITE-security, main.
	Sources []string
	// SourceDateEpoch overrides the recipe's source_date_epoch when > 0.
	SourceDateEpoch int64
	// Reuse keeps an image already tagged with the recipe's image name
	// when its LabelRecipeDigest is the recipe's: nothing is built.
	Reuse bool
	// TempDir holds the layer while it is built. Default os.TempDir().
	TempDir string
	// Progress receives mmdebstrap's messages; nil discards them.
	Progress io.Writer
}

// RecipeBuild is what BuildRecipeImage made.
type RecipeBuild struct {
	Recipe string `json:"recipe"`
	Image  string `json:"image"`
	ID     string `json:"id"`
	// Reused says an image of this recipe was there and nothing was built.
	Reused bool `json:"reused"`
	// Packages are the Debian packages in the image, name=version.
	Packages []string `json:"packages"`
	// Size is the image's size in bytes.
	Size int64 `json:"size"`
	// Duration is the wall time of the build, load and checks.
	Duration time.Duration `json:"duration_ns"`
}

// recipeUser is the account every recipe image runs as, and its group.
var recipeUser = strconv.Itoa(SandboxUID) + ":" + strconv.Itoa(SandboxUID)

// BuildRecipeImage builds r's image: mmdebstrap extracts r.Packages and
// their dependencies from Debian (no maintainer script runs, so neither a
// shell nor dpkg is needed in the image), the stream is filtered into one
// layer (documentation, the package manager and its state, shells and
// device nodes dropped; setuid and setgid bits cleared; times clamped to
// SOURCE_DATE_EPOCH) with /etc/passwd and /etc/group naming the sandbox
// user 10001 alone in its own group, and the image is loaded into the
// daemon as a `docker save` archive, so no registry is involved and the
// same packages give the same image ID. Then each of r.Checks runs in a
// container of it; when one fails the image is removed. Errors are
// SBX-002 (DOCKER-UNAVAILABLE when the daemon does not answer).
func (im *Images) BuildRecipeImage(ctx context.Context, r Recipe, opts RecipeBuildOptions) (RecipeBuild, error) {
	start := time.Now()
	res := RecipeBuild{Recipe: r.Name, Image: r.Image, Packages: []string{}}
	if opts.Reuse {
		img, err := im.api.ImageInspect(ctx, r.Image)
		if err == nil && img.Config != nil && img.Config.Labels[LabelRecipeDigest] == r.Digest {
			res.ID, res.Reused, res.Size = img.ID, true, img.Size
			if p := img.Config.Labels[LabelDebianPackages]; p != "" {
				res.Packages = strings.Fields(p)
			}
			res.Duration = time.Since(start)
			return res, nil
		}
		if err != nil && !cerrdefs.IsNotFound(err) {
			return res, daemon.Error(sandgate.CodeImageUnavailable, err, "inspect %s", r.Image)
		}
	}
	epoch := r.SourceDateEpoch
	if opts.SourceDateEpoch > 0 {
		epoch = opts.SourceDateEpoch
	}
	dir, err := os.MkdirTemp(opts.TempDir, "sandgate-image-")
	if err != nil {
		return res, err
	}
	defer os.RemoveAll(dir)

	layer, err := im.recipeLayer(ctx, r, opts, epoch, dir)
	if err != nil {
		return res, sandgate.WrapError(sandgate.CodeImageUnavailable, err, "build %s", r.Image)
	}
	res.Packages = packageVersions(layer.packages)
	cfg, err := recipeConfig(r, layer, epoch)
	if err != nil {
		return res, sandgate.WrapError(sandgate.CodeImageUnavailable, err, "build %s", r.Image)
	}
	id, err := im.loadLayer(ctx, r.Image, layer, cfg)
	if err != nil {
		return res, err
	}
	res.ID = id
	for _, c := range r.Checks {
		if err := im.runCheck(ctx, id, c); err != nil {
			if _, rmErr := im.api.ImageRemove(ctx, r.Image, image.RemoveOptions{PruneChildren: true}); rmErr != nil {
				im.log.Warn("remove image after failed check", "image", r.Image, "err", rmErr)
			}
			return res, sandgate.WrapError(sandgate.CodeImageUnavailable, err, "%s: check %q failed; the image was removed", r.Image, c.Name)
		}
	}
	img, err := im.api.ImageInspect(ctx, id)
	if err != nil {
		return res, daemon.Error(sandgate.CodeImageUnavailable, err, "inspect %s", r.Image)
	}
	res.Size = img.Size
	res.Duration = time.Since(start)
	return res, nil
}

// packagesFile is where the extract hook lists the packages; it is read
// from the stream and not put in the image.
const packagesFile = ".sandgate-packages"

// extractHook runs on the host, after the packages are extracted and
// while their .deb files are still there: it lists each one's name,
// version, architecture and source (packageFormat).
const extractHook = `for f in "$1"/var/cache/apt/archives/*.deb; do dpkg-deb --show --showformat='` + packageFormat + `' "$f"; done > "$1/` + packagesFile + `"`

// recipeLayer runs mmdebstrap and filters its tar stream into a layer file.
func (im *Images) recipeLayer(ctx context.Context, r Recipe, opts RecipeBuildOptions, epoch int64, dir string) (builtLayer, error) {
	prog := opts.Mmdebstrap
	if prog == "" {
		prog = "mmdebstrap"
	}
	if _, err := exec.LookPath(prog); err != nil {
		return builtLayer{}, fmt.Errorf("%s: %w (apt-get install mmdebstrap, or run deploy/bootstrap.sh)", prog, err)
	}
	sources := opts.Sources
	if len(sources) == 0 {
		sources = debianSources(r.Suite)
	}
	args := []string{
		"--variant=extract",
		"--format=tar",
		"--include=" + strings.Join(r.Packages, ","),
		"--extract-hook=" + extractHook,
		r.Suite, "-",
	}
	args = append(args, sources...)
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = append(os.Environ(), "SOURCE_DATE_EPOCH="+strconv.FormatInt(epoch, 10))
	var stderr tailBuffer
	cmd.Stderr = &stderr
	if opts.Progress != nil {
		cmd.Stderr = io.MultiWriter(&stderr, opts.Progress)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return builtLayer{}, err
	}
	if err := cmd.Start(); err != nil {
		return builtLayer{}, fmt.Errorf("start %s: %w", prog, err)
	}
	layer, ferr := writeLayer(out, r, epoch, dir)
	io.Copy(io.Discard, out)
	werr := cmd.Wait()
	if werr != nil {
		return builtLayer{}, fmt.Errorf("%s: %w: %s", prog, werr, strings.TrimSpace(stderr.String()))
	}
	if ferr != nil {
		return builtLayer{}, ferr
	}
	return layer, nil
}

// recipeConfig is the image configuration: the sandbox user, its
// workspace, the recipe's environment, and labels that record the recipe
// and every package (LabelPackages). Everything in it is fixed by the
// recipe and the layer, so the image ID is too.
func recipeConfig(r Recipe, l builtLayer, epoch int64) (ocispec.Image, error) {
	packages, err := packagesLabel(l.packages)
	if err != nil {
		return ocispec.Image{}, err
	}
	created := time.Unix(epoch, 0).UTC()
	env := []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/workspace"}
	keys := make([]string, 0, len(r.Env))
	for k := range r.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		env = append(env, k+"="+r.Env[k])
	}
	return ocispec.Image{
		Created:  &created,
		Platform: ocispec.Platform{Architecture: runtime.GOARCH, OS: "linux"},
		Config: ocispec.ImageConfig{
			User:       recipeUser,
			Env:        env,
			WorkingDir: "/workspace",
			Labels: map[string]string{
				sandboxLabel:                           sandboxLabelValue,
				"org.opencontainers.image.title":       "sandgate " + r.Name,
				"org.opencontainers.image.description": r.Description,
				"org.opencontainers.image.created":     created.Format(time.RFC3339),
				LabelRecipe:                            r.Name,
				LabelRecipeDigest:                      r.Digest,
				LabelDebianSuite:                       r.Suite,
				LabelDebianPackages:                    strings.Join(packageVersions(l.packages), " "),
				LabelPackages:                          packages,
			},
		},
		RootFS: ocispec.RootFS{Type: "layers", DiffIDs: []digest.Digest{l.diffID}},
		History: []ocispec.History{{
			Created:   &created,
			CreatedBy: fmt.Sprintf("sandgate image build %s (mmdebstrap --variant=extract %s: %s)", r.Name, r.Suite, strings.Join(r.Packages, " ")),
		}},
	}, nil
}

// loadLayer streams a `docker save` archive of one layer and cfg into the
// daemon, tagged ref, and returns the image ID.
func (im *Images) loadLayer(ctx context.Context, ref string, l builtLayer, cfg ocispec.Image) (string, error) {
	cfgJSON, err := json.Marshal(cfg)
	if err != nil {
		return "", err
	}
	cfgSum := sha256.Sum256(cfgJSON)
	cfgHex := hex.EncodeToString(cfgSum[:])
	layerName := l.diffID.Encoded() + "/layer.tar"
	manifest, err := json.Marshal([]map[string]any{{
		"Config": cfgHex + ".json", "RepoTags": []string{ref}, "Layers": []string{layerName},
	}})
	if err != nil {
		return "", err
	}
	pr, pw := io.Pipe()
	go func() {
		pw.CloseWithError(writeSaveArchive(pw, l, layerName, cfgHex+".json", cfgJSON, manifest))
	}()
	defer pr.Close()
	resp, err := im.api.ImageLoad(ctx, pr, client.ImageLoadWithQuiet(true))
	if err != nil {
		return "", daemon.Error(sandgate.CodeImageUnavailable, err, "load %s", ref)
	}
	defer resp.Body.Close()
	if err := daemon.ReadMessages(resp.Body, nil); err != nil {
		return "", sandgate.WrapError(sandgate.CodeImageUnavailable, err, "load %s", ref)
	}
	img, err := im.api.ImageInspect(ctx, ref)
	if err != nil {
		return "", daemon.Error(sandgate.CodeImageUnavailable, err, "inspect %s after load", ref)
	}
	if want := "sha256:" + cfgHex; img.ID != want {
		return "", sandgate.Errorf(sandgate.CodeImageUnavailable, "load %s: the daemon reports image %s, not %s", ref, img.ID, want)
	}
	return img.ID, nil
}

// writeSaveArchive writes the archive `docker load` reads: the layer,
// the configuration and manifest.json.
func writeSaveArchive(w io.Writer, l builtLayer, layerName, cfgName string, cfgJSON, manifest []byte) error {
	tw := tar.NewWriter(w)
	f, err := os.Open(l.file)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: path.Dir(layerName) + "/", Mode: 0o755}); err != nil {
		return err
	}
	if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: layerName, Mode: 0o644, Size: l.size}); err != nil {
		return err
	}
	if _, err := io.Copy(tw, f); err != nil {
		return err
	}
	for _, e := range []struct {
		name string
		body []byte
	}{{cfgName, cfgJSON}, {"manifest.json", manifest}} {
		if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: e.name, Mode: 0o644, Size: int64(len(e.body))}); err != nil {
			return err
		}
		if _, err := tw.Write(e.body); err != nil {
			return err
		}
	}
	return tw.Close()
}

// checkTimeout bounds one recipe check.
const checkTimeout = 2 * time.Minute

// maxCheckOutput bounds what is kept of a check's output.
const maxCheckOutput = 64 << 10

// runCheck runs c in a container of image id with the run path's
// hardening (the sandbox user, no network, read-only root, no
// capabilities, no new privileges, sandgate's seccomp profile) and fails
// unless it exits 0 with c.Expect in its stdout.
func (im *Images) runCheck(ctx context.Context, id string, c RecipeCheck) error {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	profile, err := seccomp.SecurityOpt()
	if err != nil {
		return fmt.Errorf("seccomp profile: %w", err)
	}
	init := true
	created, err := im.api.ContainerCreate(ctx, &container.Config{
		Image: id, Cmd: c.Command, User: recipeUser, Labels: map[string]string{"sandgate.image-check": c.Name},
	}, &container.HostConfig{
		NetworkMode: "none", ReadonlyRootfs: true, CapDrop: []string{"ALL"},
		SecurityOpt: []string{"no-new-privileges", profile}, Init: &init,
		Tmpfs:     map[string]string{"/tmp": "rw,nosuid,nodev,size=16m"},
		Resources: container.Resources{Memory: 256 << 20, MemorySwap: 256 << 20, PidsLimit: ptr(int64(64))},
	}, nil, nil, "")
	if err != nil {
		return daemon.Error(sandgate.CodeImageUnavailable, err, "create check container")
	}
	defer func() {
		rmCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := im.api.ContainerRemove(rmCtx, created.ID, container.RemoveOptions{Force: true}); err != nil {
			im.log.Warn("remove check container", "id", created.ID, "err", err)
		}
	}()
	if err := im.api.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		return daemon.Error(sandgate.CodeImageUnavailable, err, "start check container")
	}
	waitC, errC := im.api.ContainerWait(ctx, created.ID, container.WaitConditionNotRunning)
	var code int64
	select {
	case w := <-waitC:
		code = w.StatusCode
	case err := <-errC:
		return daemon.Error(sandgate.CodeImageUnavailable, err, "wait for check container")
	}
	logs, err := im.api.ContainerLogs(ctx, created.ID, container.LogsOptions{ShowStdout: true, ShowStderr: true})
	if err != nil {
		return daemon.Error(sandgate.CodeImageUnavailable, err, "check container logs")
	}
	defer logs.Close()
	var stdout, stderr tailBuffer
	if _, err := stdcopy.StdCopy(&stdout, &stderr, io.LimitReader(logs, 4*maxCheckOutput)); err != nil {
		return fmt.Errorf("read check output: %w", err)
	}
	if code != 0 {
		return fmt.Errorf("exit code %d: %s", code, strings.TrimSpace(stderr.String()+stdout.String()))
	}
	if c.Expect != "" && !strings.Contains(stdout.String(), c.Expect) {
		return fmt.Errorf("stdout %q does not contain %q", strings.TrimSpace(stdout.String()), c.Expect)
	}
	return nil
}

func ptr[T any](v T) *T { return &v }

// tailBuffer keeps the last maxCheckOutput bytes written to it.
type tailBuffer struct{ b bytes.Buffer }

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b.Write(p)
	if over := t.b.Len() - maxCheckOutput; over > 0 {
		t.b.Next(over)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return t.b.String() }

// BuiltImages lists the images sandgate built (the sandbox image and the
// recipe images, built here or loaded), sandbox images first. Errors are
// DOCKER-UNAVAILABLE or SBX-002.
func (im *Images) BuiltImages(ctx context.Context) ([]sandgate.BuiltImage, error) {
	list, err := im.ListImages(ctx, ListOptions{Label: sandboxLabel + "=" + sandboxLabelValue})
	if err != nil {
		return nil, err
	}
	out := make([]sandgate.BuiltImage, 0, len(list))
	for _, img := range list {
		if img.Dangling {
			continue
		}
		out = append(out, sandgate.BuiltImage{
			ID: img.ID, RepoTags: img.RepoTags, RepoDigests: img.RepoDigests, Pins: img.Pins,
			Recipe: img.labels[LabelRecipe], Packages: strings.Fields(img.labels[LabelDebianPackages]), Size: img.Size,
		})
	}
	return out, nil
}

var _ sandgate.ImageCatalog = (*Images)(nil)
