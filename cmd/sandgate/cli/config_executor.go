package cli

import (
	"crypto/x509"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/pflag"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor"
	"github.com/sandgate/sandgate/executor/images"
	"github.com/sandgate/sandgate/imagesig"
)

// imageKeys are the pinned image keys, nil when none are configured.
func (c *executorConfig) imageKeys() (*imagesig.Keys, error) {
	if c.ImageVerifyKeys == "" {
		return nil, nil
	}
	return imagesig.LoadKeys(c.ImageVerifyKeys)
}

// executorConfig is the Docker executor's: the daemon, how many runs hold
// a container at once, the warm pool, the in-sandbox agent and the teams'
// cache volumes.
type executorConfig struct {
	DockerHost    string // DOCKER_HOST; empty, the local socket
	MaxConcurrent int    // SANDGATE_MAX_CONCURRENT
	// MaxSessions is how many sessions the node keeps open at once, from
	// their own budget (SANDGATE_MAX_SESSIONS; default from the host's
	// memory, executor.DefaultMaxSessions); TeamShare the most percent of
	// the run slots and of the session budget one team may hold
	// (SANDGATE_TEAM_SHARE).
	MaxSessions int
	TeamShare   int
	WarmPool    int // SANDGATE_WARM_POOL
	// AgentBinary is the statically linked sandgate binary bind-mounted
	// read-only into session and warm containers as their in-sandbox
	// agent (SANDGATE_AGENT_BINARY); empty takes this binary when it is
	// statically linked, "off" turns the agent off (commands in sessions
	// then go through docker exec).
	AgentBinary string
	// VolumeDir holds the file systems of the teams' cache volumes
	// (SANDGATE_VOLUME_DIR).
	VolumeDir string
	// ImageVerifyKeys are the public keys (a PEM file or a directory of
	// them) image signatures are verified with
	// (SANDGATE_IMAGE_VERIFY_KEYS); ImageSignatureDir is where `image
	// load --signature` keeps them (SANDGATE_IMAGE_SIGNATURE_DIR).
	ImageVerifyKeys   string
	ImageSignatureDir string
	// dockerCallsConfig: retries, backoff and timeouts of Docker calls
	// (config_docker.go).
	dockerCallsConfig
	invalid []string
}

func readExecutorConfig(getenv func(string) string) executorConfig {
	c := executorConfig{MaxConcurrent: 4}
	e := envReader{getenv: getenv}
	e.str("DOCKER_HOST", &c.DockerHost)
	e.str("SANDGATE_AGENT_BINARY", &c.AgentBinary)
	e.str("SANDGATE_VOLUME_DIR", &c.VolumeDir)
	e.str("SANDGATE_IMAGE_VERIFY_KEYS", &c.ImageVerifyKeys)
	c.ImageSignatureDir = "/var/lib/sandgate/image-signatures"
	e.str("SANDGATE_IMAGE_SIGNATURE_DIR", &c.ImageSignatureDir)
	e.int("SANDGATE_MAX_CONCURRENT", &c.MaxConcurrent)
	e.int("SANDGATE_MAX_SESSIONS", &c.MaxSessions)
	e.int("SANDGATE_TEAM_SHARE", &c.TeamShare)
	e.int("SANDGATE_WARM_POOL", &c.WarmPool)
	c.invalid = e.invalid
	c.dockerCallsConfig = readDockerCallsConfig(getenv)
	return c
}

func (c *executorConfig) bindFlags(f *pflag.FlagSet) {
	f.IntVar(&c.MaxConcurrent, "max-concurrent", c.MaxConcurrent, "runs holding a container at once, shared fairly between teams; more wait in a queue. Idle warm containers are not counted: at most SANDGATE_WARM_POOL of them are kept besides (SANDGATE_MAX_CONCURRENT)")
	f.IntVar(&c.MaxSessions, "max-sessions", c.MaxSessions, "sessions open at once, from their own budget: a session never holds a run slot (SANDGATE_MAX_SESSIONS; default one per GiB of the host's memory, 2 to 256)")
	f.IntVar(&c.TeamShare, "team-share", c.TeamShare, "the most percent of the run slots, and of the session budget, one team may hold, so another team always finds room (SANDGATE_TEAM_SHARE; default 50, or 100 on a development gateway whose one principal is its only team)")
	f.IntVar(&c.WarmPool, "warm-pool", c.WarmPool, "warm containers kept per pooled profile (SANDGATE_WARM_POOL)")
	f.StringVar(&c.AgentBinary, "agent-binary", c.AgentBinary, "statically linked sandgate binary mounted into sandboxes as their agent; off to use docker exec (SANDGATE_AGENT_BINARY; default: this binary when static)")
	f.StringVar(&c.VolumeDir, "volume-dir", c.VolumeDir, "where the file systems of the teams' cache volumes live (SANDGATE_VOLUME_DIR; default /var/lib/sandgate/volumes)")
}

