package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/image"

	"github.com/sandgate/sandgate"
)

// cachedImage is a resolved image reference.
type cachedImage struct {
	id string
	at time.Time
}

// resolveImage makes sure the job's image is present, pulling it only when
// the pull policy allows and the job is not air-gapped, and returns its ID.
// It returns SBX-002 when the image is not there and may not be fetched,
// or could not be fetched.
func (e *Executor) resolveImage(ctx context.Context, r *run, ref string) (string, error) {
	policy := r.job.Spec.PullPolicy
	if policy == "" {
		policy = sandgate.PullNever
	}
	mayPull := policy != sandgate.PullNever && !r.job.AirGapped
	registry, registryOK := pullRegistry(ref, r.job.Enforcement.PullRegistries)
	var resolved func(id string, pulled, cached bool) (string, error)
	unavailable := func(err error, format string, args ...any) (string, error) {
		reason := fmt.Sprintf(format, args...)
		e.emit(r, sandgate.EventImageUnavailable, map[string]any{"image": ref, "reason": reason, "pull_policy": string(policy), "air_gapped": r.job.AirGapped})
		if err == nil {
			return "", sandgate.Errorf(sandgate.CodeImageUnavailable, "image %s: %s", ref, reason)
		}
		return "", dockerError(sandgate.CodeImageUnavailable, err, "image %s: %s", ref, reason)
	}
	resolved = func(id string, pulled, cached bool) (string, error) {
		signer, refused := e.imageSigner(ref, id, r.job.Enforcement.ImageSigners)
		if refused != "" {
			return unavailable(nil, "%s", refused)
		}
		payload := map[string]any{"image": ref, "image_id": id, "pulled": pulled, "cached": cached, "pull_policy": string(policy)}
		if signer != "" {
			payload["signer"] = signer
		}
		e.emit(r, sandgate.EventImageResolved, payload)
		return id, nil
	}

	if policy == sandgate.PullAlways && mayPull && !registryOK {
		return unavailable(nil, "pull policy always, but registry %s is not one the policy lets images be pulled from (data.sandgate.config.pull_registries)", registry)
	}
	if policy == sandgate.PullAlways && mayPull {
		if err := e.pull(ctx, r, ref); err != nil {
			return unavailable(err, "pull failed")
		}
		id, err := e.inspectImage(ctx, r, ref)
		if err != nil {
			return unavailable(err, "not present after pull")
		}
		return resolved(id, true, false)
	}
	// An image whose signature the policy requires is looked up afresh:
	// a tag moved since the last run must not ride on the old answer.
	if id, ok := e.cachedImageID(ref); ok && !signatureRequired(r, ref) {
		return resolved(id, false, true)
	}
	id, err := e.inspectImage(ctx, r, ref)
	switch {
	case err == nil:
		return resolved(id, false, false)
	case !cerrdefs.IsNotFound(err):
		return unavailable(err, "inspect failed")
	}
	if pinned, ok, perr := e.localPin(ctx, r, ref); perr != nil {
		return unavailable(perr, "inspect failed")
	} else if ok {
		return resolved(pinned, false, false)
	}
	if !mayPull {
		why := "not present, and pull policy never forbids pulling it"
		if r.job.AirGapped {
			why = "not present, and nothing is pulled in air-gapped mode; load it with `sandgate image load`"
		}
		return unavailable(nil, "%s", why)
	}
	if !registryOK {
		return unavailable(nil, "not present, and registry %s is not one the policy lets images be pulled from (data.sandgate.config.pull_registries)", registry)
	}
	if err := e.pull(ctx, r, ref); err != nil {
		return unavailable(err, "not present and the pull failed")
	}
	if id, err = e.inspectImage(ctx, r, ref); err != nil {
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

// inspectImage asks the daemon for the image's ID and caches it.
func (e *Executor) inspectImage(ctx context.Context, r *run, ref string) (string, error) {
	var id string
	err := e.call(ctx, r, "inspect image", func(ctx context.Context) error {
		img, err := e.docker.ImageInspect(ctx, ref)
		id = img.ID
		return err
	})
	if err != nil {
		return "", err
	}
	if e.cfg.ImageCacheTTL > 0 {
		e.imgMu.Lock()
		e.imgCache[ref] = cachedImage{id: id, at: e.now()}
		e.imgMu.Unlock()
	}
	return id, nil
}

func (e *Executor) cachedImageID(ref string) (string, bool) {
	e.imgMu.Lock()
	defer e.imgMu.Unlock()
	c, ok := e.imgCache[ref]
	if !ok || e.now().Sub(c.at) > e.cfg.ImageCacheTTL {
		return "", false
	}
	return c.id, true
}

func (e *Executor) forgetImage(ref string) {
	e.imgMu.Lock()
	delete(e.imgCache, ref)
	e.imgMu.Unlock()
}

// pullTimeout bounds one pull attempt.
const pullTimeout = 15 * time.Minute

// pull pulls ref and reads the progress stream to its end, where the
// daemon reports a failed pull.
func (e *Executor) pull(ctx context.Context, r *run, ref string) error {
	e.forgetImage(ref)
	return e.callWith(ctx, r, "pull", pullTimeout, func(ctx context.Context) error {
		body, err := e.docker.ImagePull(ctx, ref, image.PullOptions{})
		if err != nil {
			return err
		}
		defer body.Close()
		return readJSONMessages(body, nil)
	})
}

// jsonMessage is one line of the daemon's build, pull and load progress.
type jsonMessage struct {
	Stream      string `json:"stream"`
	Status      string `json:"status"`
	Error       string `json:"error"`
	ErrorDetail *struct {
		Message string `json:"message"`
	} `json:"errorDetail"`
	Aux json.RawMessage `json:"aux"`
}

// streamError is a failure the daemon reported inside a progress stream.
type streamError struct{ msg string }

func (e *streamError) Error() string { return e.msg }

// readJSONMessages reads a progress stream to its end, calling each for
// every message, and returns the first error the daemon reported in it.
func readJSONMessages(r io.Reader, each func(jsonMessage)) error {
	dec := json.NewDecoder(r)
	for {
		var m jsonMessage
		if err := dec.Decode(&m); errors.Is(err, io.EOF) {
			return nil
		} else if err != nil {
			return fmt.Errorf("read progress stream: %w", err)
		}
		if m.ErrorDetail != nil && m.ErrorDetail.Message != "" {
			return &streamError{m.ErrorDetail.Message}
		}
		if m.Error != "" {
			return &streamError{m.Error}
		}
		if each != nil {
			each(m)
		}
	}
}

// localPin returns the image ID a reference pinned as repository@ID names,
// when the daemon has no registry digest of that name but has an image
// with that ID tagged in that repository: images built or loaded here have
// no registry digest, and their ID pins their content as well. ok is false
// when ref is not such a pin.
func (e *Executor) localPin(ctx context.Context, r *run, ref string) (string, bool, error) {
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
	err = e.call(ctx, r, "inspect image", func(ctx context.Context) error {
		var err error
		img, err = e.docker.ImageInspect(ctx, id)
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
