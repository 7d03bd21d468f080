# Completion callbacks (callback_url): where the gateway may POST a
# finished run. The gateway makes the request, from the host it runs on,
# so a callback URL is a request a submitter makes the gateway send:
# which hosts it may reach is data (data.sandgate.config):
#
#   callback_hosts            hosts a callback may name: "host",
#                             "host:port", "*.domain" (any name below
#                             domain), "*.domain:port", "[ipv6]:port";
#                             empty (the default): callbacks are denied
#   callback_insecure_hosts   hosts a callback may reach over plain http;
#                             every other callback must use https
#   air_gapped_callback_hosts in air-gapped mode, the hosts other than
#                             loopback a callback may still name
#
# A pattern without a port matches any port. Normalisation spells the URL
# one way (scheme and host in lower case, an IP address canonical, the
# scheme's default port dropped), so the rules read it with one pattern.
# The gateway checks again when it delivers: it refuses link-local
# addresses whatever the data says, and connects to the address it
# checked.
package sandgate.admission

import data.sandgate.config

# METADATA
# title: Callback hosts from the allowlist
# description: >-
#   A run's callback_url names a host (and port) that
#   data.sandgate.config.callback_hosts allows. With no callback_hosts,
#   callbacks are denied: the gateway would otherwise POST to whatever a
#   submitter names, services on its own host included.
# custom:
#   severity: high
#   controls: [ASVS-12.6.1]
finding contains {
	"rule": "callback_host_allowlist",
	"message": msg,
	"action": "deny",
} if {
	input.request.callback_url
	not _callback_allowed
	msg := _callback_host_message
}

_callback_allowed if {
	some p in _callback_hosts
	_callback_matches(_callback, p)
}

_callback_host_message := sprintf("callback_url %q is not a normalised http or https URL", [input.request.callback_url]) if {
	not _callback
} else := "completion callbacks are not enabled: data.sandgate.config.callback_hosts is empty" if {
	count(_callback_hosts) == 0
} else := sprintf("callback host %s:%s is not allowed; allowed: %s", [_callback.host, _callback.port, concat(", ", _callback_hosts)])

# METADATA
# title: Callbacks over https
# description: >-
#   A callback is delivered over https unless
#   data.sandgate.config.callback_insecure_hosts names its host: the run's
#   result and its signature would otherwise cross the network in clear.
# custom:
#   severity: medium
#   controls: [ASVS-9.2.1]
finding contains {
	"rule": "callback_https",
	"message": sprintf("callback_url must use https; plain http is allowed only to callback_insecure_hosts, not to %s:%s", [cb.host, cb.port]),
	"action": "deny",
} if {
	cb := _callback
	cb.scheme == "http"
	not _callback_insecure_allowed
}

_callback_insecure_allowed if {
	some p in object.get(config, "callback_insecure_hosts", [])
	_callback_matches(_callback, p)
}

# METADATA
# title: Air-gapped callbacks stay on the host
# description: >-
#   In air-gapped mode (SANDGATE_AIR_GAPPED) a callback may name only a
#   loopback host (localhost, 127.0.0.0/8, [::1]) unless
#   data.sandgate.config.air_gapped_callback_hosts names it: an air-gapped
#   site sends nothing off the host by default.
# custom:
#   severity: high
#   controls: [ASVS-12.6.1]
finding contains {
	"rule": "air_gapped_callback",
	"message": sprintf("air-gapped: callback host %s is not on this host; air_gapped_callback_hosts does not name it", [cb.host]),
	"action": "deny",
} if {
	input.settings.air_gapped == true
	cb := _callback
	not _loopback(cb.host)
	not _air_gapped_callback_allowed
}

_air_gapped_callback_allowed if {
	some p in object.get(config, "air_gapped_callback_hosts", [])
	_callback_matches(_callback, p)
}

_callback_hosts := object.get(config, "callback_hosts", [])

# _callback is the callback URL's scheme, host and port (the scheme's
# default when the URL has none), all strings.
_callback := {"scheme": m[1], "host": m[2], "port": _port(m[1], m[3])} if {
	m := regex.find_all_string_submatch_n(
		`^(https?)://(\[[0-9a-f:.]+\]|[a-z0-9.-]+)(?::([0-9]{1,5}))?(?:[/?].*)?$`,
		input.request.callback_url, 1,
	)[0]
}

_port("https", "") := "443"

_port("http", "") := "80"

_port(_, p) := p if p != ""

# _callback_matches: the callback cb matches the data's pattern p.
_callback_matches(cb, p) if {
	pat := _callback_pattern(p)
	_callback_host_matches(cb.host, pat.host)
	pat.port in {"", cb.port}
}

_callback_pattern(p) := {"host": m[1], "port": m[2]} if {
	m := regex.find_all_string_submatch_n(`^(\*\.[a-z0-9.-]+|[a-z0-9.-]+|\[[0-9a-f:.]+\])(?::([0-9]{1,5}))?$`, p, 1)[0]
}

_callback_host_matches(host, pattern) if host == pattern

# "*.example.com" matches the names below example.com, not example.com.
_callback_host_matches(host, pattern) if {
	startswith(pattern, "*.")
	endswith(host, substring(pattern, 1, -1))
}

_loopback("localhost")

_loopback("[::1]")

_loopback(host) if regex.match(`^127\.[0-9]{1,3}\.[0-9]{1,3}\.[0-9]{1,3}$`, host)
