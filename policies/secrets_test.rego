package sandgate.admission_test

import data.sandgate.fixtures

secrets_data := {
	"demo": {
		"teams": ["payments"], "destinations": ["api.example.test:443"],
		"header": "Authorization", "format": "Bearer {value}", "env": "DEMO_TOKEN",
	},
	"npm": {"teams": ["payments", "build"], "destinations": ["*.npmjs.org:443"], "header": "Authorization", "env": "NPM_TOKEN"},
	"same_env": {"teams": ["payments"], "destinations": ["api.example.test:443"], "header": "X-Key", "env": "DEMO_TOKEN"},
}

secrets_egress := {"default": [], "teams": {"payments": ["api.example.test:443", "*.npmjs.org:443", "other.example.test:443"]}}

secret_request(names, egress) := {
	"network": "egress", "egress": egress, "secrets": names,
	"egress_limits": {"connections": 256, "bytes": 1073741824},
}

# secret_input is a run asking names, every one of them stored.
secret_input(names, egress) := object.union(
	fixtures.input_with(secret_request(names, egress)),
	{"secrets": {n: {"version": 1} | some n in names}},
)

secret_check(inp) := d if {
	d := fixtures.check with input as inp
		with data.sandgate.config.secrets as secrets_data
		with data.sandgate.config.egress_destinations as secrets_egress
}

test_secret_admitted if {
	d := secret_check(secret_input(["demo"], ["api.example.test:443"]))
	d.allow == true
	d2 := secret_check(secret_input(["demo", "npm"], ["api.example.test:443", "*.npmjs.org:443", "other.example.test:443"]))
	d2.allow == true
}

test_secret_not_defined if {
	d := secret_check(secret_input(["nope"], ["api.example.test:443"]))
	fixtures.denied_by(d, "secret_exists")
}

test_secret_not_stored if {
	inp := object.remove(secret_input(["demo"], ["api.example.test:443"]), ["secrets"])
	d := secret_check(inp)
	fixtures.denied_by(d, "secret_exists")
	inp2 := object.union(object.remove(secret_input(["demo", "npm"], ["api.example.test:443", "*.npmjs.org:443"]), ["secrets"]), {"secrets": {"demo": {"version": 2}}})
	d2 := secret_check(inp2)
	fixtures.denied_by(d2, "secret_exists")
}

test_secret_other_team if {
	inp := object.union(secret_input(["demo"], ["api.example.test:443"]), {"principal": {"name": "bob", "team": "build", "roles": ["submitter"]}})
	d := secret_check(inp)
	fixtures.denied_by(d, "secret_team")
	inp2 := object.union(secret_input(["demo"], ["api.example.test:443"]), {"principal": {"name": "eve", "team": "", "roles": ["admin"]}})
	fixtures.denied_by(secret_check(inp2), "secret_team")
}

test_secret_destination_not_in_egress if {
	every egress in [["other.example.test:443"], ["api.example.test:8443"], ["example.test:443"]] {
		d := secret_check(secret_input(["demo"], egress))
		fixtures.denied_by(d, "secret_destinations")
	}

	# A wildcard destination is covered only by the same wildcard, or a wider one.
	fixtures.denied_by(secret_check(secret_input(["npm"], ["registry.npmjs.org:443"])), "secret_destinations")
}

test_secret_needs_network_egress if {
	every network in ["none", "bridge"] {
		inp := object.union(secret_input(["demo"], ["api.example.test:443"]), {"request": {"network": network}})
		fixtures.denied_by(secret_check(inp), "secret_network")
	}
}

test_secret_denied_when_air_gapped if {
	inp := object.union(secret_input(["demo"], ["api.example.test:443"]), {"settings": {"air_gapped": true, "mount_roots": []}})
	d := secret_check(inp)
	fixtures.denied_by(d, "air_gapped_egress")
}

test_secret_env_alone if {
	inp := object.union(secret_input(["demo"], ["api.example.test:443"]), {"request": {"env": {"DEMO_TOKEN": "mine"}}})
	fixtures.denied_by(secret_check(inp), "secret_env")
	fixtures.denied_by(secret_check(secret_input(["demo", "same_env"], ["api.example.test:443"])), "secret_env")
}

test_no_secrets_no_finding if {
	d := secret_check(fixtures.input_with({}))
	d.allow == true
}
