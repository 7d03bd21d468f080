package executor

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/internal/daemon"
	"github.com/sandgate/sandgate/imagesig"
)

// resolveAPI is the Docker calls that resolve a run's image.
type resolveAPI interface {
	ImageInspect(ctx context.Context, ref string, opts ...client.ImageInspectOption) (image.InspectResponse, error)
	ImagePull(ctx context.Context, ref string, opts image.PullOptions) (io.ReadCloser, error)
}

// resolver finds the image a run names on the daemon, pulling it only
// when the run may, and remembers what it found for ImageCacheTTL.
type resolver struct {
	docker resolveAPI
	calls  calls
	ttl    time.Duration
	now    sandgate.Clock
	// pullTimeout bounds one attempt of a pull (Config.PullTimeout), and
	// pullEvery is the least time between two of its progress events.
	pullTimeout, pullEvery time.Duration
	// signatures and keys check the images a policy requires signed
	// (image_signatures.go).
	signatures imagesig.Store
	keys       *imagesig.Keys

	mu    sync.Mutex
	cache map[string]cachedImage
	// packages are the digests of the package lists images carry, by
	// image ID (image_packages.go).
	packages map[string]string
}

// cachedImage is a resolved image reference.
type cachedImage struct {
	id string
	at time.Time
}

func newResolver(cfg Config, d resolveAPI, c calls) *resolver {
	return &resolver{
		docker: d, calls: c, ttl: cfg.ImageCacheTTL, now: cfg.Clock, cache: map[string]cachedImage{}, packages: map[string]string{},
		pullTimeout: cfg.PullTimeout, pullEvery: pullProgressEvery,
		signatures: cfg.ImageSignatures, keys: cfg.ImageKeys,
	}
}

// resolveImage makes sure the job's image is present, pulling it only when
// the pull policy allows and the job is not air-gapped, and returns its ID.
// It returns SBX-002 when the image is not there and may not be fetched,
// or could not be fetched, or is not signed as the run's policy requires.
func (rs *resolver) resolve(ctx context.Context, t *trail, job sandgate.Job, ref string) (string, error) {
	policy := job.Spec.PullPolicy
	if policy == "" {
		policy = sandgate.PullNever
	}
	mayPull := policy != sandgate.PullNever && !job.AirGapped
	registry, registryOK := pullRegistry(ref, job.Enforcement.PullRegistries)
	var resolved func(id string, pulled, cached bool) (string, error)
	unavailable := func(err error, format string, args ...any) (string, error) {
		reason := fmt.Sprintf(format, args...)
		t.imageUnavailable(ref, reason, map[string]any{"pull_policy": string(policy), "air_gapped": job.AirGapped})
		if err == nil {
			return "", sandgate.Errorf(sandgate.CodeImageUnavailable, "image %s: %s", ref, reason)
		}
		return "", daemon.Error(sandgate.CodeImageUnavailable, err, "image %s: %s", ref, reason)
	}
	resolved = func(id string, pulled, cached bool) (string, error) {
		signer, refused := rs.signer(ref, id, job.Enforcement.ImageSigners)
		if refused != "" {
			return unavailable(nil, "%s", refused)
		}
		t.imageResolved(ref, id, signer, rs.packagesDigest(ctx, t, id), pulled, cached, policy)
		return id, nil
	}

	if policy == sandgate.PullAlways && mayPull && !registryOK {
		return unavailable(nil, "pull policy always, but registry %s is not one the policy lets images be pulled from (data.sandgate.config.pull_registries)", registry)
	}
	if policy == sandgate.PullAlways && mayPull {
		if err := rs.pull(ctx, t, ref); err != nil {
			return unavailable(err, "pull failed")
		}
		id, err := rs.inspect(ctx, t, ref)
		if err != nil {
			return unavailable(err, "not present after pull")
		}
		return resolved(id, true, false)
	}
	// An image whose signature the policy requires is looked up afresh:
	// a tag moved since the last run must not ride on the old answer.
	if id, ok := rs.cached(ref); ok && !signatureRequired(job, ref) {
		return resolved(id, false, true)
	}
	id, err := rs.inspect(ctx, t, ref)
	switch {
	case err == nil:
		return resolved(id, false, false)
	case !cerrdefs.IsNotFound(err):
		return unavailable(err, "inspect failed")
	}
	if pinned, ok, perr := rs.localPin(ctx, t, ref); perr != nil {
		return unavailable(perr, "inspect failed")
	} else if ok {
		return resolved(pinned, false, false)
	}
	if !mayPull {
		why := "not present, and pull policy never forbids pulling it"
		if job.AirGapped {
			why = "not present, and nothing is pulled in air-gapped mode; load it with `sandgate image load`"
		}
		return unavailable(nil, "%s", why)
	}
	if !registryOK {
		return unavailable(nil, "not present, and registry %s is not one the policy lets images be pulled from (data.sandgate.config.pull_registries)", registry)
	}
	if err := rs.pull(ctx, t, ref); err != nil {
		return unavailable(err, "not present and the pull failed")
	}
	if id, err = rs.inspect(ctx, t, ref); err != nil {
		return unavailable(err, "not present after pull")
	}
	return resolved(id, true, false)
}

