package cli

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate/audit"
)

// Config is every setting of the sandgate binary. It is read from the
// environment (SANDGATE_*), and flags of the same name override it.
type Config struct {
	Listen      string
	DatabaseURL string
	TokensFile  string
	Dev         bool
	PolicyDir   string
	AirGapped   bool
	MountRoots  []string
	SpoolDir    string
	// VolumeDir holds the file systems of the teams' cache volumes.
	VolumeDir      string
	SpoolMaxBytes  int64
	AuditBacklog   int
	SigningKeyFile string
	MaskKeyFile    string
	// CallbackKeyFile holds the key that signs completion callbacks
	// (SANDGATE_CALLBACK_KEY_FILE); generated on first start.
	CallbackKeyFile string
	// WorkspaceDir holds the file systems of runs' workspaces, and
	// UploadDir the workspace archives of runs waiting to run.
	WorkspaceDir      string
	UploadDir         string
	MaxWorkspaceBytes int64
	// ReplayMaxDecisions and ReplayTimeout bound one policy replay
	// (SANDGATE_REPLAY_MAX_DECISIONS, SANDGATE_REPLAY_TIMEOUT); zero is
	// the gateway's default.
	ReplayMaxDecisions int
	ReplayTimeout      time.Duration
	// TrustedKeysFile pins the checkpoint keys GET /v1/audit/verify
	// trusts: every gateway's (PEM blocks, or one hex key a line). Without
	// it, verify trusts the trail's key registry.
	TrustedKeysFile string
	// SinksFile names the audit sinks (SIEM streams) to deliver the
	// trail to (SANDGATE_SINKS_FILE); none without it.
	SinksFile string
	// AuditRetention is how long the trail keeps a month
	// (SANDGATE_AUDIT_RETENTION, default audit.DefaultRetention); each
	// gateway applies it every AuditRetentionInterval
	// (SANDGATE_AUDIT_RETENTION_INTERVAL, 1h), archiving expired months
	// into AuditArchiveDir (SANDGATE_AUDIT_ARCHIVE_DIR) first when set.
	AuditRetention         audit.RetentionPeriod
	AuditRetentionInterval time.Duration
	AuditArchiveDir        string
	Migrate                bool
	// Console serves the web console under /console/ (SANDGATE_CONSOLE).
	Console  bool
	WarmPool int
	// AgentBinary is the statically linked sandgate binary bind-mounted
	// read-only into session and warm containers as their in-sandbox
	// agent (SANDGATE_AGENT_BINARY); empty takes this binary when it is
	// statically linked, "off" turns the agent off (commands in sessions
	// then go through docker exec).
	AgentBinary string
	// EgressNetwork, EgressInterface and EgressPort place the egress
	// network and its proxy (SANDGATE_EGRESS_NETWORK, _INTERFACE, _PORT);
	// empty or zero, the executor's defaults.
	EgressNetwork   string
	EgressInterface string
	EgressPort      int
	MaxConcurrent   int
	Node            string
	DockerHost      string
	// The cluster: AdvertiseURL is where the other nodes reach this one
	// (SANDGATE_ADVERTISE_URL; default http:// and the listen address);
	// ClusterSecretFile holds the secret every node shares, which signs
	// the requests one node forwards to another
	// (SANDGATE_CLUSTER_SECRET_FILE; without it nothing is forwarded);
	// NodeHeartbeat and NodeLapse are how often a node heartbeats and how
	// old its heartbeat may be before a survivor takes it over
	// (SANDGATE_NODE_HEARTBEAT, SANDGATE_NODE_LAPSE; 2s and 15s).
	AdvertiseURL      string
	ClusterSecretFile string
	NodeHeartbeat     time.Duration
	NodeLapse         time.Duration
	ShutdownGrace     time.Duration
	CheckpointEvery   int
	CheckpointAfter   time.Duration

	// Client settings, for `sandgate run` and `sandgate runs`.
	URL   string
	Token string

	// invalid lists the environment variables whose values could not be
	// parsed; Validate refuses them rather than fall back to a default
	// (SANDGATE_AIR_GAPPED=yes must not quietly mean false).
	invalid []string
}

