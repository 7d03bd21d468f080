# Added capabilities only from data.sandgate.config.allowed_capabilities.
# The executor drops ALL capabilities first, so only these can come back.
#
# A capability is judged in its canonical spelling,
# trim_prefix(upper(trim_space(c)), "CAP_"). Normalisation already spells
# them so; doing it again keeps the rule right for hand-written review
# inputs. The rule spells it out rather than calling a function: a
# function call costs more than the three built-ins. ALL is never
# allowed: the bundle's tests admit only Linux's capabilities in the data.
package sandgate.admission

import data.sandgate.config

# METADATA
# title: Capabilities from the allowlist
# description: >-
#   Added capabilities only from
#   data.sandgate.config.allowed_capabilities; ALL never. The executor
#   drops every capability first, so only these come back.
# custom:
#   severity: critical
#   controls: [CIS-5.4, PSS-restricted]
#   fix: 'remove the capability from cap_add, or ask for one on the allowlist (GET /v1/config)'
finding contains {
	"rule": "capabilities",
	"message": sprintf("%scapabilities not allowed: %s (allowed: %s)", [_all_note(names), _named(array.slice(names, 0, 3), count(names)), concat(", ", config.allowed_capabilities)]),
	"action": "deny",
	"count": count(bad),
} if {
	caps := input.request.cap_add
	allowed := config.allowed_capabilities
	bad := [cap | some c in caps; cap := trim_prefix(upper(trim_space(c)), "CAP_"); not cap in allowed]
	count(bad) > 0
	names := sort({c | some c in bad})
}

_all_note(names) := "cap_add ALL would grant every capability; " if {
	"ALL" in names
} else := ""

# A capability that only matters on a network
# (data.sandgate.config.network_capabilities: binding a low port, …) does
# nothing in a container without one: denied with the reason, rather than
# admitted to no effect.
# METADATA
# title: Capability without a network
# description: >-
#   A capability of data.sandgate.config.network_capabilities (binding a
#   low port, ...) does nothing with network none: denied with the reason
#   rather than admitted to no effect.
# custom:
#   severity: low
#   controls: [CIS-5.4]
finding contains {
	"rule": "capability_needs_network",
	"message": sprintf("cap_add %s has no effect with network \"none\"%s; leave it out", [_named(array.slice(names, 0, 3), count(names)), _air_gapped_note]),
	"action": "deny",
	"count": count(bad),
} if {
	input.request.network == "none"
	caps := input.request.cap_add
	needs := config.network_capabilities
	bad := [cap | some c in caps; cap := trim_prefix(upper(trim_space(c)), "CAP_"); cap in needs]
	count(bad) > 0
	names := sort({c | some c in bad})
}

_air_gapped_note := " (air-gapped mode allows no other)" if {
	input.settings.air_gapped == true
} else := ""
