# Networks only from data.sandgate.config.allowed_networks; the host network
# never, whatever the data says. Normalisation spells the network in lower
# case. Air-gapped mode (input.settings.air_gapped)
# turns an allowed network into "none" and the pull policy into "never" by
# mutation; the engine applies them and evaluates the result again.
package sandgate.admission

import data.sandgate.config

finding contains {
	"rule": "no_host_network",
	"message": "the host network is forbidden",
	"controls": ["CIS-5.10", "PSS-baseline"],
	"action": "deny",
} if {
	input.request.network == "host"
}

finding contains {
	"rule": "network_allowlist",
	"message": sprintf("network %q is not allowed; allowed: %s", [object.get(input.request, "network", ""), concat(", ", config.allowed_networks)]),
	"controls": ["CIS-5.10"],
	"action": "deny",
} if {
	not _network_allowed
	not _host_network
}

_network_allowed if input.request.network in config.allowed_networks

# The first rule reads input.request.network itself, so that OPA's rule
# index skips it for every other network; this helper is for negation.
_host_network if input.request.network == "host"

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

mutation contains {
	"op": "replace",
	"path": "/pull_policy",
	"value": "never",
	"rule": "air_gapped_pull",
} if {
	input.settings.air_gapped == true
	input.request.pull_policy != "never"
}