// defaultConfig reads the environment over the built-in defaults.
func defaultConfig(getenv func(string) string) Config {
	c := Config{
		Listen:          "127.0.0.1:8080",
		DatabaseURL:     "host=/var/run/postgresql dbname=sandgate",
		Migrate:         true,
		Console:         true,
		MaxConcurrent:   4,
		SpoolMaxBytes:   256 << 20,
		AuditBacklog:    64,
		ShutdownGrace:   30 * time.Second,
		CheckpointEvery: 1000,
		CheckpointAfter: 10 * time.Second,
		URL:             "http://127.0.0.1:8080",

		AuditRetentionInterval: time.Hour,
	}
	c.AuditRetention, _ = audit.ParseRetentionPeriod(audit.DefaultRetention)
	c.Node, _ = os.Hostname()
	str := func(key string, dst *string) {
		if v := getenv(key); v != "" {
			*dst = v
		}
	}
	str("SANDGATE_LISTEN", &c.Listen)
	str("SANDGATE_DATABASE_URL", &c.DatabaseURL)
	str("SANDGATE_TOKENS_FILE", &c.TokensFile)
	str("SANDGATE_POLICY_DIR", &c.PolicyDir)
	str("SANDGATE_SPOOL_DIR", &c.SpoolDir)
	str("SANDGATE_VOLUME_DIR", &c.VolumeDir)
	str("SANDGATE_WORKSPACE_DIR", &c.WorkspaceDir)
	str("SANDGATE_UPLOAD_DIR", &c.UploadDir)
	str("SANDGATE_SIGNING_KEY_FILE", &c.SigningKeyFile)
	str("SANDGATE_MASK_KEY_FILE", &c.MaskKeyFile)
	str("SANDGATE_CALLBACK_KEY_FILE", &c.CallbackKeyFile)
	str("SANDGATE_TRUSTED_KEYS_FILE", &c.TrustedKeysFile)
	str("SANDGATE_SINKS_FILE", &c.SinksFile)
	str("SANDGATE_AUDIT_ARCHIVE_DIR", &c.AuditArchiveDir)
	str("SANDGATE_NODE", &c.Node)
	str("SANDGATE_AGENT_BINARY", &c.AgentBinary)
	str("SANDGATE_EGRESS_NETWORK", &c.EgressNetwork)
	str("SANDGATE_EGRESS_INTERFACE", &c.EgressInterface)
	str("DOCKER_HOST", &c.DockerHost)
	str("SANDGATE_ADVERTISE_URL", &c.AdvertiseURL)
	str("SANDGATE_CLUSTER_SECRET_FILE", &c.ClusterSecretFile)
	str("SANDGATE_URL", &c.URL)
	str("SANDGATE_TOKEN", &c.Token)
	boolean := func(key string, dst *bool) {
		v := getenv(key)
		if v == "" {
			return
		}
		b, err := strconv.ParseBool(v)
		if err != nil {
			c.invalid = append(c.invalid, fmt.Sprintf("%s=%q is not a boolean (true or false, 1 or 0)", key, v))
			return
		}
		*dst = b
	}
	integer := func(key string, dst *int64) {
		v := getenv(key)
		if v == "" {
			return
		}
		n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
		if err != nil {
			c.invalid = append(c.invalid, fmt.Sprintf("%s=%q is not a whole number", key, v))
			return
		}
		*dst = n
	}
	boolean("SANDGATE_DEV", &c.Dev)
	boolean("SANDGATE_AIR_GAPPED", &c.AirGapped)
	boolean("SANDGATE_MIGRATE", &c.Migrate)
	boolean("SANDGATE_CONSOLE", &c.Console)
	if v := getenv("SANDGATE_MOUNT_ROOTS"); v != "" {
		c.MountRoots = splitRoots(v)
	}
	warm, concurrent, backlog, every := int64(c.WarmPool), int64(c.MaxConcurrent), int64(c.AuditBacklog), int64(c.CheckpointEvery)
	integer("SANDGATE_CHECKPOINT_EVERY", &every)
	integer("SANDGATE_WARM_POOL", &warm)
	egressPort := int64(0)
	integer("SANDGATE_EGRESS_PORT", &egressPort)
	c.EgressPort = clampInt(egressPort)
	integer("SANDGATE_MAX_CONCURRENT", &concurrent)
	integer("SANDGATE_SPOOL_MAX_BYTES", &c.SpoolMaxBytes)
	integer("SANDGATE_MAX_WORKSPACE_BYTES", &c.MaxWorkspaceBytes)
	integer("SANDGATE_AUDIT_MAX_BACKLOG", &backlog)
	replayMax := int64(c.ReplayMaxDecisions)
	integer("SANDGATE_REPLAY_MAX_DECISIONS", &replayMax)
	c.ReplayMaxDecisions = clampInt(replayMax)
	for key, dst := range map[string]*time.Duration{"SANDGATE_NODE_HEARTBEAT": &c.NodeHeartbeat, "SANDGATE_NODE_LAPSE": &c.NodeLapse} {
		if v := getenv(key); v != "" {
			d, err := time.ParseDuration(strings.TrimSpace(v))
			if err != nil || d <= 0 {
				c.invalid = append(c.invalid, fmt.Sprintf("%s=%q is not a positive duration (such as 2s or 1m)", key, v))
			}
			*dst = d
		}
	}
	if v := getenv("SANDGATE_REPLAY_TIMEOUT"); v != "" {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			c.invalid = append(c.invalid, fmt.Sprintf("SANDGATE_REPLAY_TIMEOUT=%q is not a duration (such as 30s or 2m)", v))
		}
		c.ReplayTimeout = d
	}
	if v := getenv("SANDGATE_AUDIT_RETENTION"); v != "" {
		p, err := audit.ParseRetentionPeriod(v)
		if err != nil {
			c.invalid = append(c.invalid, "SANDGATE_AUDIT_RETENTION: "+err.Error())
		}
		c.AuditRetention = p
	}
	if v := getenv("SANDGATE_AUDIT_RETENTION_INTERVAL"); v != "" {
		d, err := time.ParseDuration(strings.TrimSpace(v))
		if err != nil {
			c.invalid = append(c.invalid, fmt.Sprintf("SANDGATE_AUDIT_RETENTION_INTERVAL=%q is not a duration (such as 1h or 24h)", v))
		}
		c.AuditRetentionInterval = d
	}
	// Clamped into int range; Validate bounds them far tighter.
	c.WarmPool, c.MaxConcurrent, c.AuditBacklog = clampInt(warm), clampInt(concurrent), clampInt(backlog)
	c.CheckpointEvery = clampInt(every)
	if c.SpoolDir == "" {
		if state := getenv("XDG_STATE_HOME"); state != "" {
			c.SpoolDir = filepath.Join(state, "sandgate", "spool")
		} else {
			c.SpoolDir = "/var/lib/sandgate/spool"
		}
	}
	if c.SigningKeyFile == "" {
		c.SigningKeyFile = filepath.Join(filepath.Dir(c.SpoolDir), "checkpoint.key")
	}
	if c.CallbackKeyFile == "" {
		c.CallbackKeyFile = filepath.Join(filepath.Dir(c.SpoolDir), "callback.key")
	}
	return c
}

