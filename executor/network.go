package executor

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"strings"
	"sync"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/network"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/internal/daemon"
)

// DefaultBridgeNetwork is the network of runs admitted with network
// "bridge".
const DefaultBridgeNetwork = "sandgate-bridge"

// DefaultBridgeInterface is the host interface of DefaultBridgeNetwork.
const DefaultBridgeInterface = "sgbr0"

// A run admitted with network "bridge" never joins Docker's default
// bridge, where every container can reach every other. It joins
// sandgate's own bridge network, made with inter-container communication
// disabled, so that no run reaches another's listeners, whoever's team
// they are. Its way out is the host's masquerade to the outside. The host
// itself is reachable on the bridge's gateway address, where services
// that listen on every address (a database, the gateway's own API) would
// answer; unless Config.BridgeHostAccess says otherwise, the host's
// firewall drops what arrives from the bridge's interface for the host
// itself (the INPUT chain), replies to the host's own connections aside.

// networkAPI is the Docker calls that make sandgate's networks, and the
// inspect that finds an egress run's address on its network.
type networkAPI interface {
	NetworkInspect(ctx context.Context, id string, opts network.InspectOptions) (network.Inspect, error)
	NetworkCreate(ctx context.Context, name string, opts network.CreateOptions) (network.CreateResponse, error)
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
}

// networks makes the bridge and egress networks runs join, once per
// executor, and owns the egress proxy.
type networks struct {
	cfg    Config
	docker networkAPI
	calls  calls
	events sandgate.EventSink
	log    *slog.Logger

	// bridgeMu guards whether sandgate's bridge network is ready.
	bridgeMu    sync.Mutex
	bridgeReady bool
	// egressMu guards the egress network and its proxy, once made.
	egressMu sync.Mutex
	egress   *egressNet
}

func newNetworks(cfg Config, d networkAPI, c calls, events sandgate.EventSink, log *slog.Logger) *networks {
	return &networks{cfg: cfg, docker: d, calls: c, events: events, log: log}
}

// ensureBridge makes sandgate's bridge network and the host's rules for
// it, once per executor; a failure is tried again by the next run. t is
// the run's trail (nil for none).
func (n *networks) ensureBridge(ctx context.Context, t *trail) error {
	n.bridgeMu.Lock()
	defer n.bridgeMu.Unlock()
	if n.bridgeReady {
		return nil
	}
	refuse := func(err error, format string, args ...any) error {
		return &sandgate.Error{Code: sandgate.CodeContainerCreate, Field: "network",
			Message: "bridge networking is not available on this gateway: " + fmt.Sprintf(format, args...), Err: err}
	}
	name, iface := n.cfg.BridgeNetwork, n.cfg.BridgeInterface
	var nw network.Inspect
	err := n.calls.do(ctx, t, "inspect network", func(ctx context.Context) error {
		var err error
		nw, err = n.docker.NetworkInspect(ctx, name, network.InspectOptions{})
		return err
	})
	switch {
	case cerrdefs.IsNotFound(err):
		err = n.calls.do(ctx, t, "create network", func(ctx context.Context) error {
			_, err := n.docker.NetworkCreate(ctx, name, network.CreateOptions{
				Driver: "bridge",
				Options: map[string]string{
					"com.docker.network.bridge.enable_icc":           "false",
					"com.docker.network.bridge.name":                 iface,
					"com.docker.network.bridge.enable_ip_masquerade": "true",
				},
				Labels: map[string]string{sandgate.LabelManaged: "true"},
			})
			if cerrdefs.IsConflict(err) {
				return nil // another executor made it meanwhile
			}
			return err
		})
		if err == nil {
			err = n.calls.do(ctx, t, "inspect network", func(ctx context.Context) error {
				var err error
				nw, err = n.docker.NetworkInspect(ctx, name, network.InspectOptions{})
				return err
			})
		}
		if err != nil {
			return daemon.Error(sandgate.CodeContainerCreate, err, "create network %s", name)
		}
	case err != nil:
		return daemon.Error(sandgate.CodeContainerCreate, err, "inspect network %s", name)
	}
	if nw.Driver != "bridge" || nw.Options["com.docker.network.bridge.enable_icc"] != "false" {
		return refuse(nil, "the docker network %s exists without inter-container communication disabled; remove it (docker network rm %s) and sandgate makes it anew", name, name)
	}
	if got := nw.Options["com.docker.network.bridge.name"]; got != "" {
		iface = got
	}
	if !n.cfg.BridgeHostAccess {
		if err := denyHostFromBridge(iface); err != nil {
			return refuse(err, "the host's services cannot be closed to bridge runs (%v); run sandgate as root with iptables, or allow host access explicitly", err)
		}
	}
	n.bridgeReady = true
	return nil
}

// denyHostFromBridge adds, once, the INPUT rules that drop what comes from
// iface for the host, but replies to the host's own connections.
func denyHostFromBridge(iface string) error {
	if os.Geteuid() != 0 {
		return fmt.Errorf("not root")
	}
	rules := [][]string{
		{"-i", iface, "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"},
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
	// Some but not all: take them out and insert them in order, ACCEPT
	// above DROP, at the top of the chain.
	for _, rule := range rules {
		_ = exec.Command("iptables", append([]string{"-w", "-D", "INPUT"}, rule...)...).Run()
	}
	for i := len(rules) - 1; i >= 0; i-- {
		rule := rules[i]
		out, err := exec.Command("iptables", append([]string{"-w", "-I", "INPUT", "1"}, rule...)...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("iptables -I INPUT %s: %v: %s", strings.Join(rule, " "), err, strings.TrimSpace(string(out)))
		}
	}
	return nil
}
