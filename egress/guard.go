// Package egress is sandgate's egress proxy and the address checks every
// outbound connection sandgate makes on someone's behalf goes through.
//
// The Proxy serves the runs admitted with network "egress": HTTP CONNECT
// and plain-HTTP forward-proxy requests from their containers, each
// identified by its source address, checked against the run's admitted
// destinations and the policy's egress decision, resolved once and
// connected to the very address that was checked. The executor starts
// it on its egress network and registers each run's address; the package
// itself talks to neither Docker nor the database (docs/egress.md).
//
// Resolve and DialChecked are the resolve-once, check, connect-to-what-
// was-checked steps; the gateway's completion callbacks use them too.
package egress

import (
	"context"
	"fmt"
	"net"
	"net/netip"
)

// The reasons an address is refused.
const (
	ReasonLinkLocal   = "link_local"
	ReasonUnspecified = "unspecified"
	ReasonMulticast   = "multicast"
	ReasonLoopback    = "loopback"
	ReasonPrivate     = "private"
)

// AddrError is an address a connection is never made to, with the
// reason a metric or an event can count it by.
type AddrError struct {
	Addr   netip.Addr
	Reason string
}

func (e *AddrError) Error() string {
	switch e.Reason {
	case ReasonLinkLocal:
		return fmt.Sprintf("address %s is link-local (cloud metadata services answer there)", e.Addr)
	case ReasonUnspecified:
		return fmt.Sprintf("address %s is unspecified: it reaches this host", e.Addr)
	case ReasonMulticast:
		return fmt.Sprintf("address %s is multicast or broadcast", e.Addr)
	case ReasonLoopback:
		return fmt.Sprintf("address %s is loopback: this host's own services", e.Addr)
	default:
		return fmt.Sprintf("address %s is private", e.Addr)
	}
}

// CheckAlways refuses the addresses no connection sandgate makes for
// someone else may reach, whatever a policy says: link-local
// (169.254.0.0/16 with 169.254.169.254, fe80::/10), unspecified,
// multicast and broadcast.
func CheckAlways(a netip.Addr) error {
	a = a.Unmap()
	switch {
	case a.IsLinkLocalUnicast() || a.IsLinkLocalMulticast():
		return &AddrError{a, ReasonLinkLocal}
	case a.IsUnspecified():
		return &AddrError{a, ReasonUnspecified}
	case a.IsMulticast() || a == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return &AddrError{a, ReasonMulticast}
	}
	return nil
}

// sharedSpace is 100.64.0.0/10 (carrier-grade NAT), private in effect.
var sharedSpace = netip.MustParsePrefix("100.64.0.0/10")

// CheckPublic is CheckAlways, and refuses loopback and private addresses
// (10/8, 172.16/12, 192.168/16, 100.64/10, fc00::/7) besides, unless one
// of allowed contains them.
func CheckPublic(a netip.Addr, allowed []netip.Prefix) error {
	a = a.Unmap()
	if err := CheckAlways(a); err != nil {
		return err
	}
	reason := ""
	switch {
	case a.IsLoopback():
		reason = ReasonLoopback
	case a.IsPrivate() || sharedSpace.Contains(a):
		reason = ReasonPrivate
	default:
		return nil
	}
	for _, p := range allowed {
		if p.Contains(a) {
			return nil
		}
	}
	return &AddrError{a, reason}
}

// Lookup resolves a host name to its addresses.
type Lookup func(ctx context.Context, host string) ([]netip.Addr, error)

// SystemLookup is the system resolver.
func SystemLookup(ctx context.Context, host string) ([]netip.Addr, error) {
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// Resolve is host's addresses: host itself when it is an address
// (literal true), else what lookup answers, once. The caller checks them
// and connects to one of them with DialChecked, never by name, so that a
// second answer (DNS rebinding) never comes into it.
func Resolve(ctx context.Context, lookup Lookup, host string) (addrs []netip.Addr, literal bool, err error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a.Unmap()}, true, nil
	}
	if addrs, err = lookup(ctx, host); err != nil {
		return nil, false, fmt.Errorf("resolve %s: %w", host, err)
	}
	if len(addrs) == 0 {
		return nil, false, fmt.Errorf("resolve %s: no addresses", host)
	}
	for i := range addrs {
		addrs[i] = addrs[i].Unmap()
	}
	return addrs, false, nil
}

// DialChecked connects to the first of addrs that check accepts and that
// answers, on port, and returns the connection and its address. It
// returns check's refusal, or the dial error, of the first address when
// none was connected.
func DialChecked(ctx context.Context, d *net.Dialer, network string, addrs []netip.Addr, port uint16, check func(netip.Addr) error) (net.Conn, netip.Addr, error) {
	var firstErr error
	for _, a := range addrs {
		err := check(a)
		if err == nil {
			var conn net.Conn
			conn, err = d.DialContext(ctx, network, netip.AddrPortFrom(a, port).String())
			if err == nil {
				return conn, a, nil
			}
		}
		if firstErr == nil {
			firstErr = err
		}
	}
	if firstErr == nil {
		firstErr = fmt.Errorf("no addresses to connect to")
	}
	return nil, netip.Addr{}, firstErr
}
