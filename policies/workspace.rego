# A run's workspace archive must fit the workspace it is unpacked into. The
# gateway has checked every entry before the policy sees the archive (its
# format, digest, entry count and unpacked size are in
# input.request.workspace); what is left is whether the run asked for room
# enough, so that the unpack cannot fail for want of space after the run
# was admitted.
package sandgate.admission

# METADATA
# title: Workspace archive fits its workspace
# description: >-
#   A workspace archive's unpacked bytes must fit in resources.workspace_mb,
#   the size of the file system it is unpacked into.
# custom:
#   severity: low
#   controls: [CIS-5.11]
finding contains {
	"rule": "workspace_archive_fits",
	"message": sprintf(
		"the workspace archive unpacks to %d bytes, more than resources.workspace_mb (%d MB) holds",
		[w.unpacked_bytes, input.request.resources.workspace_mb],
	),
	"action": "deny",
} if {
	w := input.request.workspace
	w.unpacked_bytes > input.request.resources.workspace_mb * 1048576
}
