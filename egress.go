package sandgate

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// NetworkEgress is the network of a run that reaches the destinations of
// its spec's egress list, and nothing else, through sandgate's egress
// proxy.
const NetworkEgress = "egress"

// MaxEgress is how many destinations a run's egress list may hold.
const MaxEgress = 64

// EgressLimits bound what one run may do through the egress proxy. Zero
// fields are filled from the bundle's defaults by Normalize; policy caps
// them at its maxima.
type EgressLimits struct {
	// Connections is how many connections the proxy lets the run open.
	Connections int64 `json:"connections,omitempty"`
	// Bytes is how many bytes, both ways together, the run may move.
	Bytes int64 `json:"bytes,omitempty"`
	// BytesPerSecond is the run's bandwidth through the proxy, both ways
	// and all its connections together.
	BytesPerSecond int64 `json:"bytes_per_second,omitempty"`
}

// EgressDestination is one parsed entry of a run's egress list or of the
// bundle's egress_destinations: a host name, a wildcard (*.domain: any
// name below domain, not domain itself), an IP address or a CIDR prefix,
// with a port.
type EgressDestination struct {
	// Host is the name in lower case without a trailing dot, or the
	// wildcard "*.domain"; empty for an address or prefix.
	Host string
	// Prefix is the address (a /32 or /128) or the network; invalid for
	// a name.
	Prefix netip.Prefix
	Port   int
}

// Wildcard reports whether d names every host below a domain.
func (d EgressDestination) Wildcard() bool { return strings.HasPrefix(d.Host, "*.") }

// String is d in the one spelling Normalize gives it.
func (d EgressDestination) String() string {
	host := d.Host
	if d.Prefix.IsValid() {
		a := d.Prefix.Addr()
		switch {
		case d.Prefix.IsSingleIP():
			host = a.String()
		default:
			host = d.Prefix.String()
		}
		if a.Is6() {
			host = "[" + host + "]"
		}
	}
	return host + ":" + strconv.Itoa(d.Port)
}

// Matches reports whether a connection to host:port at address addr is
// one d allows: the same port, and the same name, a name below d's
// wildcard, or (for an address or prefix) addr inside it. host is the
// name the connection asked for, lower case; for a connection to an
// address literal it is the address.
func (d EgressDestination) Matches(host string, port int, addr netip.Addr) bool {
	if port != d.Port {
		return false
	}
	switch {
	case d.Prefix.IsValid():
		if a, err := netip.ParseAddr(strings.Trim(host, "[]")); err == nil {
			return d.Prefix.Contains(a.Unmap())
		}
		return false
	case d.Wildcard():
		return strings.HasSuffix(host, d.Host[1:])
	default:
		return host == d.Host
	}
}

// ParseEgressDestination parses "host:port", "*.domain:port", "ip:port",
// "[ipv6]:port" or "cidr:port" ("10.2.0.0/16:5432", "[fd00::/8]:443").
// The port is required, 1 to 65535; a host is ASCII letters, digits, '-'
// and '.', kept in lower case; a prefix is kept masked ("10.2.3.4/16"
// becomes "10.2.0.0/16").
func ParseEgressDestination(s string) (EgressDestination, error) {
	i := strings.LastIndexByte(s, ':')
	if i <= 0 || i == len(s)-1 {
		return EgressDestination{}, fmt.Errorf("%q is not host:port, *.domain:port or cidr:port (the port is required)", s)
	}
	host, portStr := s[:i], s[i+1:]
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 1 || port > 65535 || portStr[0] == '0' || portStr[0] == '+' {
		return EgressDestination{}, fmt.Errorf("%q: port %q is not a number from 1 to 65535", s, portStr)
	}
	d := EgressDestination{Port: port}
	bracketed := strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]")
	if bracketed {
		host = host[1 : len(host)-1]
	} else if strings.Contains(host, ":") {
		return EgressDestination{}, fmt.Errorf("%q: write an IPv6 address or prefix in brackets: [addr]:port", s)
	}
	if strings.Contains(host, "/") {
		p, err := netip.ParsePrefix(host)
		if err != nil || p.Addr().Zone() != "" || (p.Addr().Is6() != bracketed) {
			return EgressDestination{}, fmt.Errorf("%q: %q is not a CIDR prefix", s, host)
		}
		if p.Addr().Is4In6() {
			return EgressDestination{}, fmt.Errorf("%q: write an IPv4 prefix in its IPv4 form", s)
		}
		d.Prefix = p.Masked()
		return d, nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		if a.Zone() != "" || a.Is6() != bracketed && !a.Is4In6() {
			return EgressDestination{}, fmt.Errorf("%q: %q is not an IP address without a zone", s, host)
		}
		a = a.Unmap()
		d.Prefix = netip.PrefixFrom(a, a.BitLen())
		return d, nil
	}
	if bracketed {
		return EgressDestination{}, fmt.Errorf("%q: %q is not an IPv6 address", s, host)
	}
	wild := strings.HasPrefix(host, "*.")
	name, err := callbackHost(strings.TrimPrefix(host, "*."))
	if err != nil {
		return EgressDestination{}, fmt.Errorf("%q: %s", s, err.Error())
	}
	if _, err := netip.ParseAddr(name); err == nil {
		if wild {
			return EgressDestination{}, fmt.Errorf("%q: a wildcard names a domain, not an address", s)
		}
		a, _ := netip.ParseAddr(name)
		d.Prefix = netip.PrefixFrom(a, 32)
		return d, nil
	}
	if wild {
		if !strings.Contains(name, ".") {
			return EgressDestination{}, fmt.Errorf("%q: a wildcard needs a domain of at least two labels (*.example.com)", s)
		}
		name = "*." + name
	}
	d.Host = name
	return d, nil
}

