# Images only from the repositories data.sandgate.config.allowed_images
# names (glob patterns; "*" stays within one path segment, "**" crosses
# them), pinned by digest when data.sandgate.config.require_digest is true.
# Docker Hub spellings are folded: "docker.io/library/busybox" is "busybox"
# and "docker.io/sandgate/sandbox" is "sandgate/sandbox". A registry port
# ("registry.local:5000/team/tool:1") is not a tag.
package sandgate.admission

import data.sandgate.config

finding contains {
	"rule": "image_allowlist",
	"message": sprintf("image %q is not from an allowed repository (%s)", [input.request.image, concat(", ", config.allowed_images)]),
	"controls": ["CIS-5.28"],
	"action": "deny",
} if {
	not _image_allowed
}

# _image_allowed: the image matches the glob of the references the
# allowlist admits: an allowed repository, optionally spelt with Docker
# Hub's prefixes, with any tag and digest. OPA compiles each glob once.
_image_allowed if {
	pattern := concat("", [
		"{,docker.io/,index.docker.io/}{,library/}{",
		concat(",", config.allowed_images),
		"}{,:*}{,@*}",
	])
	glob.match(pattern, ["/"], input.request.image)
}

finding contains {
	"rule": "image_digest",
	"message": sprintf("image %q must be pinned by digest (name@sha256:…)", [input.request.image]),
	"controls": ["CIS-5.28"],
	"action": "deny",
} if {
	config.require_digest == true
	not _image_pinned
}

_image_pinned if regex.match(`@sha256:[a-f0-9]{64}$`, input.request.image)
