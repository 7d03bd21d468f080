# Package sandgate.fixtures holds the inputs the bundle's tests start from:
# a normalised request every rule admits, changed one field at a time.
package sandgate.fixtures

import data.sandgate.admission

request := {
	"image": "sandgate/sandbox:latest@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
	"command": ["sh", "-c", "echo hello"],
	"user": "10001:10001",
	"uid": 10001,
	"gid": 10001,
	"network": "none",
	"resources": {"memory_mb": 512, "cpus": 1, "pids": 256, "tmpfs_mb": 64, "nofile": 1024, "workspace_mb": 256},
	"timeout_seconds": 300,
	"output_limit_bytes": 1048576,
	"artifact_limit_bytes": 67108864,
	"pull_policy": "never",
	"privileged": false,
	"read_only_rootfs": true,
	"security": {"seccomp": "", "apparmor": "", "no_new_privileges": true, "label": null, "systempaths": ""},
}

principal := {"name": "alice", "team": "payments", "roles": ["submitter"]}

settings := {"air_gapped": false, "mount_roots": ["/srv/work"]}

# input_with is an input whose request is the fixture request with patch
# merged over it.
input_with(patch) := {
	"api_version": "sandgate/v1",
	"operation": "run",
	"principal": principal,
	"request": object.union(request, patch),
	"settings": settings,
}

# input_removing is input_with(patch) without the request's members keys:
# for fields normalisation leaves out (gid when the group is a name).
input_removing(keys, patch) := object.union(
	object.remove(input_with({}), ["request"]),
	{"request": object.union(object.remove(request, keys), patch)},
)

# input_settings is input_with(patch) under other gateway settings.
input_settings(patch, s) := object.union(input_with(patch), {"settings": s})

# mount is a bind mount whose source resolved to path.
mount(path) := {"source": path, "target": "/workspace", "read_only": false, "resolved": path}

# denied_by is true when the decision denies and names rule.
denied_by(d, rule) if {
	d.allow == false
	some v in d.violations
	v.rule == rule
}

# warned_by is true when the decision warns about rule.
warned_by(d, rule) if {
	some v in d.warnings
	v.rule == rule
}

# rules are the rules a decision names, deny and warn.
rules(d) := {v.rule | some v in array.concat(d.violations, d.warnings)}

# check is the decision the findings and mutations alone make: the rule
# files' tests use it so that they hold whatever actions and exemptions the
# bundle's data sets (decision_test.rego tests those). Findings whose
# action is "warn" are warnings and do not deny; those whose action is
# "require_approval" are approvals and do not deny either.
check := {
	"allow": (count(_denies) + count(_approvals)) == 0,
	"violations": _denies,
	"warnings": [f | some f in admission.finding; _warn(f)],
	"mutations": [m | some m in admission.mutation],
	"approvals": _approvals,
}

_denies := [f | some f in admission.finding; not _warn(f); not _approval(f)]

_approvals := [f | some f in admission.finding; _approval(f)]

_warn(f) if f.action == "warn"

_approval(f) if f.action == "require_approval"

# needs_approval_of is true when the decision neither allows nor denies
# and waits for an approval of rule.
needs_approval_of(d, rule) if {
	d.allow == false
	count(d.violations) == 0
	some v in d.approvals
	v.rule == rule
}
