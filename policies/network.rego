# Networks only from data.sandgate.config.allowed_networks; the host network
# never, whatever the data says. Air-gapped mode (input.settings.air_gapped)
# turns an allowed network into "none" and the pull policy into "never" by
# mutation; the engine applies them and evaluates the result again.
package sandgate.admission

import data.sandgate.config

_network := lower(object.get(input.request, "network", ""))

finding contains {
	"rule": "no_host_network",
	"message": "the host network is forbidden",
	"controls": ["CIS-5.10", "PSS-baseline"],
} if {
	_network == "host"
}

finding contains {
	"rule": "network_allowlist",
	"message": sprintf("network %q is not allowed; allowed: %s", [_network, concat(", ", config.allowed_networks)]),
	"controls": ["CIS-5.10"],
} if {
	_network != "host"
	not _network in config.allowed_networks
}

mutation contains {
	"op": "replace",
	"path": "/network",
	"value": "none",
	"rule": "air_gapped_network",
} if {
	input.settings.air_gapped == true
	_network != "none"
	_network in config.allowed_networks
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