// pullRegistry is the registry a pull of ref would go to (docker.io for
// Docker Hub's short names) and whether it is one of allowed: sandgate
// pulls only from registries the policy names, never from a public
// namespace it does not own because a short name happened to match.
func pullRegistry(ref string, allowed []string) (string, bool) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "(unparsable reference)", false
	}
	registry := reference.Domain(named)
	for _, a := range allowed {
		if strings.EqualFold(a, registry) {
			return registry, true
		}
	}
	return registry, false
}

// inspect asks the daemon for the image's ID and caches it.
func (rs *resolver) inspect(ctx context.Context, t *trail, ref string) (string, error) {
	var id string
	err := rs.calls.do(ctx, t, "inspect image", func(ctx context.Context) error {
		img, err := rs.docker.ImageInspect(ctx, ref)
		id = img.ID
		if err == nil {
			rs.rememberPackages(img)
		}
		return err
	})
	if err != nil {
		return "", err
	}
	if rs.ttl > 0 {
		rs.mu.Lock()
		rs.cache[ref] = cachedImage{id: id, at: rs.now()}
		rs.mu.Unlock()
	}
	return id, nil
}

func (rs *resolver) cached(ref string) (string, bool) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	c, ok := rs.cache[ref]
	if !ok || rs.now().Sub(c.at) > rs.ttl {
		return "", false
	}
	return c.id, true
}

// forget drops ref from the cache: a create found it gone.
func (rs *resolver) forget(ref string) {
	rs.mu.Lock()
	delete(rs.cache, ref)
	rs.mu.Unlock()
}

// localPin returns the image ID a reference pinned as repository@ID names,
// when the daemon has no registry digest of that name but has an image
// with that ID tagged in that repository: images built or loaded here have
// no registry digest, and their ID pins their content as well. ok is false
// when ref is not such a pin.
func (rs *resolver) localPin(ctx context.Context, t *trail, ref string) (string, bool, error) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", false, nil
	}
	canonical, isCanonical := named.(reference.Canonical)
	if !isCanonical {
		return "", false, nil
	}
	id := canonical.Digest().String()
	var img image.InspectResponse
	err = rs.calls.do(ctx, t, "inspect image", func(ctx context.Context) error {
		var err error
		img, err = rs.docker.ImageInspect(ctx, id)
		return err
	})
	if cerrdefs.IsNotFound(err) {
		return "", false, nil
	}
	if err != nil {
		return "", false, err
	}
	if img.ID != id {
		return "", false, nil
	}
	rs.rememberPackages(img)
	for _, t := range img.RepoTags {
		if tn, err := reference.ParseNormalizedNamed(t); err == nil && tn.Name() == named.Name() {
			return id, true, nil
		}
	}
	return "", false, nil
}

// localPinID returns the image ID when ref is repository@ID (the form
// ImageInfo.Pins gives for local images) and id is that ID: the container
// must then be created from the ID, as the daemon resolves name@digest
// only against registry digests.
func localPinID(ref, id string) (string, bool) {
	named, err := reference.ParseNormalizedNamed(ref)
	if err != nil {
		return "", false
	}
	canonical, ok := named.(reference.Canonical)
	if !ok || canonical.Digest().String() != id {
		return "", false
	}
	return id, true
}
