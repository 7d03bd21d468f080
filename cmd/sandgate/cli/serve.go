package cli

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/sethvargo/go-retry"
	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/console"
	"github.com/sandgate/sandgate/executor"
	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/migrations"
	"github.com/sandgate/sandgate/policies"
	"github.com/sandgate/sandgate/runstore"
)

// newServeCmd builds `sandgate serve`: the gateway with its policy engine,
// audit trail, run store and Docker executor.
func newServeCmd(a *app) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the gateway",
		Long: `Run the gateway: the HTTP API on SANDGATE_LISTEN, the policy engine
(hot-reloaded from SANDGATE_POLICY_DIR, or the embedded bundle), the audit
trail in Postgres and the Docker executor. SIGTERM or SIGINT stops accepting
requests, finishes or cancels in-flight runs, removes every container and
flushes the audit trail before exit. SIGHUP reloads the policy.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serve(cmd.Context(), a)
		},
	}
	f := cmd.Flags()
	c := &a.cfg
	f.StringVar(&c.Listen, "listen", c.Listen, "HTTP listen address (SANDGATE_LISTEN)")
	f.StringVar(&c.TokensFile, "tokens-file", c.TokensFile, "principals and token hashes, YAML or JSON (SANDGATE_TOKENS_FILE)")
	f.BoolVar(&c.Dev, "dev", c.Dev, "generate and print a development token when no tokens file is given (SANDGATE_DEV)")
	f.StringSliceVar(&c.MountRoots, "mount-root", c.MountRoots, "host directory under which bind mounts may be requested; repeatable (SANDGATE_MOUNT_ROOTS, colon-separated)")
	f.StringVar(&c.SpoolDir, "spool-dir", c.SpoolDir, "durable local spool for audit events (SANDGATE_SPOOL_DIR)")
	f.StringVar(&c.VolumeDir, "volume-dir", c.VolumeDir, "where the file systems of the teams' cache volumes live (SANDGATE_VOLUME_DIR; default /var/lib/sandgate/volumes)")
	f.StringVar(&c.WorkspaceDir, "workspace-dir", c.WorkspaceDir, "where the file systems of runs' workspaces live (SANDGATE_WORKSPACE_DIR; default /var/lib/sandgate/workspaces)")
	f.StringVar(&c.UploadDir, "upload-dir", c.UploadDir, "where workspace archives wait for their runs (SANDGATE_UPLOAD_DIR; default: the system's temporary directory)")
	f.Int64Var(&c.MaxWorkspaceBytes, "max-workspace-bytes", c.MaxWorkspaceBytes, "the largest workspace archive a run may send (SANDGATE_MAX_WORKSPACE_BYTES; default 256 MiB)")
	f.StringVar(&c.SigningKeyFile, "signing-key-file", c.SigningKeyFile, "Ed25519 checkpoint signing key (SANDGATE_SIGNING_KEY_FILE)")
	f.StringVar(&c.TrustedKeysFile, "trusted-keys-file", c.TrustedKeysFile, "pin the checkpoint keys audit verify trusts: every gateway's public key (SANDGATE_TRUSTED_KEYS_FILE; default: the trail's key registry)")
	f.StringVar(&c.MaskKeyFile, "mask-key-file", c.MaskKeyFile, "key that hashes secrets in the audit trail, hex; share it between gateways (SANDGATE_MASK_KEY_FILE; default: derived from the signing key)")
	f.StringVar(&c.CallbackKeyFile, "callback-key-file", c.CallbackKeyFile, "key that signs completion callbacks, hex; give it to the receivers; generated when absent (SANDGATE_CALLBACK_KEY_FILE; default: callback.key next to the spool directory)")
	f.StringVar(&c.SinksFile, "sinks-file", c.SinksFile, "audit sinks to stream the trail to: syslog (RFC 5424, TCP or TLS) or signed webhooks, OCSF or sandgate JSON; YAML or JSON (SANDGATE_SINKS_FILE; default: none)")
	f.BoolVar(&c.Migrate, "migrate", c.Migrate, "apply database migrations at start (SANDGATE_MIGRATE)")
	f.BoolVar(&c.Console, "console", c.Console, "serve the web console under /console/; --console=false serves the API alone (SANDGATE_CONSOLE)")
	f.StringVar(&c.AgentBinary, "agent-binary", c.AgentBinary, "statically linked sandgate binary mounted into sandboxes as their agent; off to use docker exec (SANDGATE_AGENT_BINARY; default: this binary when static)")
	f.IntVar(&c.WarmPool, "warm-pool", c.WarmPool, "warm containers kept per pooled profile (SANDGATE_WARM_POOL)")
	f.IntVar(&c.MaxConcurrent, "max-concurrent", c.MaxConcurrent, "runs holding a container at once, shared fairly between teams; more wait in a queue. Idle warm containers are not counted: at most SANDGATE_WARM_POOL of them are kept besides (SANDGATE_MAX_CONCURRENT)")
	f.StringVar(&c.Node, "node", c.Node, "this gateway's node name in labels and events (SANDGATE_NODE)")
	f.StringVar(&c.AdvertiseURL, "advertise-url", c.AdvertiseURL, "where the other nodes of a cluster reach this one (SANDGATE_ADVERTISE_URL; default http:// and the listen address)")
	f.StringVar(&c.ClusterSecretFile, "cluster-secret-file", c.ClusterSecretFile, "the secret the nodes of a cluster share, which signs forwarded requests (SANDGATE_CLUSTER_SECRET_FILE; default none: nothing is forwarded)")
	f.DurationVar(&c.NodeHeartbeat, "node-heartbeat", c.NodeHeartbeat, "how often this node heartbeats in the node registry (SANDGATE_NODE_HEARTBEAT; default 2s)")
	f.DurationVar(&c.NodeLapse, "node-lapse", c.NodeLapse, "how late a node's heartbeat may be before a survivor takes it over (SANDGATE_NODE_LAPSE; default 15s)")
	return cmd
}

// warmProfiles are the specs the warm pool keeps containers of: the
// default spec the policy in force fills in. A run is served from the
// pool only when its admitted container would be configured exactly like
// one of these. None without a warm pool.
func warmProfiles(cfg Config, engine *policies.Engine) ([]sandgate.Normalized, error) {
	if cfg.WarmPool == 0 {
		return nil, nil
	}
	spec, err := sandgate.Normalize(sandgate.RunSpec{Command: []string{"true"}}, engine.Defaults())
	if err != nil {
		return nil, fmt.Errorf("warm pool profile: %w", err)
	}
	// And the default session's container (a spec with a session ID is
	// a session's), served warm when the executor has its agent.
	session, _, err := sandgate.NormalizeSession(sandgate.SessionSpec{}, "warm-pool", engine.Defaults())
	if err != nil {
		return nil, fmt.Errorf("warm pool session profile: %w", err)
	}
	if cfg.AirGapped {
		spec.Network = "none"
		session.Network = "none"
	}
	return []sandgate.Normalized{spec, session}, nil
}

// reconcileWait is how long serve keeps trying to list the runs a
// previous process left unfinished before it gives up starting.
const reconcileWait = 30 * time.Second

// serve runs the gateway until ctx is done.
func serve(ctx context.Context, a *app) error {
	cfg := a.cfg
	if err := cfg.Validate(); err != nil {
		return err
	}
	// Every request writes a log line under the handler's lock: a
	// destination that stalls must not stall them all. Deferred first, so
	// that it is written out last, after everything below has logged.
	logw := newLogWriter(a.stderr, logBufferBytes)
	defer logw.Close()
	logger := slog.New(slog.NewJSONHandler(logw, &slog.HandlerOptions{Level: slog.LevelInfo}))
	tuneGC(logger)
	settings := sandgate.Settings{AirGapped: cfg.AirGapped, MountRoots: cfg.MountRoots}

	principals, devToken, err := loadPrincipals(cfg)
	if err != nil {
		return err
	}

	if cfg.Migrate {
		if err := migrate(ctx, cfg.DatabaseURL, logger); err != nil {
			return err
		}
	}
	maskKey, err := cfg.maskKey()
	if err != nil {
		return err
	}
	callbackKey, err := loadCallbackKey(cfg.CallbackKeyFile)
	if err != nil {
		return err
	}
	var trusted []ed25519.PublicKey
	if cfg.TrustedKeysFile != "" {
		if trusted, err = loadTrustedKeys(nil, []string{cfg.TrustedKeysFile}, ""); err != nil {
			return fmt.Errorf("SANDGATE_TRUSTED_KEYS_FILE: %w", err)
		}
	}
	store, err := audit.Open(ctx, audit.Config{
		DSN:                cfg.DatabaseURL,
		SpoolDir:           cfg.SpoolDir,
		SpoolMaxBytes:      cfg.SpoolMaxBytes,
		MaxBacklog:         cfg.AuditBacklog,
		SigningKeyFile:     cfg.SigningKeyFile,
		MaskKey:            maskKey,
		TrustedKeys:        trusted,
		Node:               cfg.Node,
		CheckpointEvery:    cfg.CheckpointEvery,
		CheckpointInterval: cfg.CheckpointAfter,
		// Decisions get a chain of their own so that an admission never
		// waits behind a batch of lifecycle events.
		DecisionChain: true,
		Logger:        logger.With("component", "audit"),
	})
	if err != nil {
		return fmt.Errorf("open audit trail: %w", err)
	}
	// The audit trail closes last, after every run has ended and every
	// container is gone, so that their events are committed or spooled.
	defer func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := store.Close(closeCtx); err != nil {
			logger.Error("close audit trail", "err", err)
		}
	}()
	// Retention: expired months are archived (with an archive directory)
	// and dropped, by one gateway at a time.
	retentionCtx, stopRetention := context.WithCancel(ctx)
	retentionDone := make(chan struct{})
	go func() {
		defer close(retentionDone)
		store.RetentionLoop(retentionCtx, cfg.AuditRetention, cfg.AuditArchiveDir, cfg.AuditRetentionInterval)
	}()
	defer func() { stopRetention(); <-retentionDone }()
	// The sinks read the trail from Postgres on connections of their own;
	// they stop before the trail closes, and a batch in flight is sent
	// again by whichever gateway delivers the sink next.
	streamer, err := startSinks(cfg, logger.With("component", "sinks"))
	if err != nil {
		return err
	}
	var sinkReporter gateway.SinkReporter
	if streamer != nil {
		sinkReporter = streamer
		defer func() {
			closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := streamer.Close(closeCtx); err != nil {
				logger.Error("close audit sinks", "err", err)
			}
		}()
	}
	// Runs share the trail's connection pool, which closes with it.
	runs, err := runstore.New(store.DB(), runstore.Config{})
	if err != nil {
		return fmt.Errorf("open run store: %w", err)
	}
	// The node registry's heartbeat has connections of its own.
	control, err := runstore.New(store.ControlDB(), runstore.Config{})
	if err != nil {
		return fmt.Errorf("open run store: %w", err)
	}

	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := gateway.NewMetrics(registry)
	if err != nil {
		return err
	}

	// A reload that changes the defaults runs get changes which containers
	// are worth keeping warm: the pool follows each policy.loaded.
	var pooled atomic.Pointer[executor.Executor]
	var engine *policies.Engine
	var rewarm sync.Mutex
	policyEvents := sandgate.EventSinkFunc(func(ev sandgate.Event) {
		store.Emit(ev)
		ex := pooled.Load()
		if ev.Type != sandgate.EventPolicyLoaded || ex == nil {
			return
		}
		go func() {
			rewarm.Lock()
			defer rewarm.Unlock()
			profiles, err := warmProfiles(cfg, engine)
			if err == nil {
				err = ex.SetWarmProfiles(profiles)
			}
			if err != nil {
				logger.Error("warm pool: keeping the previous profile after a policy reload", "err", err)
			}
		}()
	})
	engine, err = policies.New(ctx, policies.Options{
		Dir:      cfg.PolicyDir,
		Settings: settings,
		Events:   policyEvents,
		Logger:   logger.With("component", "policies"),
	})
	if err != nil {
		return fmt.Errorf("load policy: %w", err)
	}
	go func() {
		if err := engine.Watch(ctx); err != nil && !errors.Is(err, context.Canceled) {
			logger.Error("policy watch", "err", err)
		}
	}()
	go reloadOnSIGHUP(ctx, engine, logger)

	warm, err := warmProfiles(cfg, engine)
	if err != nil {
		return err
	}
	agentBinary, err := agentBinary(cfg.AgentBinary, cfg.DockerHost)
	if err != nil {
		return err
	}
	if agentBinary == "" {
		logger.Warn("no in-sandbox agent: this binary is not statically linked and SANDGATE_AGENT_BINARY names none; commands in sessions use docker exec")
	}
	exec, err := executor.New(executor.Config{
		AgentBinary:     agentBinary,
		DockerHost:      cfg.DockerHost,
		Node:            cfg.Node,
		MaxConcurrent:   cfg.MaxConcurrent,
		VolumeDir:       cfg.VolumeDir,
		WorkspaceDir:    cfg.WorkspaceDir,
		Blobs:           runs,
		WarmPool:        cfg.WarmPool,
		WarmProfiles:    warm,
		EgressDecider:   engine,
		EgressNetwork:   cfg.EgressNetwork,
		EgressInterface: cfg.EgressInterface,
		EgressPort:      cfg.EgressPort,
		EgressMetrics:   metrics.Egress(),
		Logger:          logger.With("component", "executor"),
	}, metrics.Sink(store))
	if err != nil {
		return fmt.Errorf("docker executor: %w", err)
	}
	defer exec.Close()
	if len(cfg.MountRoots) > 0 {
		if err := exec.PrepareBindMounts(); err != nil {
			return err
		}
	}
	if cfg.WarmPool > 0 {
		pooled.Store(exec)
	}
	defer func() {
		downCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
		defer cancel()
		if err := exec.Shutdown(downCtx); err != nil {
			logger.Error("executor shutdown", "err", err)
		}
	}()

	builtImages, err := executor.NewImages(executor.Config{DockerHost: cfg.DockerHost, Node: cfg.Node, Logger: logger.With("component", "images")})
	if err != nil {
		return fmt.Errorf("docker images: %w", err)
	}
	defer builtImages.Close()

	clusterSecret, err := loadClusterSecret(cfg.ClusterSecretFile)
	if err != nil {
		return err
	}
	keyID, publicKey := signingKey(store)
	var consoleHandler http.Handler
	if cfg.Console {
		consoleHandler = console.Handler()
	}
	srv, err := gateway.New(gateway.Config{
		Node:               cfg.Node,
		AirGapped:          cfg.AirGapped,
		MountRoots:         cfg.MountRoots,
		ShutdownGrace:      cfg.ShutdownGrace,
		CallbackKey:        callbackKey,
		UploadDir:          cfg.UploadDir,
		MaxWorkspaceBytes:  cfg.MaxWorkspaceBytes,
		ReplayMaxDecisions: cfg.ReplayMaxDecisions,
		ReplayTimeout:      cfg.ReplayTimeout,
		AdvertiseURL:       cfg.AdvertiseURL,
		ClusterSecret:      clusterSecret,
		NodeHeartbeat:      cfg.NodeHeartbeat,
		NodeLapse:          cfg.NodeLapse,
		DockerHost:         cfg.DockerHost,
		Capacity:           cfg.MaxConcurrent,
		KeyID:              keyID,
		PublicKey:          publicKey,
		Version:            sandgate.Version,
	}, gateway.Deps{
		Admitter:   engine,
		Policies:   engine,
		Recorder:   store,
		Audit:      store,
		Proofs:     store,
		Runs:       runs,
		Sessions:   runs,
		Executor:   exec,
		Sandboxes:  exec.Reaper(),
		Reconciler: exec.Reconciler(),
		Volumes:    exec,
		Artifacts:  runs,
		Images:     builtImages,
		Sinks:      sinkReporter,
		Principals: principals,
		Console:    consoleHandler,
		Logger:     logger.With("component", "gateway"),
		Registry:   registry,
		Gatherer:   registry,
		Metrics:    metrics,
		Cluster:    runs,
		// The heartbeat and takeovers, on connections no request takes.
		ClusterControl: control,
		// A dead node's containers are adopted through its daemon, their
		// events recorded here.
		RemoteReconcilers: remoteReconcilers(cfg, metrics.Sink(store), logger),
		CloseChains:       chainCloser(store),
	})
	if err != nil {
		return err
	}

	// The runs a previous process of this node left unfinished are held
	// before the reaper's first pass, so that their containers are adopted
	// and finished, not reaped. A run store that does not answer is tried
	// again for up to reconcileWait; after that serve refuses to start
	// rather than let the reaper remove containers it should have adopted.
	adopted := 0
	err = retry.Do(ctx, retry.WithMaxDuration(reconcileWait, retry.NewExponential(250*time.Millisecond)),
		func(ctx context.Context) error {
			n, err := srv.Reconcile(ctx)
			if err != nil {
				logger.Warn("reconcile unfinished runs; trying again", "err", err)
				return retry.RetryableError(err)
			}
			adopted = n
			return nil
		})
	if err != nil {
		return fmt.Errorf("reconcile the runs this node left unfinished (the run store did not answer for %v): %w", reconcileWait, err)
	}
	if adopted > 0 {
		logger.Info("adopting unfinished runs", "count", adopted)
	}
	if err := exec.Start(ctx); err != nil {
		// The daemon may come later; readiness says so meanwhile.
		logger.Warn("executor start", "err", err)
	} else {
		warnCPUMaximum(ctx, engine, exec, logger)
	}

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	addr := ln.Addr().String()
	if err := srv.JoinCluster(ctx, "http://"+addr); err != nil {
		ln.Close()
		return fmt.Errorf("join the cluster (register this node): %w", err)
	}
	logger.Info("sandgate listening", "addr", addr, "node", cfg.Node, "air_gapped", cfg.AirGapped,
		"policy_revision", engine.Status().Revision, "audit_chain", store.ChainID())
	if devToken != "" {
		printDevBanner(a.stdout, addr, devToken, cfg.Console)
	}
	if a.onListen != nil {
		a.onListen(addr, devToken)
	}
	return srv.Serve(ctx, ln)
}

// loadPrincipals reads the tokens file, or makes a development token when
// there is none and development mode is on.
func loadPrincipals(cfg Config) (*gateway.Principals, string, error) {
	if cfg.TokensFile != "" {
		p, err := gateway.LoadPrincipals(cfg.TokensFile)
		return p, "", err
	}
	return gateway.DevPrincipals()
}

func migrate(ctx context.Context, dsn string, logger *slog.Logger) error {
	db, err := audit.OpenDB(ctx, dsn)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	defer db.Close()
	n, err := migrations.Up(ctx, db)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	if n > 0 {
		logger.Info("applied migrations", "count", n)
	}
	return nil
}

// printDevBanner tells a developer how to use the token just made.
func printDevBanner(w io.Writer, addr, token string, withConsole bool) {
	host := addr
	if h, port, err := net.SplitHostPort(addr); err == nil && (h == "" || h == "::" || h == "0.0.0.0") {
		host = net.JoinHostPort("127.0.0.1", port)
	}
	url := "http://" + host
	lines := []string{
		"",
		"sandgate is listening on " + url + " (development mode)",
		"",
		"  development token (roles submitter, security, auditor, admin; team dev):",
		"    export SANDGATE_URL=" + url,
		"    export SANDGATE_TOKEN=" + token,
		"",
		"  try it:",
		`    curl -s -H "Authorization: Bearer $SANDGATE_TOKEN" -H 'Content-Type: application/json' \`,
		`      -d '{"command": ["sh", "-c", "echo hello from the sandbox; id -u"]}' "$SANDGATE_URL/v1/runs?wait=30s"`,
		"    ./bin/sandgate run -- sh -c 'echo hello; exit 3'; echo \"exit code $?\"",
		"",
	}
	if withConsole {
		lines = append(lines, "  console: "+url+"/console/ (sign in with the token above)", "")
	}
	fmt.Fprintln(w, strings.Join(lines, "\n"))
	if f, ok := w.(*os.File); ok {
		_ = f.Sync()
	}
}

// warnCPUMaximum warns when the policy admits more CPUs than this node's
// daemon can give a container: Docker refuses such a create, so a run the
// policy admitted would fail with SBX-001. The policy cannot know the
// node's size; maxima.cpus should be at most the smallest node's CPUs.
func warnCPUMaximum(ctx context.Context, engine *policies.Engine, exec *executor.Executor, logger *slog.Logger) {
	maxima, _ := engine.PolicyConfig()["maxima"].(map[string]any)
	var max float64
	switch v := maxima["cpus"].(type) {
	case float64:
		max = v
	case json.Number:
		max, _ = v.Float64()
	default:
		return
	}
	cpus, err := exec.CPUs(ctx)
	if err != nil || cpus <= 0 {
		return
	}
	if max > float64(cpus) {
		logger.Warn("the policy admits more CPUs than this node has: runs asking for more than the node's CPUs will fail with SANDGATE-SBX-001; lower data.sandgate.config.maxima.cpus",
			"maxima_cpus", max, "node_cpus", cpus)
	}
}

// reloadOnSIGHUP reloads the policy on every SIGHUP until ctx ends. The
// process, not the engine, owns its signals.
func reloadOnSIGHUP(ctx context.Context, engine *policies.Engine, logger *slog.Logger) {
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
			if _, err := engine.ReloadFor(ctx, "sighup"); err != nil && ctx.Err() == nil {
				logger.Warn("policy reload on SIGHUP refused; the policy in force stays", "err", err)
			}
		}
	}
}
