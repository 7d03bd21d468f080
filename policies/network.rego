# Networks only from data.sandgate.config.allowed_networks; the host network
# never, whatever the data says. Normalisation spells the network in lower
# case. Air-gapped mode (input.settings.air_gapped)
# turns an allowed network into "none" and the pull policy into "never" by
# mutation; the engine applies them and evaluates the result again.
package sandgate.admission

import data.sandgate.config

# METADATA
# title: No host network
# description: >-
#   Network host is refused whatever the data says: it reaches every
#   service of the host's loopback and interfaces.
# custom:
#   severity: high
#   controls: [CIS-5.10, PSS-baseline]
#   fix: 'use "network": "none", "bridge" or "egress" with the destinations you need'
finding contains {
	"rule": "no_host_network",
	"message": "the host network is forbidden",
	"action": "deny",
} if {
	input.request.network == "host"
}

# METADATA
# title: Networks from the allowlist
# description: >-
#   The network is one of data.sandgate.config.allowed_networks (none and
#   bridge by default); another container's network, or a user-defined
#   one, reaches what it reaches.
# custom:
#   severity: high
#   controls: [CIS-5.10]
#   fix: 'use "network": "none", "bridge" or "egress" with the destinations you need'
finding contains {
	"rule": "network_allowlist",
	"message": sprintf("network %q is not allowed; allowed: %s", [object.get(input.request, "network", ""), concat(", ", config.allowed_networks)]),
	"action": "deny",
} if {
	not _network_allowed
	not _host_network
}

_network_allowed if input.request.network in config.allowed_networks

# The first rule reads input.request.network itself, so that OPA's rule
# index skips it for every other network; this helper is for negation.
_host_network if input.request.network == "host"

# METADATA
# title: Air-gapped network
# description: >-
#   In air-gapped mode (SANDGATE_AIR_GAPPED), an allowed network is
#   replaced by none.
mutation contains {
	"op": "replace",
	"path": "/network",
	"value": "none",
	"rule": "air_gapped_network",
} if {
	input.settings.air_gapped == true
	input.request.network != "none"
	input.request.network in config.allowed_networks
}

# METADATA
# title: Air-gapped pull policy
# description: >-
#   In air-gapped mode (SANDGATE_AIR_GAPPED), the pull policy is replaced
#   by never.
mutation contains {
	"op": "replace",
	"path": "/pull_policy",
	"value": "never",
	"rule": "air_gapped_pull",
} if {
	input.settings.air_gapped == true
	input.request.pull_policy != "never"
}