// normalizeEgress checks the egress list and spells each entry the one
// way, and fills the egress limits of an egress run from d.
func normalizeEgress(s *RunSpec, d Defaults) error {
	seen := make(map[string]int, len(s.Egress))
	for i, e := range s.Egress {
		field := fmt.Sprintf("egress[%d]", i)
		dest, err := ParseEgressDestination(strings.ToLower(strings.TrimSpace(e)))
		if err != nil {
			return FieldError(field, "%s", err)
		}
		norm := dest.String()
		if j, ok := seen[norm]; ok {
			return FieldError(field, "%s is also egress[%d]", norm, j)
		}
		seen[norm] = i
		s.Egress[i] = norm
	}
	if l := s.EgressLimits; l != nil {
		if l.Connections < 0 {
			return FieldError("egress_limits.connections", "must not be negative")
		}
		if l.Bytes < 0 {
			return FieldError("egress_limits.bytes", "must not be negative")
		}
		if l.BytesPerSecond < 0 {
			return FieldError("egress_limits.bytes_per_second", "must not be negative")
		}
	}
	if s.Network != NetworkEgress {
		return nil
	}
	l := EgressLimits{}
	if s.EgressLimits != nil {
		l = *s.EgressLimits
	}
	if l.Connections == 0 {
		l.Connections = d.EgressLimits.Connections
	}
	if l.Bytes == 0 {
		l.Bytes = d.EgressLimits.Bytes
	}
	if l.BytesPerSecond == 0 {
		l.BytesPerSecond = d.EgressLimits.BytesPerSecond
	}
	s.EgressLimits = &l
	return nil
}

// EgressInput is what the policy judges one connection of an egress run
// by (the input of data.sandgate.egress.decision).
type EgressInput struct {
	RunID     string `json:"run_id"`
	Principal string `json:"principal"`
	Team      string `json:"team"`
	// Host is the name the connection asked for (lower case), or the
	// address it named.
	Host string `json:"host"`
	Port int    `json:"port"`
	// Addresses are what the proxy resolved Host to, the one it will
	// connect to among them.
	Addresses []string `json:"addresses"`
	// Egress is the run's admitted egress list.
	Egress []string `json:"egress"`
}

// EgressDecision is the policy's verdict on one connection.
type EgressDecision struct {
	Allow bool `json:"allow"`
	// Reasons say why a connection is refused; empty when allowed.
	Reasons        []string `json:"reasons"`
	PolicyRevision string   `json:"policy_revision"`
}

// EgressDecider judges the connections of egress runs. The policies
// engine implements it; an evaluation error, an undefined decision or no
// policy at all is a refusal (Allow false with a reason), never an
// error, so that a proxy fails closed.
type EgressDecider interface {
	DecideEgress(ctx context.Context, in EgressInput) EgressDecision
}

// EgressSummary is what a run did through the egress proxy, in its result.
type EgressSummary struct {
	ConnectionsAllowed int64 `json:"connections_allowed"`
	ConnectionsDenied  int64 `json:"connections_denied"`
	// BytesSent is what the run sent to its destinations, BytesReceived
	// what it got back.
	BytesSent     int64 `json:"bytes_sent"`
	BytesReceived int64 `json:"bytes_received"`
	// Destinations are the busiest destinations, most connections first,
	// at most MaxEgressSummaryDestinations.
	Destinations []EgressDestinationSummary `json:"destinations"`
}

// MaxEgressSummaryDestinations is how many destinations a summary lists.
const MaxEgressSummaryDestinations = 10

// EgressDestinationSummary is one destination of an EgressSummary.
type EgressDestinationSummary struct {
	Host          string `json:"host"`
	Port          int    `json:"port"`
	Allowed       int64  `json:"allowed"`
	Denied        int64  `json:"denied"`
	BytesSent     int64  `json:"bytes_sent"`
	BytesReceived int64  `json:"bytes_received"`
}
