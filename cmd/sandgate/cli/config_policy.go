package cli

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/pflag"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/policies"
)

// policyConfig is admission's: the bundle, the settings the policies see
// (air-gapped, the mount roots), and the bounds of a policy replay.
type policyConfig struct {
	// PolicyDir is the Rego bundle to load and watch
	// (SANDGATE_POLICY_DIR); empty, the bundle embedded in the binary.
	PolicyDir string
	// PolicyVerifyKeys is a PEM file or a directory of PEM files of the
	// public keys every bundle must be signed by
	// (SANDGATE_POLICY_VERIFY_KEYS); empty, bundles are not verified.
	PolicyVerifyKeys string
	AirGapped        bool // SANDGATE_AIR_GAPPED
	// MountRoots are the host directories under which bind mounts may be
	// requested (SANDGATE_MOUNT_ROOTS, colon-separated).
	MountRoots []string
	// ReplayMaxDecisions and ReplayTimeout bound one policy replay
	// (SANDGATE_REPLAY_MAX_DECISIONS, SANDGATE_REPLAY_TIMEOUT); zero is
	// the gateway's default.
	ReplayMaxDecisions int
	ReplayTimeout      time.Duration
	// EvalMemoryMB and EvalCPUSeconds bound the child process in which a
	// bundle not yet in force (a replay's candidate, a reload's tests)
	// is evaluated (SANDGATE_POLICY_EVAL_MEMORY_MB,
	// SANDGATE_POLICY_EVAL_CPU_SECONDS); zero is the default.
	EvalMemoryMB   int
	EvalCPUSeconds int
	invalid        []string
	// hostGroups are the host's groups no run may hold, found by serve at
	// start (executor.HostGroups: the Docker socket's, the mount roots'),
	// not read from the environment (#28 item 7).
	hostGroups []sandgate.HostGroup
}

func readPolicyConfig(getenv func(string) string) policyConfig {
	var c policyConfig
	e := envReader{getenv: getenv}
	e.str("SANDGATE_POLICY_DIR", &c.PolicyDir)
	e.str("SANDGATE_POLICY_VERIFY_KEYS", &c.PolicyVerifyKeys)
	e.boolean("SANDGATE_AIR_GAPPED", &c.AirGapped)
	if v := getenv("SANDGATE_MOUNT_ROOTS"); v != "" {
		c.MountRoots = splitRoots(v)
	}
	e.int("SANDGATE_REPLAY_MAX_DECISIONS", &c.ReplayMaxDecisions)
	e.duration("SANDGATE_REPLAY_TIMEOUT", &c.ReplayTimeout, false, "30s or 2m")
	e.int("SANDGATE_POLICY_EVAL_MEMORY_MB", &c.EvalMemoryMB)
	e.int("SANDGATE_POLICY_EVAL_CPU_SECONDS", &c.EvalCPUSeconds)
	c.invalid = e.invalid
	return c
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

func (c *policyConfig) bindFlags(f *pflag.FlagSet) {
	f.StringVar(&c.PolicyDir, "policy-dir", c.PolicyDir, "Rego bundle directory (SANDGATE_POLICY_DIR; default: the embedded bundle)")
	f.StringVar(&c.PolicyVerifyKeys, "policy-verify-keys", c.PolicyVerifyKeys, "PEM public keys (a file, or a directory of *.pem) every policy bundle must be signed by (SANDGATE_POLICY_VERIFY_KEYS)")
	f.BoolVar(&c.AirGapped, "air-gapped", c.AirGapped, "force network none and never pull (SANDGATE_AIR_GAPPED)")
	f.StringSliceVar(&c.MountRoots, "mount-root", c.MountRoots, "host directory under which bind mounts may be requested; repeatable (SANDGATE_MOUNT_ROOTS, colon-separated)")
}

// Validate checks the mount roots and the replay bounds.
func (c *policyConfig) Validate() error {
	if err := invalidError(c.invalid); err != nil {
		return err
	}
	for _, r := range c.MountRoots {
		if !filepath.IsAbs(r) {
			return fmt.Errorf("SANDGATE_MOUNT_ROOTS: %q is not an absolute path", r)
		}
	}
	if c.ReplayMaxDecisions < 0 || c.ReplayMaxDecisions > 1_000_000 {
		return fmt.Errorf("SANDGATE_REPLAY_MAX_DECISIONS must be between 0 (the default, 10000) and 1000000, not %d", c.ReplayMaxDecisions)
	}
	if c.ReplayTimeout < 0 || c.ReplayTimeout > time.Hour {
		return fmt.Errorf("SANDGATE_REPLAY_TIMEOUT must be between 0 (the default, 1m) and 1h, not %s", c.ReplayTimeout)
	}
	if c.EvalMemoryMB != 0 && (c.EvalMemoryMB < 64 || c.EvalMemoryMB > 65536) {
		return fmt.Errorf("SANDGATE_POLICY_EVAL_MEMORY_MB must be between 64 and 65536 (0: the default, %d), not %d", policies.DefaultEvaluatorMemoryMB, c.EvalMemoryMB)
	}
	if c.EvalCPUSeconds < 0 || c.EvalCPUSeconds > 3600 {
		return fmt.Errorf("SANDGATE_POLICY_EVAL_CPU_SECONDS must be between 1 and 3600 (0: the default, %d), not %d", policies.DefaultEvaluatorCPUSeconds, c.EvalCPUSeconds)
	}
	return nil
}

// verifyKeys are the pinned bundle keys, nil when none are configured.
func (c *policyConfig) verifyKeys() (*policies.VerifyKeys, error) {
	if c.PolicyVerifyKeys == "" {
		return nil, nil
	}
	return policies.LoadVerifyKeys(c.PolicyVerifyKeys)
}

// settings are what the policies see of this gateway.
func (c *policyConfig) settings() sandgate.Settings {
	return sandgate.Settings{AirGapped: c.AirGapped, MountRoots: c.MountRoots, HostGroups: c.hostGroups}
}

// engine loads and compiles the bundle (its tests pass, or it is
// refused), reporting policy.loaded and every later reload to events.
// Each load's tests, and every replay's candidate, run in a child process
// of this binary under the evaluator's limits. Watching the directory
// starts with watch, once serve has registered.
func (c *policyConfig) engine(ctx context.Context, events sandgate.EventSink, logger *slog.Logger) (*policies.Engine, error) {
	keys, err := c.verifyKeys()
	if err != nil {
		return nil, err
	}
	logger = logger.With("component", "policies")
	eval, err := policies.NewEvaluator("", policies.EvaluatorLimits{MemoryMB: int64(c.EvalMemoryMB), CPUSeconds: int64(c.EvalCPUSeconds)}, logger)
	if err != nil {
		return nil, err
	}
	engine, err := policies.New(ctx, policies.Options{
		Dir:        c.PolicyDir,
		Settings:   c.settings(),
		Events:     events,
		Logger:     logger,
		VerifyKeys: keys,
		Evaluator:  eval,
	})
	if err != nil {
		return nil, fmt.Errorf("load policy: %w", err)
	}
	return engine, nil
}

// watch reloads the policy when its directory changes and on SIGHUP,
// until ctx ends.
func watch(ctx context.Context, engine *policies.Engine, logger *slog.Logger) {
	go func() {
		if err := engine.Watch(ctx); err != nil && !errors.Is(err, context.Canceled) {
			logger.Error("policy watch", "err", err)
		}
	}()
	go reloadOnSIGHUP(ctx, engine, logger)
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
