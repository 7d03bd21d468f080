package sandgate.admission_test

import data.sandgate.admission
import data.sandgate.config
import data.sandgate.fixtures

digest := "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

test_allowed_images_are_allowed if {
	every image in [
		"sandgate/sandbox:latest",
		"sandgate/sandbox",
		"docker.io/sandgate/sandbox:1.2",
		"index.docker.io/sandgate/sandbox:1.2",
		concat("@", ["sandgate/sandbox", digest]),
		concat("@", ["sandgate/sandbox:1.2", digest]),
	] {
		d := fixtures.check with input as fixtures.input_with({"image": image})
			with config.require_digest as false
		d.allow == true
	}
}

test_other_images_are_denied if {
	every image in [
		"busybox",
		"docker.io/library/alpine:3",
		"evil.example/sandgate/sandbox:latest",
		"sandgate-sandbox",
	] {
		d := fixtures.check with input as fixtures.input_with({"image": image})
		fixtures.denied_by(d, "image_allowlist")
	}
}

test_library_images_fold_when_allowed if {
	d := fixtures.check with input as fixtures.input_with({"image": "docker.io/library/busybox:1.36"})
		with config.allowed_images as ["busybox"]
		with config.require_digest as false
	d.allow == true
}

test_registry_port_is_not_a_tag if {
	d := fixtures.check with input as fixtures.input_with({"image": "registry.local:5000/team/tool:1"})
		with config.allowed_images as ["registry.local:5000/team/*"]
		with config.require_digest as false
	d.allow == true
}

test_digest_required_and_present_is_allowed if {
	d := fixtures.check with input as fixtures.input_with({"image": concat("@", ["sandgate/sandbox:1", digest])})
		with config.require_digest as true
	d.allow == true
}

test_digest_required_and_missing_is_denied if {
	every image in ["sandgate/sandbox:latest", "sandgate/sandbox@sha256:abc"] {
		d := fixtures.check with input as fixtures.input_with({"image": image})
			with config.require_digest as true
		fixtures.denied_by(d, "image_digest")
	}
}

# The allowlist names exact repositories, or globs in a registry it names:
# "sandgate/*" would admit any repository of a Docker Hub namespace that
# sandgate does not own.
test_other_repositories_of_a_namespace_are_denied if {
	every image in [
		"sandgate/python:3.12", "sandgate/python", "sandgate/python:latest", "sandgate/node:22", "sandgate/nodejs:18",
		"sandgate/toolchain", "sandgate/toolchain:2",
		"sandgate/sandbox2", "library/sandgate/sandbox", "docker.io/library/sandgate/sandbox:latest",
	] {
		d := fixtures.check with input as fixtures.input_with({"image": image})
		fixtures.denied_by(d, "image_allowlist")
	}
}

test_malformed_references_are_denied if {
	every image in [
		"sandgate/sandbox:", "sandgate/sandbox:latest:x", "SANDGATE/sandbox", "sandgate//sandbox", "sandgate/sandbox/../../x",
		"sandgate/sandbox@sha256:abc", "sandgate/sandbox@", "sandgate/sandbox:-x", "/sandgate/sandbox",
		"sandgate/sandbox:latest@sha256:0123", concat("", ["sandgate/", concat("", ["a" | some _ in numbers.range(1, 250)])]),
	] {
		d := fixtures.check with input as fixtures.input_with({"image": image})
		fixtures.denied_by(d, "image_reference")
		not fixtures.denied_by(d, "image_allowlist")
	}
}

test_pull_only_from_registries_the_data_names if {
	every policy in ["always", "if-not-present"] {
		d := fixtures.check with input as fixtures.input_with({"image": "sandgate/sandbox:latest", "pull_policy": policy})
		fixtures.denied_by(d, "image_pull_registry")
		some v in d.violations
		v.rule == "image_pull_registry"
		contains(v.message, "docker.io")
	}
	d := fixtures.check with input as fixtures.input_with({"image": "sandgate/sandbox:latest", "pull_policy": "always"})
		with config.pull_registries as ["registry.local:5000"]
	fixtures.denied_by(d, "image_pull_registry")
	d2 := fixtures.check with input as fixtures.input_with({"image": "registry.local:5000/sandgate/sandbox:1", "pull_policy": "always"})
		with config.allowed_images as ["registry.local:5000/sandgate/*"]
		with config.pull_registries as ["registry.local:5000"]
		with config.require_digest as false
	d2.allow == true
	d3 := fixtures.check with input as fixtures.input_with({"image": "index.docker.io/sandgate/sandbox", "pull_policy": "always"})
		with config.pull_registries as ["docker.io"]
		with config.require_digest as false
	d3.allow == true
	d4 := fixtures.check with input as fixtures.input_with({"image": "sandgate/sandbox:latest", "pull_policy": "never"})
		with config.require_digest as false
	d4.allow == true
}