// maskKey loads the mask key when SANDGATE_MASK_KEY_FILE names one
// (creating it when absent); nil otherwise, which derives it from the
// signing key.
func (c *Config) maskKey() ([]byte, error) {
	if c.MaskKeyFile == "" {
		return nil, nil
	}
	return audit.LoadMaskKey(c.MaskKeyFile, true)
}

func clampInt(n int64) int {
	return int(max(min(n, math.MaxInt32), math.MinInt32))
}

func splitRoots(v string) []string {
	var roots []string
	for _, r := range strings.Split(v, ":") {
		if r = strings.TrimSpace(r); r != "" {
			roots = append(roots, r)
		}
	}
	return roots
}

// bindPersistentFlags adds the flags that mirror the environment.
func (c *Config) bindPersistentFlags(cmd *cobra.Command) {
	f := cmd.PersistentFlags()
	f.StringVar(&c.DatabaseURL, "database-url", c.DatabaseURL, "Postgres DSN (SANDGATE_DATABASE_URL)")
	f.StringVar(&c.PolicyDir, "policy-dir", c.PolicyDir, "Rego bundle directory (SANDGATE_POLICY_DIR; default: the embedded bundle)")
	f.BoolVar(&c.AirGapped, "air-gapped", c.AirGapped, "force network none and never pull (SANDGATE_AIR_GAPPED)")
	f.StringVar(&c.URL, "url", c.URL, "gateway URL for client commands (SANDGATE_URL)")
}

