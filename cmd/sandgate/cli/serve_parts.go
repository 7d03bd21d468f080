package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit"
	"github.com/sandgate/sandgate/executor"
	"github.com/sandgate/sandgate/executor/images"
	"github.com/sandgate/sandgate/gateway"
	"github.com/sandgate/sandgate/policies"
	"github.com/sandgate/sandgate/runstore"
	"github.com/sandgate/sandgate/secrets"
)

// parts are the components serve builds, each from its own config, and
// gives the gateway. The first group is made and checked before anything
// is registered (checkServe); the second is what registers this node
// (registerServe).
type parts struct {
	logger        *slog.Logger
	advertise     string
	principals    *gateway.Principals
	devToken      string
	callbackKey   []byte
	clusterSecret []byte
	keys          trailKeys
	sinks         *sinkTargets
	registry      *prometheus.Registry
	metrics       *gateway.Metrics
	events        *heldEvents
	blobs         *laterBlobs
	pool          *warmPool
	engine        *policies.Engine
	exec          *executor.Executor
	images        *images.Images
	keyring       *secrets.Keyring

	store *audit.Store
	runs  *runstore.Store
	// control is the node registry over the trail's control pool: the
	// heartbeat and takeovers, on connections no request takes.
	control  *runstore.Store
	streamer *audit.Streamer
	vault    *secrets.Vault
}

// teardown is what serve undoes when it returns, last made first undone:
// the runs and containers end before the trail closes, so that their
// events are committed or spooled.
type teardown []func()

func (t *teardown) push(f func()) { *t = append(*t, f) }

func (t *teardown) run() {
	for i := len(*t) - 1; i >= 0; i-- {
		(*t)[i]()
	}
}

// closeWith pushes a close of c, logged when it fails.
func (t *teardown) closeWith(what string, c io.Closer, logger *slog.Logger) {
	t.push(func() {
		if err := c.Close(); err != nil {
			logger.Error("close "+what, "err", err)
		}
	})
}

// newMetrics is the gateway's Prometheus registry, with the Go runtime's
// and the process's collectors.
func newMetrics() (*prometheus.Registry, *gateway.Metrics, error) {
	registry := prometheus.NewRegistry()
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics, err := gateway.NewMetrics(registry)
	return registry, metrics, err
}

// heldEvents holds the events emitted while serve starts (the policy's
// first policy.loaded) until the trail is open, then hands them over and
// forwards every later one. The events of a start that fails before the
// trail opens go with it: nothing of it is recorded.
type heldEvents struct {
	mu   sync.Mutex
	held []sandgate.Event
	to   sandgate.EventSink
}

// Emit holds ev, or forwards it once released.
func (h *heldEvents) Emit(ev sandgate.Event) {
	h.mu.Lock()
	to := h.to
	if to == nil {
		h.held = append(h.held, ev)
	}
	h.mu.Unlock()
	if to != nil {
		to.Emit(ev)
	}
}

// release forwards the events held, in order, and every later one to to.
func (h *heldEvents) release(to sandgate.EventSink) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, ev := range h.held {
		to.Emit(ev)
	}
	h.held, h.to = nil, to
}

// laterBlobs is the run store's blob store, which the executor is given
// when it is built, before the run store opens with the trail: nothing
// runs, so nothing stores a blob, until it is set.
type laterBlobs struct {
	store atomic.Pointer[runstore.Store]
}

var errNoBlobStore = errors.New("the run store is not open yet")

// PutBlob stores r in the run store.
func (b *laterBlobs) PutBlob(ctx context.Context, r io.Reader) (string, int64, error) {
	s := b.store.Load()
	if s == nil {
		return "", 0, sandgate.WrapError(sandgate.CodeUnavailable, errNoBlobStore, "store a blob")
	}
	return s.PutBlob(ctx, r)
}

// WriteBlob writes a blob of the run store to w.
func (b *laterBlobs) WriteBlob(ctx context.Context, sha256 string, off, n int64, w io.Writer) error {
	s := b.store.Load()
	if s == nil {
		return sandgate.WrapError(sandgate.CodeUnavailable, errNoBlobStore, "read a blob")
	}
	return s.WriteBlob(ctx, sha256, off, n, w)
}

// warmPool keeps the warm pool's profiles following the policy: a reload
// that changes the defaults runs get changes which containers are worth
// keeping warm, so the pool follows each policy.loaded.
type warmPool struct {
	cfg    *config
	logger *slog.Logger
	mu     sync.Mutex
	exec   atomic.Pointer[executor.Executor]
	engine atomic.Pointer[policies.Engine]
}

// follow passes every event on to next, and re-warms the pool after a
// policy.loaded once it has an executor.
func (w *warmPool) follow(next sandgate.EventSink) sandgate.EventSink {
	return sandgate.EventSinkFunc(func(ev sandgate.Event) {
		next.Emit(ev)
		ex, engine := w.exec.Load(), w.engine.Load()
		if ev.Type != sandgate.EventPolicyLoaded || ex == nil || engine == nil {
			return
		}
		go func() {
			w.mu.Lock()
			defer w.mu.Unlock()
			profiles, err := warmProfiles(w.cfg, engine)
			if err == nil {
				err = ex.SetWarmProfiles(profiles)
			}
			if err != nil {
				w.logger.Error("warm pool: keeping the previous profile after a policy reload", "err", err)
			}
		}()
	})
}

// warmProfiles are the specs the warm pool keeps containers of: the
// default spec the policy in force fills in. A run is served from the
// pool only when its admitted container would be configured exactly like
// one of these. None without a warm pool.
func warmProfiles(cfg *config, engine *policies.Engine) ([]sandgate.Normalized, error) {
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
