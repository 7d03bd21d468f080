package executor

import (
	"crypto/x509"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/sethvargo/go-retry"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/egress"
	"github.com/sandgate/sandgate/imagesig"
)

// SandboxImage is the default sandbox image that BuildSandboxImage builds.
const SandboxImage = "sandgate/sandbox:latest"

// Config configures an Executor. The zero value of every field but Node has
// a usable default; Validate fills the defaults in.
type Config struct {
	// AgentBinary is a statically linked sandgate binary that session and
	// warm containers run as their in-sandbox agent, bind-mounted
	// read-only (agent.go); empty, sessions' commands are docker execs
	// and warm containers wait in a shell.
	AgentBinary string
	// DockerHost is the daemon to talk to ("unix:///var/run/docker.sock",
	// "tcp://…"); empty means the local socket.
	DockerHost string
	// Node names this executor in labels and events. Containers labelled
	// with another node are never reaped by this one, so every executor
	// that shares a daemon needs its own name.
	Node string
	// Instance names this executor, one process of a gateway, in the
	// label LabelInstance of every container it makes and in its lease on
	// Node (lease.go). Default: random, one per process.
	Instance string
	// LeaseRenew is how often the lease on Node is renewed, and
	// LeaseLapse how old its last renewal may be, by the daemon's clock,
	// before the instance holding it counts as dead. Default 5s and 30s;
	// the lapse must be at least three renewals.
	LeaseRenew time.Duration
	LeaseLapse time.Duration
	// MaxConcurrent is how many runs may hold a container at once; further
	// runs wait, and free places go to the waiting team that holds the
	// fewest (within each team's Job.TeamConcurrency and its share).
	// Session containers and idle warm containers do not count: the pool
	// keeps WarmPool of them per profile besides, so the node holds at
	// most MaxConcurrent + MaxSessions + WarmPool × profiles containers.
	// Default 4.
	MaxConcurrent int
	// MaxSessions is how many session containers may live at once, from
	// their own places: an idle session never holds a run slot. A session
	// container's Job.TeamConcurrency is its team's session limit.
	// Default DefaultMaxSessions().
	MaxSessions int
	// TeamSharePercent is the most of MaxConcurrent, and of MaxSessions,
	// one team may hold, in percent (sandgate.Capacity.Share), between 1
	// and 100. Default sandgate.DefaultTeamSharePercent.
	TeamSharePercent int
	// StopGrace is how long a cancelled or timed-out container has between
	// SIGTERM and SIGKILL. Default 10s.
	StopGrace time.Duration
	// ReapInterval is how often the orphan reaper runs after the pass at
	// Start. Default 2 minutes.
	ReapInterval time.Duration
	// CallTimeout bounds one attempt of one Docker call that is expected to
	// be quick (create, start, inspect, remove…). A call that exceeds it
	// counts as transient and is retried. Default 30s.
	CallTimeout time.Duration
	// MaxRetries caps the retries of one Docker call after a transient
	// error, whatever Backoff says. Default 4.
	MaxRetries uint64
	// Backoff returns a fresh backoff for each retried call. Default:
	// exponential from 100ms, capped at 2s, with 10% jitter. Tests inject a
	// constant 1ns backoff.
	Backoff func() retry.Backoff
	// PullTimeout bounds one attempt of one image pull; an attempt that
	// exceeds it is retried like any transient failure. Default 5
	// minutes (SANDGATE_PULL_TIMEOUT).
	PullTimeout time.Duration
	// ImageCacheTTL is how long a resolved image reference is trusted
	// without asking the daemon again. A container create that finds the
	// image gone invalidates it at once. Default 30s; negative disables the
	// cache.
	ImageCacheTTL time.Duration
	// WarmPool is how many started containers are kept ready for each warm
	// profile, between 0 (no pool, the default) and 64. A run whose
	// container would be configured exactly like a profile's takes one
	// (and only it: each serves one run and is removed after it); any
	// other run, or one that finds the pool empty, takes the cold path.
	WarmPool int
	// WarmProfiles are the normalised specs whose containers the pool
	// keeps warm; the command, environment and stdin in them do not
	// matter. Default, when WarmPool is set: the builtin default spec.
	WarmProfiles []sandgate.Normalized
	// WarmPoolTTL is how long a warm container may wait for a run before it
	// is replaced by a fresh one. Default 10 minutes.
	WarmPoolTTL time.Duration
	// WarmPoolCheck is how often the pool is topped up and its containers
	// past their TTL are recycled, besides the refill that follows every
	// claim and every warm container found dead. Default 30s.
	WarmPoolCheck time.Duration
	// MountStageDir is where bind-mount sources are pinned for the daemon
	// (see the stager): a directory only root may write, on the path to
	// which every directory is root's. Default DefaultStageDir.
	MountStageDir string
	// VolumeDir holds the file systems of cache volumes: one ext4 image per
	// team's volume, of the team's quota, loop-mounted. Default
	// DefaultVolumeDir.
	VolumeDir string
	// WorkspaceDir holds the file systems of runs' workspaces: one ext4
	// image per run with files, a workspace archive or artifacts,
	// loop-mounted while the run lives. Default DefaultWorkspaceDir.
	WorkspaceDir string
	// Blobs stores the artifacts runs leave; without it a run's artifacts
	// are reported as not collected.
	Blobs sandgate.BlobStore
	// BridgeNetwork is the Docker network of runs admitted with network
	// "bridge": sandgate's own, with inter-container communication
	// disabled. Default DefaultBridgeNetwork.
	BridgeNetwork string
	// BridgeInterface is the host interface of BridgeNetwork when sandgate
	// makes it. Default DefaultBridgeInterface.
	BridgeInterface string
	// BridgeHostAccess lets bridge runs reach services of the host itself
	// on the bridge's gateway address. By default the host's firewall drops
	// what comes from the bridge for the host (which needs root).
	BridgeHostAccess bool
	// EgressNetwork is the Docker network of runs admitted with network
	// "egress": internal, inter-container communication disabled, its
	// one way out the egress proxy on its gateway address. Default
	// DefaultEgressNetwork; EgressInterface is its host interface
	// (DefaultEgressInterface) and EgressPort the proxy's port
	// (DefaultEgressPort).
	EgressNetwork   string
	EgressInterface string
	EgressPort      int
	// EgressDecider judges each connection of an egress run (the policy
	// engine); without it egress runs are refused.
	EgressDecider sandgate.EgressDecider
	// EgressLookup resolves the names egress runs connect to; default the
	// system resolver. Tests inject theirs.
	EgressLookup egress.Lookup
	// EgressMetrics counts the proxy's connections and bytes; optional.
	EgressMetrics egress.Metrics
	// EgressAggregate is how often repeated connections are recorded as
	// one event; default egress.DefaultAggregateEvery.
	EgressAggregate time.Duration
	// EgressUpstreamRoots verify the destinations the proxy opens TLS to
	// for runs with secrets (SANDGATE_EGRESS_UPSTREAM_CA_FILE); nil is
	// the host's roots.
	EgressUpstreamRoots *x509.CertPool
	// TrustDir holds the trust file of each run with secrets while it
	// runs (secrets.go). Default DefaultTrustDir.
	TrustDir string
	// UsageInterval is how often, at most, a running container's
	// resource counters are read (see usage.go): the CPU time and I/O a
	// run reports can miss up to one interval of its end. Default 200ms;
	// negative turns the readings off, and runs then report their wall
	// time only.
	UsageInterval time.Duration
	// CPUThrottleShare is the share of a run's wall time spent throttled
	// by its CPU limit (cpu.stat's throttled time) above which its trail
	// records run.cpu_throttled. Default 0.25; at most 1.
	CPUThrottleShare float64
	// CgroupRoot is where the daemon host's cgroup file systems are
	// mounted, read for the usage of runs when the daemon is local.
	// Default DefaultCgroupRoot.
	CgroupRoot string
	// HostGroups are groups of the host no container may hold, as its
	// primary group or a supplementary one its image adds, whatever a
	// decision's enforcement says (HostGroups finds them). Validate adds
	// the group of the local daemon's socket when it is not among them.
	HostGroups []sandgate.HostGroup
	// Clock stamps events and results. Default time.Now.
	Clock sandgate.Clock
	// Logger receives operational logs (never run output). Default: discard.
	Logger *slog.Logger

	// ImageSignatures holds the signatures of the images loaded with one
	// (sandgate image load --signature), by image ID; ImageKeys are the
	// public keys they are verified with (SANDGATE_IMAGE_VERIFY_KEYS).
	// Without keys no image is signed, and a run whose policy requires a
	// signature fails (image_signatures.go).
	ImageSignatures imagesig.Store
	ImageKeys       *imagesig.Keys
}

