# Images only from the repositories data.sandgate.config.allowed_images
# names (glob patterns; "*" stays within one path segment), pinned by digest
# when data.sandgate.config.require_digest is true. Docker Hub spellings are
# folded: "docker.io/library/busybox" is "busybox" and
# "docker.io/sandgate/sandbox" is "sandgate/sandbox".
package sandgate.admission

import data.sandgate.config

_image := object.get(input.request, "image", "")

# _image_parts splits "name[:tag][@digest]".
_image_parts := split(_image, "@")

_image_digest := _image_parts[1] if count(_image_parts) == 2

_image_repository := _fold_hub(lower(repo)) if {
	segments := split(_image_parts[0], "/")
	n := count(segments)
	last := split(segments[n - 1], ":")[0]
	repo := concat("/", array.concat(array.slice(segments, 0, n - 1), [last]))
}

_fold_hub(r) := _fold_library(trim_prefix(r, "index.docker.io/")) if {
	startswith(r, "index.docker.io/")
} else := _fold_library(trim_prefix(r, "docker.io/")) if {
	startswith(r, "docker.io/")
} else := r

_fold_library(r) := trim_prefix(r, "library/")

finding contains {
	"rule": "image_allowlist",
	"message": sprintf("image %q is not from an allowed repository (%s)", [_image, concat(", ", config.allowed_images)]),
	"controls": ["CIS-5.28"],
} if {
	not _image_allowed
}

_image_allowed if {
	some pattern in config.allowed_images
	glob.match(pattern, ["/"], _image_repository)
}

finding contains {
	"rule": "image_digest",
	"message": sprintf("image %q must be pinned by digest (name@sha256:…)", [_image]),
	"controls": ["CIS-5.28"],
} if {
	config.require_digest == true
	not _image_pinned
}

_image_pinned if regex.match(`^sha256:[a-f0-9]{64}$`, _image_digest)

finding contains {
	"rule": "image_digest",
	"message": sprintf("image %q has a malformed digest", [_image]),
	"controls": ["CIS-5.28"],
} if {
	count(_image_parts) > 2
}
