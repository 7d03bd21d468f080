# Images only from the repositories (or exact repository:tag names)
# data.sandgate.config.allowed_images names, pinned by digest when
# data.sandgate.config.require_digest is true or when
# data.sandgate.config.image_digests lists the digests of that name, and
# pulled only from a registry data.sandgate.config.pull_registries names.
#
# An image is a reference as Docker reads it:
# [registry/]repository[:tag][@sha256:digest], the repository in lower
# case, the registry a host with a "." or a port, or localhost. A request
# whose image is not one is denied before anything else is judged of it.
#
# Images are compared by repository, Docker Hub's in their shortest
# spelling ("busybox", "library/busybox" and "docker.io/library/busybox"
# are all "busybox"; "index.docker.io/sandgate/sandbox" is
# "sandgate/sandbox", and "library/sandgate/sandbox" is not). An allowed
# image is an exact repository spelt so, or a glob ("*" stays within one
# path segment, "**" crosses them) within a registry it names by host, or
# an exact repository:tag ("sandgate/python:3", which admits that tag
# alone; an image without a tag is ":latest"): a
# glob within Docker Hub would admit repositories of a namespace sandgate
# does not own (the bundle's tests refuse such data).
package sandgate.admission

import data.sandgate.config

# _image is the image's registry, its name as the allowlist spells it,
# the name with its tag ("latest" when it has none) and its digest ("" when
# it has none):
# the shortest of Docker's spellings ("docker.io/library/busybox",
# "index.docker.io/busybox" and "library/busybox" are all "busybox";
# "docker.io/sandgate/sandbox" is "sandgate/sandbox"); undefined when the
# image is not a reference Docker would read. Built-ins only: a function
# call costs more.
_image := {"registry": registry, "name": name, "tagged": concat(":", [name, object.get({"": "latest"}, tag, tag)]), "digest": digest} if {
	[[_, domain, path, tag, digest]] := regex.find_all_string_submatch_n(
		`^(?:((?:localhost|[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)+)(?::[0-9]+)?|[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?:[0-9]+)/)?([a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)(?::([A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(?:@(sha256:[a-f0-9]{64}))?$`,
		input.request.image, 1,
	)
	count(domain) + count(path) < 255
	registry := object.get({"": "docker.io", "index.docker.io": "docker.io"}, domain, domain)
	name := regex.replace(concat("/", [registry, path]), `^docker\.io/(?:library/([^/]+)$)?`, "$1")
}

# METADATA
# title: Image reference
# description: >-
#   The image is a reference Docker reads:
#   [registry/]repository[:tag][@sha256:digest], the repository in lower
#   case. Other rules judge the image by it.
# custom:
#   severity: low
#   controls: [CIS-5.28]
finding contains {
	"rule": "image_reference",
	"message": sprintf("image %q is not an image reference: [registry/]repository[:tag][@sha256:digest], with a lower-case repository of at most 255 characters", [input.request.image]),
	"action": "deny",
} if {
	not _default_image
	not _image
}

# _default_image: the image is the data's default, which the bundle's own
# tests hold to every rule of this file (test_data_default_image_is_allowed):
# the common case, decided without parsing the reference.
_default_image if input.request.image == config.defaults.image

# METADATA
# title: Images from allowed repositories
# description: >-
#   The image's repository, in Docker Hub's shortest spelling, matches an
#   entry of data.sandgate.config.allowed_images: an exact repository, an
#   exact repository:tag, or a glob within a registry named by host.
# custom:
#   severity: high
#   controls: [CIS-5.28]
#   fix: 'use an image from allowed_images (GET /v1/config lists them)'
finding contains {
	"rule": "image_allowlist",
	"message": sprintf("image %q is not from an allowed repository (%s)", [input.request.image, concat(", ", config.allowed_images)]),
	"action": "deny",
} if {
	not _default_image
	image := _image
	not _allowed(image)
}

_allowed(image) if glob.match(concat("", ["{", concat(",", config.allowed_images), "}"]), ["/"], image.name)

_allowed(image) if image.tagged in config.allowed_images

# METADATA
# title: Image pinned by digest
# description: >-
#   When data.sandgate.config.require_digest is true, the image is pinned
#   by @sha256: digest, so that what runs is what was vetted.
# custom:
#   severity: medium
#   controls: [CIS-5.28]
finding contains {
	"rule": "image_digest",
	"message": sprintf("image %q must be pinned by digest (name@sha256:…)", [input.request.image]),
	"action": "deny",
} if {
	config.require_digest == true
	not _image_pinned
}

_image_pinned if regex.match(`@sha256:[a-f0-9]{64}$`, input.request.image)

# METADATA
# title: Image pinned to a listed digest
# description: >-
#   When data.sandgate.config.image_digests has an entry for the image's
#   repository or repository:tag, the image is pinned by @sha256: to one
#   of the digests listed there: for an image built or loaded here, its
#   image ID (sandgate image list shows the pinned reference).
# custom:
#   severity: high
#   controls: [CIS-5.28]
finding contains {
	"rule": "image_digest_listed",
	"message": sprintf("image %q must be pinned to one of the digests data.sandgate.config.image_digests lists for %s (%s)", [input.request.image, key, concat(", ", config.image_digests[key])]),
	"action": "deny",
} if {
	# Most bundles pin nothing: the reference is parsed only when there
	# is something to look it up in (parsing it is most of a decision's
	# cost otherwise, for every request).
	count(config.image_digests) > 0
	image := _image
	some key in [image.name, image.tagged]
	listed := config.image_digests[key]
	not image.digest in listed
}

# A pull policy other than "never" may send the executor to the image's
# registry: only to one the data names. Air-gapped mode turns the pull
# policy into "never" (network.rego).
# METADATA
# title: Pulls only from named registries
# description: >-
#   A pull policy other than never is admitted only for an image whose
#   registry data.sandgate.config.pull_registries names (Docker Hub is
#   docker.io).
# custom:
#   severity: medium
#   controls: [CIS-5.28]
finding contains {
	"rule": "image_pull_registry",
	"message": sprintf("pull_policy %q may pull image %q from %s, which data.sandgate.config.pull_registries does not name (%s); use pull_policy never and load the image (sandgate image load)", [input.request.pull_policy, input.request.image, image.registry, concat(", ", config.pull_registries)]),
	"action": "deny",
} if {
	input.request.pull_policy != "never"
	image := _image
	not image.registry in {object.get({"index.docker.io": "docker.io"}, r, r) | some r in config.pull_registries}
}
