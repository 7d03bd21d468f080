package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/sethvargo/go-retry"
	"github.com/spf13/cobra"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor"
	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/policies"
	"github.com/sandgate/sandgate/runstore"
	"github.com/sandgate/sandgate/secrets"
)

// newServeCmd builds `sandgate serve`: the gateway with its policy engine,
// audit trail, run store and Docker executor.
func newServeCmd(a *app) *cobra.Command {
	return &cobra.Command{
		Use:   "serve",
		Short: "Run the gateway",
		Long: `Run the gateway: the HTTP API on SANDGATE_LISTEN, the policy engine
(hot-reloaded from SANDGATE_POLICY_DIR, or the embedded bundle), the audit
trail in Postgres and the Docker executor. SIGTERM or SIGINT stops accepting
requests, finishes or cancels in-flight runs, removes every container and
flushes the audit trail before exit. SIGHUP reloads the policy.

Serve binds its port and checks its configuration, files, keys, policy,
mount roots and database before it registers anything (its audit chains and
key, its node, its warm pool and reaper): a serve that cannot start leaves
no trace another gateway could act on.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return serve(cmd.Context(), a)
		},
	}
}

// serve runs the gateway until ctx is done. It only assembles: each
// component is built from its own config by a constructor of its own.
func serve(ctx context.Context, a *app) error {
	cfg := &a.cfg
	// Every request writes a log line under the handler's lock: a
	// destination that stalls must not stall them all. Deferred first, so
	// that it is written out last, after everything below has logged.
	logw := newLogWriter(a.stderr, logBufferBytes)
	defer logw.Close()
	logger := slog.New(slog.NewJSONHandler(logw, &slog.HandlerOptions{Level: slog.LevelInfo}))
	tuneGC(logger)
	var down teardown
	defer down.run()
	// Without a node name of its own, an installation keeps one in its
	// state directory the first time (#28 item 8).
	if cfg.keepIn != "" {
		node, err := executor.KeepNode(cfg.keepIn)
		if err != nil {
			return err
		}
		cfg.Node = node
	}

	// Checked first, the socket bound before anything else: a start that
	// fails leaves nothing a running gateway could act on.
	ln, err := cfg.gatewayConfig.listen()
	if err != nil {
		return err
	}
	down.push(func() { _ = ln.Close() }) // Serve closes it once it serves
	p := &parts{logger: logger, advertise: cfg.advertised(ln.Addr())}
	if err := checkServe(ctx, cfg, p, &down); err != nil {
		return err
	}

	// Registered last: the trail's chains and key, then the node, the
	// runs it adopts, its reaper and its warm pool.
	if err := registerServe(ctx, cfg, p, &down); err != nil {
		return err
	}
	srv, err := newGateway(cfg, p)
	if err != nil {
		return err
	}
	if err := adoptUnfinished(ctx, srv, logger); err != nil {
		return err
	}
	watch(ctx, p.engine, logger)
	if err := p.exec.Start(ctx); err != nil {
		// The daemon may come later; readiness says so meanwhile.
		logger.Warn("executor start", "err", err)
	} else {
		warnCPUMaximum(ctx, p.engine, p.exec, logger)
	}
	addr := ln.Addr().String()
	if err := srv.JoinCluster(ctx, p.advertise); err != nil {
		return fmt.Errorf("join the cluster (register this node): %w", err)
	}
	logger.Info("sandgate listening", "addr", addr, "node", cfg.Node, "air_gapped", cfg.AirGapped,
		"policy_revision", p.engine.Status().Revision, "audit_chain", p.store.ChainID())
	if p.devToken != "" {
		printDevBanner(a.stdout, addr, p.devToken, cfg.Console)
	}
	if a.onListen != nil {
		a.onListen(addr, p.devToken)
	}
	return srv.Serve(ctx, ln)
}

// checkServe reads every file serve needs, loads the policy and builds
// the executor, and checks the database answers (migrating it when asked):
// everything that can refuse a start, before anything is registered. The
// events of this phase are held until the trail is open.
func checkServe(ctx context.Context, cfg *config, p *parts, down *teardown) error {
	var err error
	if p.principals, p.devToken, err = cfg.gatewayConfig.principals(); err != nil {
		return err
	}
	if p.callbackKey, err = loadCallbackKey(cfg.CallbackKeyFile); err != nil {
		return err
	}
	if p.clusterSecret, err = cfg.nodeConfig.clusterSecret(); err != nil {
		return err
	}
	if p.keys, err = cfg.trailConfig.keys(cfg.Node); err != nil {
		return err
	}
	if p.keyring, err = cfg.secretsConfig.keyring(); err != nil {
		return err
	}
	if p.sinks, err = cfg.sinkConfig.load(); err != nil {
		return err
	}
	down.push(p.sinks.close)
	if p.registry, p.metrics, err = newMetrics(); err != nil {
		return err
	}
	p.events, p.blobs = &heldEvents{}, &laterBlobs{}
	p.pool = &warmPool{cfg: cfg, logger: p.logger}
	// The host's groups that open doors on it (the Docker socket's, the
	// mount roots'): denied by policy and by the executor (#28 item 7).
	if cfg.hostGroups, err = executor.HostGroups(cfg.DockerHost, cfg.MountRoots); err != nil {
		return err
	}
	if p.engine, err = cfg.policyConfig.engine(ctx, p.pool.follow(p.events), p.logger); err != nil {
		return err
	}
	p.pool.engine.Store(p.engine)
	if p.exec, err = newExecutor(cfg, p); err != nil {
		return err
	}
	down.closeWith("executor", p.exec, p.logger)
	// The node's lease on its daemon: another live gateway holding the
	// node refuses this start (#28 item 8); a daemon that does not answer
	// yet is claimed by Start. Close gives it up when a later check fails.
	if err := p.exec.Claim(ctx); sandgate.ErrorCodeOf(err) == sandgate.CodeConflict {
		return err
	} else if err != nil {
		p.logger.Warn("claim the node's lease on the docker daemon; trying again when it answers", "err", err)
	}
	if p.images, err = newImages(cfg, p.logger); err != nil {
		return err
	}
	down.closeWith("images", p.images, p.logger)
	if err := gatewaySettings(cfg, p).Validate(); err != nil {
		return err
	}
	return cfg.databaseConfig.prepare(ctx, p.logger)
}

// registerServe opens the trail (this node's chains and key), hands it the
// events held, starts retention and the sinks, and opens the run store.
// The executor shuts down (every container gone) before the trail closes.
func registerServe(ctx context.Context, cfg *config, p *parts, down *teardown) error {
	var err error
	if p.store, err = cfg.trailConfig.open(ctx, cfg.DatabaseURL, cfg.Node, p.keys, p.logger); err != nil {
		return err
	}
	down.push(func() {
		closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer cancel()
		if err := p.store.Close(closeCtx); err != nil {
			p.logger.Error("close audit trail", "err", err)
		}
	})
	p.events.release(p.store)
	down.push(cfg.trailConfig.retain(ctx, p.store))
	// The sinks read the trail on connections of their own; they stop
	// before it closes, and a batch in flight is sent again by whichever
	// gateway delivers the sink next.
	if p.streamer, err = p.sinks.start(cfg.DatabaseURL, p.logger.With("component", "sinks")); err != nil {
		return err
	}
	if p.streamer != nil {
		down.push(func() {
			closeCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
			defer cancel()
			if err := p.streamer.Close(closeCtx); err != nil {
				p.logger.Error("close audit sinks", "err", err)
			}
		})
	}
	// Runs share the trail's connection pool, which closes with it.
	if p.runs, err = runstore.New(p.store.DB(), runstore.Config{}); err != nil {
		return fmt.Errorf("open run store: %w", err)
	}
	if p.control, err = runstore.New(p.store.ControlDB(), runstore.Config{}); err != nil {
		return fmt.Errorf("open run store: %w", err)
	}
	p.blobs.store.Store(p.runs)
	if p.keyring != nil {
		// Secrets live in the run store's database, sealed; their
		// changes are committed to the trail, their values hashed with
		// its mask key.
		if p.vault, err = secrets.New(secrets.Options{Keys: p.keyring, Store: p.runs, Recorder: p.store, Masker: p.store.Masker()}); err != nil {
			return err
		}
	}
	if cfg.WarmPool > 0 {
		p.pool.exec.Store(p.exec)
	}
	down.push(func() {
		downCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 60*time.Second)
		defer cancel()
		if err := p.exec.Shutdown(downCtx); err != nil {
			p.logger.Error("executor shutdown", "err", err)
		}
	})
	return nil
}

// reconcileWait is how long serve keeps trying to list the runs a
// previous process left unfinished before it gives up starting.
const reconcileWait = 30 * time.Second

// adoptUnfinished holds the runs a previous process of this node left
// unfinished before the reaper's first pass, so that their containers are
// adopted and finished, not reaped. A run store that does not answer is
// tried again for up to reconcileWait; after that serve refuses to start
// rather than let the reaper remove containers it should have adopted.
func adoptUnfinished(ctx context.Context, srv *gateway.Server, logger *slog.Logger) error {
	adopted := 0
	err := retry.Do(ctx, retry.WithMaxDuration(reconcileWait, retry.NewExponential(250*time.Millisecond)),
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
