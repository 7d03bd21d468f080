# The root filesystem is read-only; writable space is the tmpfs /tmp and the
# mounts and volumes the request names.
package sandgate.admission

# METADATA
# title: Read-only root filesystem
# description: >-
#   The root filesystem is read-only; writable space is the tmpfs /tmp and
#   the mounts and volumes the request names.
# custom:
#   severity: medium
#   controls: [CIS-5.13]
finding contains {
	"rule": "read_only_rootfs",
	"message": "the root filesystem must be read-only (read_only_rootfs: true)",
	"action": "deny",
} if {
	not input.request.read_only_rootfs
}
