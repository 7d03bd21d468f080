# Added capabilities only from data.sandgate.config.allowed_capabilities.
# The executor drops ALL capabilities first, so only these can come back.
#
# A capability is judged in its canonical spelling,
# trim_prefix(upper(trim_space(c)), "CAP_"). Normalisation already spells
# them so; doing it again keeps the rules right for hand-written review
# inputs. Each rule spells it out rather than calling a function: a
# function call costs more than the three built-ins.
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
	trim_prefix(upper(trim_space(c)), "CAP_") == "ALL"
}

finding contains {
	"rule": "capabilities",
	"message": sprintf("capability %s is not allowed; allowed: %s", [cap, concat(", ", config.allowed_capabilities)]),
	"controls": ["CIS-5.4", "PSS-restricted"],
	"action": "deny",
} if {
	caps := input.request.cap_add
	some c in caps
	cap := trim_prefix(upper(trim_space(c)), "CAP_")
	cap != "ALL"
	not cap in config.allowed_capabilities
}
