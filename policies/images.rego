# Images only from the repositories data.sandgate.config.allowed_images
# names, pinned by digest when data.sandgate.config.require_digest is true,
# and pulled only from a registry data.sandgate.config.pull_registries
# names.
#
# An image is a reference as Docker reads it:
# [registry/]repository[:tag][@sha256:digest], the repository in lower
# case, the registry a host with a "." or a port, or localhost. A request
# whose image is not one is denied before anything else is judged of it.
#
# Images are compared by repository as the registry knows it: Docker Hub's
# spellings are folded ("busybox", "library/busybox" and
# "docker.io/library/busybox" are one repository; "sandgate/sandbox" and
# "index.docker.io/sandgate/sandbox" another). An allowed image is an exact
# repository, or a glob ("*" stays within one path segment, "**" crosses
# them) within a registry it names by host: a glob within Docker Hub would
# admit repositories of a namespace sandgate does not own (the bundle's
# tests refuse such data).
package sandgate.admission

import data.sandgate.config

# _reference is the image's [name, tag, digest] ("" for what it leaves
# out); undefined when the image is not a reference Docker would read.
_reference := [name, tag, digest] if {
	[[_, name, tag, digest]] := regex.find_all_string_submatch_n(
		`^((?:(?:localhost|[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)+)(?::[0-9]+)?/|[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?:[0-9]+/)?[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*)(?::([A-Za-z0-9_][A-Za-z0-9_.-]{0,127}))?(?:@(sha256:[a-f0-9]{64}))?$`,
		input.request.image, 1,
	)
	count(name) <= 255
}

finding contains {
	"rule": "image_reference",
	"message": sprintf("image %q is not an image reference: [registry/]repository[:tag][@sha256:digest], with a lower-case repository of at most 255 characters", [input.request.image]),
	"controls": ["CIS-5.28"],
	"action": "deny",
} if {
	not _reference
}

finding contains {
	"rule": "image_allowlist",
	"message": sprintf("image %q is not from an allowed repository (%s)", [input.request.image, concat(", ", config.allowed_images)]),
	"controls": ["CIS-5.28"],
	"action": "deny",
} if {
	[name, _, _] := _reference
	not _allowed(name)
}

# _allowed: the image's repository matches the glob of the allowed ones,
# both spelt as the registry knows them. OPA compiles each glob once.
_allowed(name) if {
	pattern := concat("", ["{", concat(",", [_repository(image) | some image in config.allowed_images]), "}"])
	glob.match(pattern, ["/"], _repository(name))
}

# _repository is registry/path: the registry Docker would ask for name,
# with Docker Hub's spellings folded, and the path it asks it for.
_repository(name) := concat("/", [registry, _hub_path(registry, substring(name, i + 1, -1))]) if {
	i := indexof(name, "/")
	i > 0
	_registry_host(substring(name, 0, i))
	registry := _hub(substring(name, 0, i))
} else := concat("/", ["docker.io", _hub_path("docker.io", name)])

_registry_host(host) if contains(host, ".")

_registry_host(host) if contains(host, ":")

_registry_host("localhost")

_hub("index.docker.io") := "docker.io"

_hub(host) := host if host != "index.docker.io"

# Docker Hub's official images live under library/.
_hub_path(registry, path) := concat("/", ["library", path]) if {
	registry == "docker.io"
	not contains(path, "/")
} else := path

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

# A pull policy other than "never" may send the executor to the image's
# registry: only to one the data names. Air-gapped mode turns the pull
# policy into "never" (network.rego).
finding contains {
	"rule": "image_pull_registry",
	"message": sprintf("pull_policy %q may pull image %q from %s, which data.sandgate.config.pull_registries does not name (%s); use pull_policy never and load the image (sandgate image load)", [input.request.pull_policy, input.request.image, registry, concat(", ", config.pull_registries)]),
	"controls": ["CIS-5.28"],
	"action": "deny",
} if {
	input.request.pull_policy != "never"
	[name, _, _] := _reference
	registry := split(_repository(name), "/")[0]
	not registry in {_hub(r) | some r in config.pull_registries}
}
