package executor

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strconv"
	"strings"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/network"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/egress"
	"github.com/sandgate/sandgate/executor/internal/daemon"
)

// DefaultEgressNetwork is the network of runs admitted with network
// "egress", DefaultEgressInterface its host interface and
// DefaultEgressPort the proxy's port on its gateway address.
const (
	DefaultEgressNetwork   = "sandgate-egress"
	DefaultEgressInterface = "sgeg0"
	DefaultEgressPort      = 3128
)

// A run admitted with network "egress" joins sandgate's egress network:
// a Docker bridge network made internal (no route out: Docker drops what
// it would forward off the bridge), with inter-container communication
// disabled. The host's firewall drops everything that comes from its
// interface for the host itself but TCP to the proxy's port on the
// bridge's gateway address. So a run's only way out is the egress proxy
// (package egress), which listens there; its address is in the run's
// HTTP_PROXY and HTTPS_PROXY. A tool that ignores them reaches nothing.
//
// The executor owns the proxy because it alone knows which container has
// which address: it registers each egress run's address once its
// container has started, and unregisters it once the container has ended
// (before it is removed, so that the address cannot pass to another run
// while it is registered), taking the run's egress summary.

// egressNet is the egress network once made, and its proxy.
type egressNet struct {
	gateway netip.Addr
	proxy   *egress.Proxy
	env     []string
}

// ensureEgress makes the egress network, its firewall rules and the
// proxy, once per executor; a failure is tried again by the next run.
func (n *networks) ensureEgress(ctx context.Context, t *trail) (*egressNet, error) {
	n.egressMu.Lock()
	defer n.egressMu.Unlock()
	if n.egress != nil {
		return n.egress, nil
	}
	refuse := func(err error, format string, args ...any) error {
		return &sandgate.Error{Code: sandgate.CodeContainerCreate, Field: "network",
			Message: "egress networking is not available on this gateway: " + fmt.Sprintf(format, args...), Err: err}
	}
	if n.cfg.EgressDecider == nil {
		return nil, refuse(nil, "no egress policy is configured")
	}
	name, iface := n.cfg.EgressNetwork, n.cfg.EgressInterface
	nw, err := n.egressNetwork(ctx, t)
	if err != nil {
		return nil, daemon.Error(sandgate.CodeContainerCreate, err, "egress network %s", name)
	}
	if nw.Driver != "bridge" || !nw.Internal || nw.Options["com.docker.network.bridge.enable_icc"] != "false" {
		return nil, refuse(nil, "the docker network %s exists without being internal with inter-container communication disabled; remove it (docker network rm %s) and sandgate makes it anew", name, name)
	}
	if got := nw.Options["com.docker.network.bridge.name"]; got != "" {
		iface = got
	}
	var gw netip.Addr
	for _, c := range nw.IPAM.Config {
		if a, err := netip.ParseAddr(c.Gateway); err == nil && a.Is4() {
			gw = a
			break
		}
	}
	if !gw.IsValid() {
		return nil, refuse(nil, "the docker network %s has no IPv4 gateway address", name)
	}
	if err := fenceEgress(iface, gw, n.cfg.EgressPort); err != nil {
		return nil, refuse(err, "the host cannot be closed to egress runs but for the proxy (%v); run sandgate as root with iptables", err)
	}
	ln, err := net.Listen("tcp", netip.AddrPortFrom(gw, uint16(n.cfg.EgressPort)).String())
	if err != nil {
		return nil, refuse(err, "the egress proxy cannot listen on %s:%d: %v", gw, n.cfg.EgressPort, err)
	}
	p := egress.New(egress.Options{
		Decider: n.cfg.EgressDecider, Events: n.events, Lookup: n.cfg.EgressLookup, Metrics: n.cfg.EgressMetrics,
		Node: n.cfg.Node, AggregateEvery: n.cfg.EgressAggregate, Now: n.cfg.Clock, UpstreamRoots: n.cfg.EgressUpstreamRoots,
		Log: n.log.With("component", "egress"),
	})
	go func() {
		if err := p.Serve(ln); err != nil {
			n.log.Error("egress proxy stopped", "err", err)
		}
	}()
	url := "http://" + netip.AddrPortFrom(gw, uint16(n.cfg.EgressPort)).String()
	n.egress = &egressNet{gateway: gw, proxy: p, env: []string{
		"HTTP_PROXY=" + url, "HTTPS_PROXY=" + url, "http_proxy=" + url, "https_proxy=" + url,
		"NO_PROXY=", "no_proxy=",
	}}
	n.log.Info("egress proxy listening", "address", ln.Addr().String(), "network", name)
	return n.egress, nil
}

