# Secrets at admission: a run names the stored secrets it uses
# (input.request.secrets); its sandbox holds a placeholder of each and the
# egress proxy writes the value into its requests to the secret's
# destinations. Where each secret may go is data
# (data.sandgate.config.secrets):
#
#   "secrets": {"demo": {"teams": ["payments"],
#                        "destinations": ["api.example.test:443"],
#                        "header": "Authorization", "format": "Bearer {value}",
#                        "env": "DEMO_TOKEN"}}
#
# input.secrets names the stored ones among those the request asks for,
# with their versions. A secret is admitted for a run of one of its teams,
# with network egress, whose egress list covers every destination of the
# secret (docs/secrets.md).
package sandgate.admission

import data.sandgate.config
import data.sandgate.egress

_secrets_requested contains s if some s in object.get(input.request, "secrets", [])

# METADATA
# title: A secret exists
# description: >-
#   Every secret a run asks for is defined in
#   data.sandgate.config.secrets and has a value stored
#   (PUT /v1/secrets/{name}).
# custom:
#   severity: medium
#   controls: [NIST-IA-5(7)]
finding contains {
	"rule": "secret_exists",
	"message": sprintf("secret %s is not defined in the policy's data (data.sandgate.config.secrets)", [s]),
	"action": "deny",
} if {
	some s in _secrets_requested
	not object.get(config, ["secrets", s], false)
}

finding contains {
	"rule": "secret_exists",
	"message": sprintf("secret %s has no value stored (PUT /v1/secrets/%s)", [s, s]),
	"action": "deny",
} if {
	some s in _secrets_requested
	object.get(config, ["secrets", s], false)
	not object.get(input, ["secrets", s], false)
}

# METADATA
# title: A secret is for its teams
# description: >-
#   A run may use a secret only when its principal's team is among the
#   secret's teams in data.sandgate.config.secrets.
# custom:
#   severity: high
#   controls: [NIST-AC-3, NIST-IA-5(7)]
finding contains {
	"rule": "secret_team",
	"message": sprintf("secret %s is not for team %s", [s, input.principal.team]),
	"action": "deny",
} if {
	some s in _secrets_requested
	b := config.secrets[s]
	not input.principal.team in object.get(b, "teams", [])
}

# METADATA
# title: A secret's destinations are the run's
# description: >-
#   Every destination the data names for a secret is covered by the run's
#   admitted egress list: the proxy writes the secret to those
#   destinations, and the run reaches nothing else.
# custom:
#   severity: high
#   controls: [NIST-SC-7(5), NIST-IA-5(7)]
finding contains {
	"rule": "secret_destinations",
	"message": sprintf("secret %s goes to %s, which is not in the run's egress list", [s, d]),
	"action": "deny",
} if {
	some s in _secrets_requested
	some d in object.get(config, ["secrets", s, "destinations"], [])
	not _egress_covers(d)
}

_egress_covers(d) if {
	some p in object.get(input.request, "egress", [])
	egress.covers(p, d)
}

# METADATA
# title: Secrets go through the egress proxy
# description: >-
#   A run with secrets has network egress: the proxy is what writes them.
#   Air-gapped sites force network none, and so deny secrets.
# custom:
#   severity: medium
#   controls: [NIST-IA-5(7)]
finding contains {
	"rule": "secret_network",
	"message": sprintf("secrets are used through the egress proxy: the run needs network egress, not %q", [object.get(input.request, "network", "")]),
	"action": "deny",
} if {
	count(_secrets_requested) > 0
	object.get(input.request, "network", "") != "egress"
}

# METADATA
# title: A secret's placeholder has its variable alone
# description: >-
#   The environment variable that holds a secret's placeholder is set by
#   no other entry of the run's env and by no other secret it asks for.
# custom:
#   severity: low
#   controls: [NIST-IA-5(7)]
finding contains {
	"rule": "secret_env",
	"message": sprintf("secret %s holds its placeholder in %s, which the run's env sets too", [s, e]),
	"action": "deny",
} if {
	some s in _secrets_requested
	e := config.secrets[s].env
	object.get(input.request, ["env", e], null) != null
}

finding contains {
	"rule": "secret_env",
	"message": sprintf("secrets %s and %s both hold their placeholders in %s", [a, b, config.secrets[a].env]),
	"action": "deny",
} if {
	some a in _secrets_requested
	some b in _secrets_requested
	a < b
	config.secrets[a].env == config.secrets[b].env
}
