# Egress: what one connection of a run with network "egress" may reach.
# The egress proxy asks data.sandgate.egress.decision for each new
# destination of a run (and caches the answer for the run's life), with
# the input
#
#   {"run_id", "principal", "team", "host", "port", "addresses",
#    "egress": the run's admitted list, "air_gapped"}
#
# and connects only when "allow" is true. The proxy itself refuses
# link-local, unspecified and multicast addresses whatever this says, and
# loopback and private addresses unless egress_private_cidrs names them.
#
# Destinations are written "host:port", "*.domain:port" (any name below
# domain), "ip:port", "[ipv6]:port" or "cidr:port"; the data lists them per
# team (data.sandgate.config):
#
#   egress_destinations   {"default": [...], "teams": {"payments": [...]}}:
#                         what a run of the team may be admitted for; a
#                         team listed under "teams" gets its list only
#   egress_approvable     the same shape: what a run of the team may be
#                         admitted for once someone approves it; a
#                         connection reaches one only when the run's
#                         admitted list names it (so it was approved)
#   egress_blocked_cidrs  addresses no connection may reach, whatever
#                         resolves to them
package sandgate.egress

import data.sandgate.config

default decision := {"allow": false, "reasons": ["the egress policy is undefined for this connection"]}

decision := {"allow": count(_reasons) == 0, "reasons": sort(_reasons)}

_reasons contains "air-gapped: egress is denied" if input.air_gapped == true

_reasons contains sprintf("%s is not among the egress destinations of team %s", [_dest, input.team]) if {
	not allowed_for_team(_dest, input.team)
	not _approved_destination
}

# _approved_destination: a destination the team may reach with approval,
# which the run's admitted list names; admission stores such a run only
# once its approval is granted.
_approved_destination if {
	approvable_for_team(_dest, input.team)
	_admitted
}

_reasons contains sprintf("%s is not in the run's admitted egress list", [_dest]) if {
	not _admitted
}

_reasons contains sprintf("address %s is in egress_blocked_cidrs", [a]) if {
	some a in input.addresses
	some c in object.get(config, "egress_blocked_cidrs", [])
	net.cidr_contains(c, a)
}

_admitted if {
	some p in input.egress
	covers(p, _dest)
}

# _dest is the connection as a destination: host:port, [ipv6]:port.
_dest := sprintf("[%s]:%d", [input.host, input.port]) if contains(input.host, ":")

else := sprintf("%s:%d", [input.host, input.port])

# team_destinations are the destinations the data allows team.
team_destinations(team) := d if {
	d := config.egress_destinations.teams[team]
} else := object.get(config, ["egress_destinations", "default"], [])

# team_approvable are the destinations the team may reach with approval.
team_approvable(team) := d if {
	d := config.egress_approvable.teams[team]
} else := object.get(config, ["egress_approvable", "default"], [])

# approvable_for_team: some approvable destination of the team's covers
# dest.
approvable_for_team(dest, team) if {
	some p in team_approvable(team)
	covers(p, dest)
}

# allowed_for_team: some destination of the team's covers dest.
allowed_for_team(dest, team) if {
	some p in team_destinations(team)
	covers(p, dest)
}

# covers(p, d): the destination pattern p allows the destination d (both
# normalised): the same port, and the same host, a host below p's
# wildcard (a narrower wildcard too), or an address or prefix inside p's
# prefix. A wildcard d is covered only by a wildcard p.
covers(p, d) if {
	pp := parse(p)
	dd := parse(d)
	pp.port == dd.port
	_host_covers(pp, dd)
}

_host_covers(pp, dd) if pp.host == dd.host

_host_covers(pp, dd) if {
	startswith(pp.host, "*.")
	not pp.cidr
	not dd.cidr
	endswith(dd.host, substring(pp.host, 1, -1))
}

_host_covers(pp, dd) if {
	pp.cidr
	dd.cidr
	net.cidr_contains(pp.cidr, dd.cidr)
}

# parse splits a destination into its host, port and, for an address or
# prefix, the prefix in CIDR form.
parse(s) := {"host": m[1], "port": to_number(m[2]), "cidr": _cidr(m[1])} if {
	m := regex.find_all_string_submatch_n(`^(.+):([0-9]{1,5})$`, s, 1)[0]
}

_cidr(h) := _prefix(h, "32") if {
	regex.match(`^[0-9]{1,3}(\.[0-9]{1,3}){3}(/[0-9]{1,2})?$`, h)
} else := _prefix(trim(h, "[]"), "128") if {
	startswith(h, "[")
} else := false

# _prefix is the address a as a prefix of bits, or a when it is one.
_prefix(a, _) := a if contains(a, "/")

_prefix(a, bits) := concat("/", [a, bits]) if not contains(a, "/")
