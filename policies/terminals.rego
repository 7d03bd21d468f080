# Terminals and ports of sessions: a terminal is admitted with operation
# "terminal" (the session's admitted spec with the terminal's program as
# its command, input.session naming the session), a connection to a
# session's port with operation "port" (input.port.number the port).
# Every other rule judges their request like a run's.
package sandgate.admission

import data.sandgate.config

# METADATA
# title: Terminals
# description: >-
#   A terminal on a session is refused to a team whose entry in
#   terminals ({default, teams}) is false, and on an image named in
#   terminal_denied_images (as the request names it, or its repository).
# custom:
#   severity: medium
#   controls: [NIST-AC-17]
#   fix: 'run the command with session_exec instead, or ask for a team or image whose terminals the policy allows'
finding contains {
	"rule": "terminal_not_allowed",
	"message": sprintf("terminals are not allowed for team %q", [input.principal.team]),
	"action": "deny",
} if {
	input.operation == "terminal"
	not _terminals_allowed(input.principal.team)
}

finding contains {
	"rule": "terminal_not_allowed",
	"message": sprintf("terminals are not allowed on image %q", [input.request.image]),
	"action": "deny",
} if {
	input.operation == "terminal"
	_terminal_denied_image(input.request.image)
}

_terminals_allowed(team) if config.terminals.teams[team] == true

_terminals_allowed(team) if {
	not team in object.keys(object.get(config.terminals, "teams", {}))
	object.get(config.terminals, "default", false) == true
}

_terminal_denied_image(image) if image in object.get(config, "terminal_denied_images", [])

_terminal_denied_image(image) if {
	repo := regex.replace(regex.replace(image, "@.*$", ""), ":[^:/]*$", "")
	repo in object.get(config, "terminal_denied_images", [])
}

# METADATA
# title: Session ports
# description: >-
#   A connection to a session's port is admitted only for a port its
#   team's entry in session_ports ({default, teams}) lists: the session
#   serves it to its team through the gateway, never on a host port.
# custom:
#   severity: medium
#   controls: [CIS-5.8]
#   fix: 'serve on one of the ports session_ports admits for your team'
finding contains {
	"rule": "session_port_not_admitted",
	"message": sprintf("port %v of a session is not admitted for team %q (admitted: %v)", [input.port.number, input.principal.team, _admitted_ports(input.principal.team)]),
	"action": "deny",
} if {
	input.operation == "port"
	not input.port.number in _admitted_ports(input.principal.team)
}

_admitted_ports(team) := config.session_ports.teams[team]

_admitted_ports(team) := object.get(config.session_ports, "default", []) if {
	not team in object.keys(object.get(config.session_ports, "teams", {}))
}