// loadFlags applies flags that need parsing beyond what pflag does.
func (c *Config) loadFlags(_ *cobra.Command) error { return nil }

// Validate checks the configuration for serve.
func (c *Config) Validate() error {
	if len(c.invalid) > 0 {
		return errors.New(strings.Join(c.invalid, "; "))
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("SANDGATE_LISTEN %q: %w", c.Listen, err)
	}
	if c.TokensFile == "" && !c.Dev {
		return fmt.Errorf("SANDGATE_TOKENS_FILE is not set: give a tokens file, or set SANDGATE_DEV=1 for a development token")
	}
	for _, r := range c.MountRoots {
		if !filepath.IsAbs(r) {
			return fmt.Errorf("SANDGATE_MOUNT_ROOTS: %q is not an absolute path", r)
		}
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
	if c.CheckpointEvery < 1 || c.CheckpointEvery > 1_000_000 {
		return fmt.Errorf("SANDGATE_CHECKPOINT_EVERY must be between 1 and 1000000, not %d", c.CheckpointEvery)
	}
	if c.WarmPool < 0 || c.WarmPool > 64 {
		return fmt.Errorf("SANDGATE_WARM_POOL must be between 0 and 64, not %d", c.WarmPool)
	}
	if c.EgressPort < 0 || c.EgressPort > 65535 {
		return fmt.Errorf("SANDGATE_EGRESS_PORT must be a port from 1 to 65535, not %d", c.EgressPort)
	}
	if c.MaxConcurrent < 1 || c.MaxConcurrent > 256 {
		return fmt.Errorf("SANDGATE_MAX_CONCURRENT must be between 1 and 256, not %d", c.MaxConcurrent)
	}
	if c.SpoolMaxBytes < 1<<20 {
		return fmt.Errorf("SANDGATE_SPOOL_MAX_BYTES must be at least 1 MiB")
	}
	if c.AuditBacklog < 1 || c.AuditBacklog > 1_000_000 {
		return fmt.Errorf("SANDGATE_AUDIT_MAX_BACKLOG must be between 1 and 1000000, not %d", c.AuditBacklog)
	}
	if c.ReplayMaxDecisions < 0 || c.ReplayMaxDecisions > 1_000_000 {
		return fmt.Errorf("SANDGATE_REPLAY_MAX_DECISIONS must be between 0 (the default, 10000) and 1000000, not %d", c.ReplayMaxDecisions)
	}
	if c.AuditRetentionInterval < time.Second || c.AuditRetentionInterval > 31*24*time.Hour {
		return fmt.Errorf("SANDGATE_AUDIT_RETENTION_INTERVAL must be between 1s and 744h, not %s", c.AuditRetentionInterval)
	}
	if c.AuditArchiveDir != "" && !filepath.IsAbs(c.AuditArchiveDir) {
		return fmt.Errorf("SANDGATE_AUDIT_ARCHIVE_DIR: %q is not an absolute path", c.AuditArchiveDir)
	}
	if c.ReplayTimeout < 0 || c.ReplayTimeout > time.Hour {
		return fmt.Errorf("SANDGATE_REPLAY_TIMEOUT must be between 0 (the default, 1m) and 1h, not %s", c.ReplayTimeout)
	}
	return nil
}
