# Sessions: a session is admitted with operation "session" (its spec, the
# keepalive as its command, and its limits in input.session), and every
# command in it with operation "exec" (the session's admitted spec with the
# command's fields, and input.session naming the session). Every other rule
# judges both like a run; these judge what only sessions have.
package sandgate.admission

import data.sandgate.config

# METADATA
# title: Session idle timeout
# description: >-
#   A session's idle_timeout_seconds must lie between 1 and
#   session_maxima.idle_timeout_seconds: an idle session holds a container
#   and its share of the node.
# custom:
#   severity: medium
#   controls: [CIS-5.11]
finding contains {
	"rule": "session_idle_limit",
	"message": sprintf("idle_timeout_seconds %v is not between 1 and %v", [v, config.session_maxima.idle_timeout_seconds]),
	"action": "deny",
} if {
	input.operation == "session"
	v := input.session.idle_timeout_seconds
	not _within(v, config.session_maxima.idle_timeout_seconds)
}

# METADATA
# title: Session lifetime
# description: >-
#   A session's max_lifetime_seconds must lie between 1 and
#   session_maxima.max_lifetime_seconds, so that no session holds its
#   container for ever, however busy.
# custom:
#   severity: medium
#   controls: [CIS-5.11]
finding contains {
	"rule": "session_lifetime_limit",
	"message": sprintf("max_lifetime_seconds %v is not between 1 and %v", [v, config.session_maxima.max_lifetime_seconds]),
	"action": "deny",
} if {
	input.operation == "session"
	v := input.session.max_lifetime_seconds
	not _within(v, config.session_maxima.max_lifetime_seconds)
}

_within(v, maximum) if {
	v >= 1
	v <= maximum
}

# METADATA
# title: Denied commands in sessions
# description: >-
#   A command in a session whose program (its first element, or that
#   element's last path component) is in denied_exec_commands is refused.
#   The list is empty by default: a session may run anything its spec
#   allows.
# custom:
#   severity: medium
#   controls: [NIST-CM-7]
finding contains {
	"rule": "denied_exec_command",
	"message": sprintf("the command %q may not be run in a session", [program]),
	"action": "deny",
} if {
	input.operation == "exec"
	program := input.request.command[0]
	_denied_program(program)
}

_denied_program(p) if p in config.denied_exec_commands

_denied_program(p) if {
	parts := split(p, "/")
	parts[count(parts) - 1] in config.denied_exec_commands
}
