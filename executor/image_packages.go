package executor

import (
	"context"

	"github.com/docker/docker/api/types/image"

	"github.com/sandgate/sandgate"
)

// maxPackageDigests bounds the resolver's memory of package lists: past
// it, the memory starts over (the next resolve of each image asks again).
const maxPackageDigests = 4096

// rememberPackages keeps the digest of the package list img carries (""
// when it has none) under its ID. An image ID is the digest of the
// configuration that holds the list, so what is kept for an ID never
// goes stale, whatever happens to the tags.
func (rs *resolver) rememberPackages(img image.InspectResponse) {
	digest := ""
	if img.Config != nil {
		if label, ok := img.Config.Labels[sandgate.PackagesLabel]; ok {
			digest = sandgate.PackageListDigest(label)
		}
	}
	rs.mu.Lock()
	defer rs.mu.Unlock()
	if len(rs.packages) >= maxPackageDigests {
		rs.packages = map[string]string{}
	}
	rs.packages[img.ID] = digest
}

// packagesDigest is the digest of the package list image id carries, as
// image.resolved records it: "" when it has none, or when the daemon
// cannot be asked (the run goes on; the event then names no list).
func (rs *resolver) packagesDigest(ctx context.Context, t *trail, id string) string {
	rs.mu.Lock()
	d, ok := rs.packages[id]
	rs.mu.Unlock()
	if ok {
		return d
	}
	var img image.InspectResponse
	err := rs.calls.do(ctx, t, "inspect image", func(ctx context.Context) error {
		var err error
		img, err = rs.docker.ImageInspect(ctx, id)
		return err
	})
	if err != nil || img.ID != id {
		return ""
	}
	rs.rememberPackages(img)
	rs.mu.Lock()
	defer rs.mu.Unlock()
	return rs.packages[id]
}
