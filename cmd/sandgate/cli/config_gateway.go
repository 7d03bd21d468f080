package cli

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"time"

	"github.com/spf13/pflag"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/admission"
	"github.com/sandgate/sandgate/console"
	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/mcp"
)

// gatewayConfig is the HTTP API's: where it listens, who may call it,
// the console, how long a shutdown waits, and the key that signs
// completion callbacks.
type gatewayConfig struct {
	Listen     string // SANDGATE_LISTEN
	TokensFile string // SANDGATE_TOKENS_FILE
	Dev        bool   // SANDGATE_DEV: a development token when there is no tokens file
	// Console serves the web console under /console/ (SANDGATE_CONSOLE).
	Console       bool
	ShutdownGrace time.Duration
	// CallbackKeyFile holds the key that signs completion callbacks
	// (SANDGATE_CALLBACK_KEY_FILE; default callback.key next to the
	// spool); generated on first start.
	CallbackKeyFile string
	// DevTokenFile keeps the development token between starts
	// (SANDGATE_DEV_TOKEN_FILE; default dev-token next to the spool), so
	// that a restarted `make run` accepts the token exported before.
	DevTokenFile string
	// Uploads bound the uploads under way and the bytes they hold
	// (SANDGATE_UPLOAD_*, read by package admission; the gate fills in
	// the defaults).
	Uploads admission.UploadLimits
	invalid []string
}

// readGatewayConfig reads the gateway's settings; stateDir holds the keys
// generated on first start.
func readGatewayConfig(getenv func(string) string, stateDir string) gatewayConfig {
	c := gatewayConfig{Listen: "127.0.0.1:8080", Console: true, ShutdownGrace: 30 * time.Second}
	e := envReader{getenv: getenv}
	e.str("SANDGATE_LISTEN", &c.Listen)
	e.str("SANDGATE_TOKENS_FILE", &c.TokensFile)
	e.str("SANDGATE_CALLBACK_KEY_FILE", &c.CallbackKeyFile)
	e.str("SANDGATE_DEV_TOKEN_FILE", &c.DevTokenFile)
	e.boolean("SANDGATE_DEV", &c.Dev)
	e.boolean("SANDGATE_CONSOLE", &c.Console)
	if c.CallbackKeyFile == "" {
		c.CallbackKeyFile = filepath.Join(stateDir, "callback.key")
	}
	if c.DevTokenFile == "" {
		c.DevTokenFile = filepath.Join(stateDir, "dev-token")
	}
	var err error
	if c.Uploads, err = admission.UploadLimitsFromEnv(getenv); err != nil {
		e.invalid = append(e.invalid, err.Error())
	}
	c.invalid = e.invalid
	return c
}

func (c *gatewayConfig) bindFlags(f *pflag.FlagSet) {
	f.StringVar(&c.Listen, "listen", c.Listen, "HTTP listen address (SANDGATE_LISTEN)")
	f.StringVar(&c.TokensFile, "tokens-file", c.TokensFile, "principals and token hashes, YAML or JSON (SANDGATE_TOKENS_FILE)")
	f.BoolVar(&c.Dev, "dev", c.Dev, "generate and print a development token when no tokens file is given (SANDGATE_DEV)")
	f.BoolVar(&c.Console, "console", c.Console, "serve the web console under /console/; --console=false serves the API alone (SANDGATE_CONSOLE)")
	f.StringVar(&c.DevTokenFile, "dev-token-file", c.DevTokenFile, "with --dev: where the development token is kept between starts, mode 0600 (SANDGATE_DEV_TOKEN_FILE; default: dev-token next to the spool directory)")
	f.StringVar(&c.CallbackKeyFile, "callback-key-file", c.CallbackKeyFile, "key that signs completion callbacks, hex; give it to the receivers; generated when absent (SANDGATE_CALLBACK_KEY_FILE; default: callback.key next to the spool directory)")
}

// Validate checks the listen address and that someone can sign in.
func (c *gatewayConfig) Validate() error {
	if err := invalidError(c.invalid); err != nil {
		return err
	}
	if _, _, err := net.SplitHostPort(c.Listen); err != nil {
		return fmt.Errorf("SANDGATE_LISTEN %q: %w", c.Listen, err)
	}
	if c.TokensFile == "" && !c.Dev {
		return fmt.Errorf("SANDGATE_TOKENS_FILE is not set: give a tokens file, or set SANDGATE_DEV=1 for a development token")
	}
	return nil
}