// egressNetwork inspects the egress network, making it first when it is
// not there.
func (n *networks) egressNetwork(ctx context.Context, t *trail) (network.Inspect, error) {
	name := n.cfg.EgressNetwork
	inspect := func() (network.Inspect, error) {
		var nw network.Inspect
		err := n.calls.do(ctx, t, "inspect network", func(ctx context.Context) error {
			var err error
			nw, err = n.docker.NetworkInspect(ctx, name, network.InspectOptions{})
			return err
		})
		return nw, err
	}
	nw, err := inspect()
	if !cerrdefs.IsNotFound(err) {
		return nw, err
	}
	err = n.calls.do(ctx, t, "create network", func(ctx context.Context) error {
		_, err := n.docker.NetworkCreate(ctx, name, network.CreateOptions{
			Driver:   "bridge",
			Internal: true,
			Options: map[string]string{
				"com.docker.network.bridge.enable_icc": "false",
				"com.docker.network.bridge.name":       n.cfg.EgressInterface,
			},
			Labels: map[string]string{sandgate.LabelManaged: "true"},
		})
		if cerrdefs.IsConflict(err) {
			return nil
		}
		return err
	})
	if err != nil {
		return nw, err
	}
	return inspect()
}

// fenceEgress adds, once, the INPUT rules that let what comes from iface
// reach the host only as TCP to the proxy at gw:port.
func fenceEgress(iface string, gw netip.Addr, port int) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("not root")
	}
	rules := [][]string{
		{"-i", iface, "-p", "tcp", "-d", gw.String(), "--dport", strconv.Itoa(port), "-j", "ACCEPT"},
		{"-i", iface, "-j", "DROP"},
	}
	have := 0
	for _, rule := range rules {
		if exec.Command("iptables", append([]string{"-w", "-C", "INPUT"}, rule...)...).Run() == nil {
			have++
		}
	}
	if have == len(rules) {
		return nil
	}
	for _, rule := range rules {
		_ = exec.Command("iptables", append([]string{"-w", "-D", "INPUT"}, rule...)...).Run()
	}
	for i := len(rules) - 1; i >= 0; i-- {
		out, err := exec.Command("iptables", append([]string{"-w", "-I", "INPUT", "1"}, rules[i]...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("iptables -I INPUT %s: %v: %s", strings.Join(rules[i], " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}

// registerEgress registers an egress run's started container with the
// proxy, and gives its handle what unregisters it and answers its
// summary (at the run's end, before its container is removed). A run of
// another network is left alone; one that could not be registered has
// its connections refused by the proxy (fail closed). A container
// started by a previous process and adopted after a restart is
// registered the same way, with the proxy this process starts: its
// connections are allowed again, and recorded, from then on.
func (n *networks) registerEgress(ctx context.Context, h *handle) {
	if string(h.job.Spec.Network) != sandgate.NetworkEgress || h.job.AirGapped {
		return
	}
	p, addr, err := n.register(ctx, h)
	if err != nil {
		n.log.Warn("egress run not registered with the proxy; its connections are refused", "run_id", h.job.RunID, "err", err)
		return
	}
	h.egressEnd = func() *sandgate.EgressSummary { return p.Unregister(addr) }
}

// register tells the proxy the address of an egress run's started
// container; until then its connections wait (egress.Options.SourceWait)
// and are refused. The network and proxy are made when this process has
// not made them yet (an adopted run's container is older than they).
func (n *networks) register(ctx context.Context, h *handle) (*egress.Proxy, netip.Addr, error) {
	eg, err := n.ensureEgress(ctx, h.trail)
	if err != nil {
		return nil, netip.Addr{}, err
	}
	var addr netip.Addr
	err = n.calls.do(ctx, h.trail, "inspect", func(ctx context.Context) error {
		st, err := n.docker.ContainerInspect(ctx, h.res.ContainerID)
		if err != nil {
			return err
		}
		if st.NetworkSettings == nil || st.NetworkSettings.Networks[n.cfg.EgressNetwork] == nil {
			return sandgate.Errorf(sandgate.CodeContainerCreate, "the container is not on the egress network %s", n.cfg.EgressNetwork)
		}
		a, err := netip.ParseAddr(st.NetworkSettings.Networks[n.cfg.EgressNetwork].IPAddress)
		if err != nil {
			return sandgate.Errorf(sandgate.CodeContainerCreate, "the container has no address on the egress network")
		}
		addr = a
		return nil
	})
	if err != nil {
		return nil, netip.Addr{}, err
	}
	j := h.job
	private := make([]netip.Prefix, 0, len(j.Enforcement.EgressPrivateCIDRs))
	for _, c := range j.Enforcement.EgressPrivateCIDRs {
		if p, err := netip.ParsePrefix(c); err == nil {
			private = append(private, p)
		}
	}
	limits := sandgate.EgressLimits{}
	if j.Spec.EgressLimits != nil {
		limits = *j.Spec.EgressLimits
	}
	run := egress.Run{
		RunID: j.RunID, CorrelationID: j.CorrelationID, DecisionID: j.DecisionID, Principal: j.Principal,
		Team: j.Team, PolicyRevision: j.PolicyRevision, Egress: j.Spec.Egress, Limits: limits, Private: private,
	}
	if j.SessionContainer {
		run.SessionID = j.RunID
	}
	h.secrets.proxyRun(&run)
	err = eg.proxy.Register(addr, run)
	if err != nil {
		return nil, netip.Addr{}, sandgate.WrapError(sandgate.CodeContainerCreate, err, "register the run with the egress proxy")
	}
	return eg.proxy, addr, nil
}

// close stops the egress proxy, if one was started.
func (n *networks) close() {
	n.egressMu.Lock()
	defer n.egressMu.Unlock()
	if n.egress != nil {
		n.egress.proxy.Close()
		n.egress = nil
	}
}
