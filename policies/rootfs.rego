# The root filesystem is read-only; writable space is the tmpfs /tmp and the
# mounts and volumes the request names.
package sandgate.admission

finding contains {
	"rule": "read_only_rootfs",
	"message": "the root filesystem must be read-only (read_only_rootfs: true)",
	"controls": ["CIS-5.13"],
	"action": "deny",
} if {
	not input.request.read_only_rootfs
}
