package cli

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/sandgate/sandgate/executor"
)

// nodeConfig is this gateway as a node: its name in labels, events and
// the node registry, and how it takes part in a cluster.
type nodeConfig struct {
	// Node is SANDGATE_NODE; default the name kept in the state
	// directory's node file, which the first serve makes (the host name
	// and eight random hex digits: unique per installation).
	Node string
	// keepIn is the state directory where serve keeps a node name of its
	// own, when neither SANDGATE_NODE nor --node names one and none is
	// kept yet; Node is the host name until then.
	keepIn string
	// AdvertiseURL is where the other nodes reach this one
	// (SANDGATE_ADVERTISE_URL; default http:// and the listen address).
	AdvertiseURL string
	// ClusterSecretFile holds the secret every node shares, which signs
	// the requests one node forwards to another
	// (SANDGATE_CLUSTER_SECRET_FILE; without it nothing is forwarded).
	ClusterSecretFile string
	// NodeHeartbeat and NodeLapse are how often a node heartbeats and how
	// old its heartbeat may be before a survivor takes it over
	// (SANDGATE_NODE_HEARTBEAT, SANDGATE_NODE_LAPSE; 2s and 15s).
	NodeHeartbeat time.Duration
	NodeLapse     time.Duration
	invalid       []string
}

func readNodeConfig(getenv func(string) string, stateDir string) nodeConfig {
	var c nodeConfig
	if c.Node = executor.KeptNode(stateDir); c.Node == "" {
		c.Node, _ = os.Hostname()
		c.keepIn = stateDir
	}
	if getenv("SANDGATE_NODE") != "" {
		c.keepIn = ""
	}
	e := envReader{getenv: getenv}
	e.str("SANDGATE_NODE", &c.Node)
	e.str("SANDGATE_ADVERTISE_URL", &c.AdvertiseURL)
	e.str("SANDGATE_CLUSTER_SECRET_FILE", &c.ClusterSecretFile)
	e.duration("SANDGATE_NODE_HEARTBEAT", &c.NodeHeartbeat, true, "2s or 1m")
	e.duration("SANDGATE_NODE_LAPSE", &c.NodeLapse, true, "2s or 1m")
	c.invalid = e.invalid
	return c
}

func (c *nodeConfig) bindFlags(f *pflag.FlagSet) {
	f.Var(nodeFlag{c}, "node", "this gateway's node name in labels and events (SANDGATE_NODE; default the one kept in the state directory, made by the first serve)")
	f.StringVar(&c.AdvertiseURL, "advertise-url", c.AdvertiseURL, "where the other nodes of a cluster reach this one (SANDGATE_ADVERTISE_URL; default http:// and the listen address)")
	f.StringVar(&c.ClusterSecretFile, "cluster-secret-file", c.ClusterSecretFile, "the secret the nodes of a cluster share, which signs forwarded requests (SANDGATE_CLUSTER_SECRET_FILE; default none: nothing is forwarded)")
	f.DurationVar(&c.NodeHeartbeat, "node-heartbeat", c.NodeHeartbeat, "how often this node heartbeats in the node registry (SANDGATE_NODE_HEARTBEAT; default 2s)")
	f.DurationVar(&c.NodeLapse, "node-lapse", c.NodeLapse, "how late a node's heartbeat may be before a survivor takes it over (SANDGATE_NODE_LAPSE; default 15s)")
}

// nodeFlag is --node: a name given there is not replaced by a kept one.
type nodeFlag struct{ c *nodeConfig }

func (f nodeFlag) String() string { return f.c.Node }
func (f nodeFlag) Type() string   { return "string" }
func (f nodeFlag) Set(v string) error {
	f.c.Node, f.c.keepIn = v, ""
	return nil
}

// Validate checks the node's name, its advertised URL, and that a lapse
// outlasts two heartbeats.
func (c *nodeConfig) Validate() error {
	if err := invalidError(c.invalid); err != nil {
		return err
	}
	if strings.TrimSpace(c.Node) == "" {
		return fmt.Errorf("SANDGATE_NODE is not set and the host has no name: name this node")
	}
	if c.AdvertiseURL != "" {
		if u, err := url.Parse(c.AdvertiseURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return fmt.Errorf("SANDGATE_ADVERTISE_URL %q must be http(s)://host:port", c.AdvertiseURL)
		}
	}
	heartbeat, lapse := c.NodeHeartbeat, c.NodeLapse
	if heartbeat == 0 {
		heartbeat = 2 * time.Second
	}
	if lapse == 0 {
		lapse = 15 * time.Second
	}
	if lapse < 2*heartbeat {
		return fmt.Errorf("SANDGATE_NODE_LAPSE (%s) must be at least twice SANDGATE_NODE_HEARTBEAT (%s)", lapse, heartbeat)
	}
	return nil
}

// advertised is where the other nodes reach this one: AdvertiseURL, or
// http:// and the address the gateway listens on.
func (c *nodeConfig) advertised(listening net.Addr) string {
	if c.AdvertiseURL != "" {
		return c.AdvertiseURL
	}
	return "http://" + listening.String()
}

// clusterSecret reads the secret the nodes share; nil without a file.
func (c *nodeConfig) clusterSecret() ([]byte, error) {
	return loadClusterSecret(c.ClusterSecretFile)
}
