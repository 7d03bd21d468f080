package sandgate.admission_test

import data.sandgate.fixtures

_archive(unpacked) := {"format": "tar.gz", "sha256": "ab", "archive_bytes": 10, "entries": 3, "unpacked_bytes": unpacked}

test_workspace_archive_that_fits_is_allowed if {
	d := fixtures.check with input as fixtures.input_with({"workspace": _archive(256 * 1048576), "workdir": "/workspace"})
	d.allow == true
}

test_workspace_archive_too_big_is_denied if {
	d := fixtures.check with input as fixtures.input_with({"workspace": _archive((256 * 1048576) + 1), "workdir": "/workspace"})
	fixtures.denied_by(d, "workspace_archive_fits")
}

test_workspace_size_bounds if {
	d := fixtures.check with input as fixtures.input_with({"resources": object.union(fixtures.request.resources, {"workspace_mb": 1})})
	fixtures.denied_by(d, "workspace_limit")
	d2 := fixtures.check with input as fixtures.input_with({"artifact_limit_bytes": 0})
	fixtures.denied_by(d2, "artifact_limit")
}