// Validate checks the executor's bounds.
func (c *executorConfig) Validate() error {
	switch {
	case len(c.invalid) > 0:
		return invalidError(c.invalid)
	case c.WarmPool < 0 || c.WarmPool > 64:
		return fmt.Errorf("SANDGATE_WARM_POOL must be between 0 and 64, not %d", c.WarmPool)
	case c.MaxConcurrent < 1 || c.MaxConcurrent > 256:
		return fmt.Errorf("SANDGATE_MAX_CONCURRENT must be between 1 and 256, not %d", c.MaxConcurrent)
	case c.MaxSessions == 0:
		c.MaxSessions = executor.DefaultMaxSessions()
	case c.MaxSessions < executor.MinSessions || c.MaxSessions > executor.MaxSessions:
		return fmt.Errorf("SANDGATE_MAX_SESSIONS must be between %d and %d, not %d", executor.MinSessions, executor.MaxSessions, c.MaxSessions)
	}
	if c.TeamShare < 0 || c.TeamShare > 100 {
		return fmt.Errorf("SANDGATE_TEAM_SHARE must be a percent between 1 and 100 (0: the default), not %d", c.TeamShare)
	}
	return c.dockerCallsConfig.Validate()
}

// egressConfig places the egress network and its proxy.
type egressConfig struct {
	// EgressNetwork, EgressInterface and EgressPort place the egress
	// network and its proxy (SANDGATE_EGRESS_NETWORK, _INTERFACE, _PORT);
	// empty or zero, the executor's defaults.
	EgressNetwork   string
	EgressInterface string
	EgressPort      int
	// EgressUpstreamCAFile holds PEM certificates the egress proxy
	// trusts, besides the host's roots, for the destinations it opens TLS
	// to on behalf of runs with secrets (SANDGATE_EGRESS_UPSTREAM_CA_FILE).
	EgressUpstreamCAFile string
	invalid              []string
}

func readEgressConfig(getenv func(string) string) egressConfig {
	var c egressConfig
	e := envReader{getenv: getenv}
	e.str("SANDGATE_EGRESS_NETWORK", &c.EgressNetwork)
	e.str("SANDGATE_EGRESS_INTERFACE", &c.EgressInterface)
	e.int("SANDGATE_EGRESS_PORT", &c.EgressPort)
	e.str("SANDGATE_EGRESS_UPSTREAM_CA_FILE", &c.EgressUpstreamCAFile)
	c.invalid = e.invalid
	return c
}

// The egress settings have no flags: they are set once per host.
func (c *egressConfig) bindFlags(*pflag.FlagSet) {}

// Validate checks the proxy's port.
func (c *egressConfig) Validate() error {
	if err := invalidError(c.invalid); err != nil {
		return err
	}
	if c.EgressPort < 0 || c.EgressPort > 65535 {
		return fmt.Errorf("SANDGATE_EGRESS_PORT must be a port from 1 to 65535, not %d", c.EgressPort)
	}
	return nil
}

// workspaceConfig is where runs' and sessions' workspaces live, and the
// archives of runs waiting to run.
type workspaceConfig struct {
	// WorkspaceDir holds the file systems of runs' workspaces, and
	// UploadDir the workspace archives of runs waiting to run.
	WorkspaceDir      string // SANDGATE_WORKSPACE_DIR
	UploadDir         string // SANDGATE_UPLOAD_DIR
	MaxWorkspaceBytes int64  // SANDGATE_MAX_WORKSPACE_BYTES; zero, the gateway's default
	invalid           []string
}

func readWorkspaceConfig(getenv func(string) string) workspaceConfig {
	var c workspaceConfig
	e := envReader{getenv: getenv}
	e.str("SANDGATE_WORKSPACE_DIR", &c.WorkspaceDir)
	e.str("SANDGATE_UPLOAD_DIR", &c.UploadDir)
	e.int64("SANDGATE_MAX_WORKSPACE_BYTES", &c.MaxWorkspaceBytes)
	c.invalid = e.invalid
	return c
}

func (c *workspaceConfig) bindFlags(f *pflag.FlagSet) {
	f.StringVar(&c.WorkspaceDir, "workspace-dir", c.WorkspaceDir, "where the file systems of runs' workspaces live (SANDGATE_WORKSPACE_DIR; default /var/lib/sandgate/workspaces)")
	f.StringVar(&c.UploadDir, "upload-dir", c.UploadDir, "where workspace archives wait for their runs (SANDGATE_UPLOAD_DIR; default: the system's temporary directory)")
	f.Int64Var(&c.MaxWorkspaceBytes, "max-workspace-bytes", c.MaxWorkspaceBytes, "the largest workspace archive a run may send (SANDGATE_MAX_WORKSPACE_BYTES; default 256 MiB)")
}

// Validate checks the archive bound.
func (c *workspaceConfig) Validate() error {
	if err := invalidError(c.invalid); err != nil {
		return err
	}
	if c.MaxWorkspaceBytes < 0 {
		return fmt.Errorf("SANDGATE_MAX_WORKSPACE_BYTES must not be negative, not %d", c.MaxWorkspaceBytes)
	}
	return nil
}

