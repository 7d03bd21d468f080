package sandgate.admission_test

import data.sandgate.config
import data.sandgate.fixtures

digest := "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

test_allowed_images_are_allowed if {
	every image in [
		"sandgate/sandbox:latest",
		"sandgate/sandbox",
		"docker.io/sandgate/sandbox:1.2",
		"sandgate/python:3.12",
		concat("@", ["sandgate/sandbox", digest]),
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
		"sandgate/sandbox/../../x",
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
