# Added capabilities only from data.sandgate.config.allowed_capabilities.
# The executor drops ALL capabilities first, so only these can come back.
package sandgate.admission

import data.sandgate.config

finding contains {
	"rule": "capabilities",
	"message": "cap_add ALL would grant every capability",
	"controls": ["CIS-5.4", "PSS-restricted"],
	"action": "deny",
} if {
	caps := input.request.cap_add
	some c in caps
	_canonical_cap(c) == "ALL"
}

finding contains {
	"rule": "capabilities",
	"message": sprintf("capability %s is not allowed; allowed: %s", [cap, concat(", ", config.allowed_capabilities)]),
	"controls": ["CIS-5.4", "PSS-restricted"],
	"action": "deny",
} if {
	caps := input.request.cap_add
	some c in caps
	cap := _canonical_cap(c)
	cap != "ALL"
	not cap in config.allowed_capabilities
}

# Normalisation already spells capabilities this way; doing it again keeps
# the rule right for hand-written review inputs.
_canonical_cap(c) := trim_prefix(upper(trim_space(c)), "CAP_")