# The language images are admitted by exact repository:tag: the tag the
# recipe builds, with or without a digest, and no other tag.
test_language_images_are_allowed_by_exact_name if {
	every image in [
		"sandgate/python:3", "docker.io/sandgate/python:3", concat("@", ["sandgate/python:3", digest]),
		"sandgate/node:18", "index.docker.io/sandgate/node:18", concat("@", ["sandgate/node:18", digest]),
		"sandgate/node:20", "sandgate/toolchain:1", concat("@", ["sandgate/toolchain:1", digest]),
	] {
		d := fixtures.check with input as fixtures.input_with({"image": image})
			with config.require_digest as false
		d.allow == true
	}
}

test_exact_tag_entries_hold_latest_for_untagged if {
	d := fixtures.check with input as fixtures.input_with({"image": "registry.local:5000/tool"})
		with config.allowed_images as ["registry.local:5000/tool:latest"]
		with config.require_digest as false
	d.allow == true
	d2 := fixtures.check with input as fixtures.input_with({"image": "registry.local:5000/tool:2"})
		with config.allowed_images as ["registry.local:5000/tool:latest"]
	fixtures.denied_by(d2, "image_allowlist")
}

other_digest := "sha256:fedcba9876543210fedcba9876543210fedcba9876543210fedcba9876543210"

# image_digests pins a name to the digests it lists: by repository:tag or
# by repository, whatever tag the request names.
test_listed_digest_is_allowed if {
	every image in [concat("@", ["sandgate/python:3", digest]), concat("@", ["docker.io/sandgate/python:3", other_digest])] {
		d := fixtures.check with input as fixtures.input_with({"image": image})
			with config.image_digests as {"sandgate/python:3": [digest, other_digest]}
		d.allow == true
	}
	d := fixtures.check with input as fixtures.input_with({"image": concat("@", ["sandgate/sandbox:1", digest])})
		with config.image_digests as {"sandgate/sandbox": [digest]}
	d.allow == true
}

test_unlisted_or_missing_digest_is_denied if {
	every image in ["sandgate/python:3", concat("@", ["sandgate/python:3", other_digest])] {
		d := fixtures.check with input as fixtures.input_with({"image": image})
			with config.image_digests as {"sandgate/python:3": [digest]}
		fixtures.denied_by(d, "image_digest_listed")
		some v in d.violations
		v.rule == "image_digest_listed"
		contains(v.message, digest)
	}
	d := fixtures.check with input as fixtures.input_with({"image": "sandgate/sandbox:2"})
		with config.image_digests as {"sandgate/sandbox": [digest]}
	fixtures.denied_by(d, "image_digest_listed")
}

# A name without an entry is not held to image_digests.
test_digests_of_other_names_do_not_apply if {
	d := fixtures.check with input as fixtures.input_with({"image": "sandgate/node:18"})
		with config.image_digests as {"sandgate/python:3": [digest]}
		with config.require_digest as false
	d.allow == true
}

# A request that names a language is normalised to the image
# data.sandgate.config.defaults.languages maps it to before policy runs:
# every such image must pass every rule for a team with no exemption, and
# stays subject to the allowlist (the data cannot admit an image by
# naming it a language).
test_data_language_images_are_allowed if {
	every _, image in object.get(config.defaults, "languages", {}) {
		d := admission.decision with input as fixtures.input_with({"image": image})
		d.allow == true
	}
}

test_language_images_still_need_the_allowlist if {
	every image in ["sandgate/toolchain:1", "sandgate/node:20"] {
		d := fixtures.check with input as fixtures.input_with({"image": image})
			with config.allowed_images as ["sandgate/sandbox", "sandgate/python:3"]
		fixtures.denied_by(d, "image_allowlist")
	}
}