// listen binds the gateway's socket. serve does it first: a gateway that
// cannot have its port fails before it reads or registers anything.
func (c *gatewayConfig) listen() (net.Listener, error) {
	ln, err := net.Listen("tcp", c.Listen)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", c.Listen, err)
	}
	return ln, nil
}

// principals reads the tokens file, which serve keeps current, or makes
// a development token when there is none and development mode is on.
func (c *gatewayConfig) principals(logger *slog.Logger) (gateway.Authenticator, *gateway.TokensFile, string, error) {
	if c.TokensFile != "" {
		f, err := gateway.OpenTokensFile(c.TokensFile, logger.With("component", "tokens"))
		if err != nil {
			return nil, nil, "", fmt.Errorf("SANDGATE_TOKENS_FILE: %w", err)
		}
		return f, f, "", nil
	}
	token, err := devToken(c.DevTokenFile)
	if err != nil {
		return nil, nil, "", fmt.Errorf("SANDGATE_DEV_TOKEN_FILE: %w", err)
	}
	p, err := gateway.DevPrincipalsFor(token)
	return p, nil, token, err
}

// gatewaySettings is the gateway's configuration, from its own and the
// settings of the parts it drives; serve checks it before it registers
// anything.
func gatewaySettings(cfg *config, p *parts) gateway.Config {
	return gateway.Config{
		Node:               cfg.Node,
		AirGapped:          cfg.AirGapped,
		MountRoots:         cfg.MountRoots,
		ShutdownGrace:      cfg.ShutdownGrace,
		CallbackKey:        p.callbackKey,
		UploadDir:          cfg.UploadDir,
		MaxWorkspaceBytes:  cfg.MaxWorkspaceBytes,
		Uploads:            cfg.Uploads,
		ReplayMaxDecisions: cfg.ReplayMaxDecisions,
		ReplayTimeout:      cfg.ReplayTimeout,
		AdvertiseURL:       p.advertise,
		ClusterSecret:      p.clusterSecret,
		NodeHeartbeat:      cfg.NodeHeartbeat,
		NodeLapse:          cfg.NodeLapse,
		DockerHost:         cfg.DockerHost,
		Capacity:           cfg.MaxConcurrent,
		MaxSessions:        cfg.MaxSessions,
		TeamSharePercent:   cfg.teamShare(),
		KeyID:              p.keys.id,
		PublicKey:          p.keys.public,
		Version:            sandgate.Version,
	}
}

// newGateway builds the gateway over the parts serve made.
func newGateway(cfg *config, p *parts) (*gateway.Server, error) {
	var consoleHandler http.Handler
	if cfg.Console {
		consoleHandler = console.Handler()
	}
	var sinkReporter gateway.SinkReporter
	if p.streamer != nil {
		sinkReporter = p.streamer
	}
	var vault gateway.SecretVault
	if p.vault != nil {
		vault = p.vault
	}
	return gateway.New(gatewaySettings(cfg, p), gateway.Deps{
		Admitter:      p.engine,
		Policies:      p.engine,
		Recorder:      p.store,
		Audit:         p.store.Auditors(),
		Proofs:        p.store.Proofs(),
		Runs:          p.runs,
		Sessions:      p.runs,
		Approvals:     p.runs,
		Executor:      p.exec,
		Sandboxes:     p.exec.Reaper(),
		Reconciler:    p.exec.Reconciler(),
		Volumes:       p.exec,
		Artifacts:     p.runs,
		Images:        p.images,
		ImagePackages: p.images,
		Sinks:         sinkReporter,
		Secrets:       vault,
		Principals:    p.principals,
		Authorizer:    p.engine,
		Tokens:        p.tokenVerifier(),
		Login:         p.consoleLogin(),
		Console:       consoleHandler,
		MCP:           mcp.Handler,
		Logger:        p.logger.With("component", "gateway"),
		Registry:      p.registry,
		Gatherer:      p.registry,
		Metrics:       p.metrics,
		Cluster:       p.runs,
		// The heartbeat and takeovers, on connections no request takes.
		ClusterControl: p.control,
		// A dead node's containers are adopted through its daemon, their
		// events recorded here.
		RemoteReconcilers: remoteReconcilers(cfg, p.metrics.Sink(p.store), p.logger),
		CloseChains:       chainCloser(p.store),
	})
}