// Validate fills in defaults and reports a configuration that cannot work.
func (c *Config) Validate() error {
	if c.Node == "" {
		return fmt.Errorf("executor: Node is required")
	}
	if !safeName.MatchString(c.Node) {
		return fmt.Errorf("executor: Node %q must be letters, digits, '.', '_' or '-'", c.Node)
	}
	if err := c.validateInstance(); err != nil {
		return err
	}
	switch {
	case c.MaxConcurrent == 0:
		c.MaxConcurrent = 4
	case c.MaxConcurrent < 0 || c.MaxConcurrent > 1024:
		return fmt.Errorf("executor: MaxConcurrent must be between 1 and 1024, not %d", c.MaxConcurrent)
	}
	if err := c.validateCapacity(); err != nil {
		return err
	}
	if c.StopGrace <= 0 {
		c.StopGrace = 10 * time.Second
	}
	if c.ReapInterval <= 0 {
		c.ReapInterval = 2 * time.Minute
	}
	if c.CallTimeout <= 0 {
		c.CallTimeout = 30 * time.Second
	}
	if c.MaxRetries == 0 {
		c.MaxRetries = 4
	}
	if c.PullTimeout <= 0 {
		c.PullTimeout = 5 * time.Minute
	}
	switch {
	case c.CPUThrottleShare == 0:
		c.CPUThrottleShare = 0.25
	case !(c.CPUThrottleShare > 0 && c.CPUThrottleShare <= 1):
		return fmt.Errorf("executor: CPUThrottleShare must be above 0 and at most 1, not %v", c.CPUThrottleShare)
	}
	if c.Backoff == nil {
		c.Backoff = func() retry.Backoff {
			return retry.WithJitterPercent(10, retry.WithCappedDuration(2*time.Second, retry.NewExponential(100*time.Millisecond)))
		}
	}
	if err := c.validateWarmPool(); err != nil {
		return err
	}
	if c.ImageCacheTTL == 0 {
		c.ImageCacheTTL = 30 * time.Second
	}
	if err := c.validateNetworks(); err != nil {
		return err
	}
	if c.UsageInterval == 0 {
		c.UsageInterval = defaultUsageInterval
	}
	if c.CgroupRoot == "" {
		c.CgroupRoot = DefaultCgroupRoot
	}
	if c.Clock == nil {
		c.Clock = time.Now
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// validateInstance fills in this executor's instance, its lease's timing
// and the host's groups it refuses: its own daemon's socket's among them.
func (c *Config) validateInstance() error {
	if c.Instance == "" {
		c.Instance = randomSuffix() + randomSuffix()
	}
	if !safeName.MatchString(c.Instance) {
		return fmt.Errorf("executor: Instance %q must be letters, digits, '.', '_' or '-'", c.Instance)
	}
	if c.LeaseRenew <= 0 {
		c.LeaseRenew = 5 * time.Second
	}
	if c.LeaseLapse <= 0 {
		c.LeaseLapse = 30 * time.Second
	}
	if c.LeaseLapse < 3*c.LeaseRenew {
		return fmt.Errorf("executor: LeaseLapse (%s) must be at least three LeaseRenew (%s)", c.LeaseLapse, c.LeaseRenew)
	}
	own, err := HostGroups(c.DockerHost, nil)
	if err != nil {
		return fmt.Errorf("executor: %w", err)
	}
	for _, g := range own {
		if !slices.ContainsFunc(c.HostGroups, func(h sandgate.HostGroup) bool { return h.GID == g.GID }) {
			c.HostGroups = append(c.HostGroups, g)
		}
	}
	return nil
}

// validateNetworks fills in the bridge and egress networks' defaults.
func (c *Config) validateNetworks() error {
	if c.BridgeNetwork == "" {
		c.BridgeNetwork = DefaultBridgeNetwork
	}
	if !safeName.MatchString(c.BridgeNetwork) {
		return fmt.Errorf("executor: BridgeNetwork %q is not a network name", c.BridgeNetwork)
	}
	if c.BridgeInterface == "" {
		c.BridgeInterface = DefaultBridgeInterface
	}
	if len(c.BridgeInterface) > 15 || !safeName.MatchString(c.BridgeInterface) {
		return fmt.Errorf("executor: BridgeInterface %q is not an interface name", c.BridgeInterface)
	}
	if c.EgressNetwork == "" {
		c.EgressNetwork = DefaultEgressNetwork
	}
	if c.EgressInterface == "" {
		c.EgressInterface = DefaultEgressInterface
	}
	if c.EgressPort == 0 {
		c.EgressPort = DefaultEgressPort
	}
	if !safeName.MatchString(c.EgressNetwork) || len(c.EgressInterface) > 15 || !safeName.MatchString(c.EgressInterface) || c.EgressPort < 1 || c.EgressPort > 65535 {
		return fmt.Errorf("executor: EgressNetwork %q, EgressInterface %q or EgressPort %d is not usable", c.EgressNetwork, c.EgressInterface, c.EgressPort)
	}
	return nil
}

// validateWarmPool fills in the warm pool's defaults and checks its
// profiles.
func (c *Config) validateWarmPool() error {
	if c.WarmPool < 0 || c.WarmPool > 64 {
		return fmt.Errorf("executor: WarmPool must be between 0 and 64, not %d", c.WarmPool)
	}
	if c.WarmPool > 0 {
		if len(c.WarmProfiles) == 0 {
			spec, err := sandgate.Normalize(sandgate.RunSpec{Command: []string{"true"}}, sandgate.Defaults{})
			if err != nil {
				return fmt.Errorf("executor: default warm profile: %w", err)
			}
			c.WarmProfiles = []sandgate.Normalized{spec}
		}
		for i, spec := range c.WarmProfiles {
			if _, err := warmSettings(spec, *c); err != nil {
				return fmt.Errorf("executor: warm profile %d: %w", i, err)
			}
		}
	}
	if c.WarmPoolTTL <= 0 {
		c.WarmPoolTTL = 10 * time.Minute
	}
	if c.WarmPoolCheck <= 0 {
		c.WarmPoolCheck = 30 * time.Second
	}
	return nil
}