// newExecutor builds the Docker executor of this node, checked but not
// started: it neither reaps nor warms until serve has registered. It
// refuses an agent binary that cannot serve and mount roots it cannot pin.
func newExecutor(cfg *config, p *parts) (*executor.Executor, error) {
	agent, err := agentBinary(cfg.AgentBinary, cfg.DockerHost)
	if err != nil {
		return nil, err
	}
	if agent == "" {
		p.logger.Warn("no in-sandbox agent: this binary is not statically linked and SANDGATE_AGENT_BINARY names none; commands in sessions use docker exec")
	}
	warm, err := warmProfiles(cfg, p.engine)
	if err != nil {
		return nil, err
	}
	if err := checkMountRoots(cfg.MountRoots); err != nil {
		return nil, err
	}
	roots, err := cfg.egressConfig.upstreamRoots()
	if err != nil {
		return nil, err
	}
	imageKeys, err := cfg.imageKeys()
	if err != nil {
		return nil, err
	}
	exec, err := executor.New(executor.Config{
		ImageSignatures:  imagesig.Store{Dir: cfg.ImageSignatureDir},
		ImageKeys:        imageKeys,
		AgentBinary:      agent,
		DockerHost:       cfg.DockerHost,
		Node:             cfg.Node,
		MaxConcurrent:    cfg.MaxConcurrent,
		MaxSessions:      cfg.MaxSessions,
		TeamSharePercent: cfg.teamShare(),
		VolumeDir:        cfg.VolumeDir,
		WorkspaceDir:     cfg.WorkspaceDir,
		Blobs:            p.blobs,
		WarmPool:         cfg.WarmPool,
		WarmProfiles:     warm,
		EgressDecider:    p.engine,
		EgressNetwork:    cfg.EgressNetwork,
		EgressInterface:  cfg.EgressInterface,
		EgressPort:       cfg.EgressPort,
		EgressMetrics:    p.metrics.Egress(),
		HostGroups:       cfg.hostGroups,
		MaxRetries:       uint64(cfg.DockerRetries),
		Backoff:          cfg.backoff(),
		CallTimeout:      cfg.DockerCallTimeout,
		PullTimeout:      cfg.PullTimeout,
		CPUThrottleShare: cfg.CPUThrottleShare,
		// The host's roots and SANDGATE_EGRESS_UPSTREAM_CA_FILE's.
		EgressUpstreamRoots: roots,
		Logger:              p.logger.With("component", "executor"),
	}, p.metrics.Sink(p.events))
	if err != nil {
		return nil, fmt.Errorf("docker executor: %w", err)
	}
	if len(cfg.MountRoots) > 0 {
		if err := exec.PrepareBindMounts(); err != nil {
			_ = exec.Close()
			return nil, err
		}
	}
	return exec, nil
}

// checkMountRoots refuses a mount root that is not a directory: every
// bind mount under it would fail.
func checkMountRoots(roots []string) error {
	for _, r := range roots {
		fi, err := os.Stat(r)
		if err != nil {
			return fmt.Errorf("SANDGATE_MOUNT_ROOTS: %w", err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("SANDGATE_MOUNT_ROOTS: %s is not a directory", r)
		}
	}
	return nil
}

// newImages is the image administration of this node's daemon: the
// images sandgate built, which GET /v1/config lists.
func newImages(cfg *config, logger *slog.Logger) (*images.Images, error) {
	im, err := images.New(images.Config{DockerHost: cfg.DockerHost, Logger: logger.With("component", "images")})
	if err != nil {
		return nil, fmt.Errorf("docker images: %w", err)
	}
	return im, nil
}

// upstreamRoots are the roots the egress proxy verifies the destinations
// of runs with secrets against: the host's, and the certificates of
// SANDGATE_EGRESS_UPSTREAM_CA_FILE.
func (c *egressConfig) upstreamRoots() (*x509.CertPool, error) {
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if c.EgressUpstreamCAFile == "" {
		return pool, nil
	}
	pem, err := os.ReadFile(c.EgressUpstreamCAFile)
	if err != nil {
		return nil, fmt.Errorf("SANDGATE_EGRESS_UPSTREAM_CA_FILE: %w", err)
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("SANDGATE_EGRESS_UPSTREAM_CA_FILE %s: no PEM certificate in it", c.EgressUpstreamCAFile)
	}
	return pool, nil
}

// teamShare is the team share the node enforces: SANDGATE_TEAM_SHARE, or
// by default sandgate.DefaultTeamSharePercent, except on a development
// gateway that signs in its development principal alone (no tokens file,
// no identity provider): its one team is the node's whole workload, and a
// share would only leave half the node idle.
func (c *config) teamShare() int {
	switch {
	case c.TeamShare > 0:
		return c.TeamShare
	case c.Dev && c.TokensFile == "" && len(c.OIDCIssuers) == 0:
		return 100
	default:
		return sandgate.DefaultTeamSharePercent
	}
}
