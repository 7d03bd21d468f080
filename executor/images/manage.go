package images

import (
	"context"
	"fmt"
	"sort"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/distribution/reference"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/filters"
	"github.com/docker/docker/api/types/image"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/internal/daemon"
)

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
