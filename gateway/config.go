package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/admission"
	"github.com/sandgate/sandgate/gateway/api"
)

// Config is the gateway's behaviour. The zero value of every field but
// MaskKey means the documented default; Validate reports what is wrong.
type Config struct {
	// Node names this gateway replica; it goes on every run, audit event
	// and log line. Default: "local".
	Node string
	// AirGapped is passed to policy (settings.air_gapped) and to the
	// executor (Job.AirGapped).
	AirGapped bool
	// MountRoots are the host directories under which bind mounts may be
	// requested (settings.mount_roots). Each must be absolute.
	MountRoots []string
	// MaxWait caps POST /v1/runs?wait=. Default 5 minutes.
	MaxWait time.Duration
	// CancelOnShutdown makes Shutdown cancel in-flight runs at once. When
	// false, Shutdown lets them finish for up to ShutdownGrace and cancels
	// what is still running after that.
	CancelOnShutdown bool
	// ShutdownGrace bounds how long Shutdown waits for runs and open
	// requests. Default 30 seconds.
	ShutdownGrace time.Duration
	// BodyLimit is the largest request body accepted; larger bodies answer
	// 413 SANDGATE-TOO-LARGE. Default and maximum: sandgate.MaxSpecBytes
	// (1 MiB).
	BodyLimit int64
	// MaskKey is the HMAC-SHA256 key that turns secrets (env values, stdin
	// and the paths a decision's Mask names) into keyed hashes before they
	// reach the audit trail. At least 16 bytes, stable across restarts so
	// that equal secrets hash equally. When empty, the Recorder must be a
	// MaskerSource (the audit store is) and its Masker is used.
	MaskKey []byte
	// AuthFailureRate and AuthFailureBurst rate-limit failed
	// authentication and authorisation per source address: once a source
	// has spent its burst, every request from it answers 429 until the
	// bucket refills. Defaults: 1 per second, burst 10.
	AuthFailureRate  float64
	AuthFailureBurst int
	// RateLimit and RateBurst, when RateLimit > 0, limit every /v1 request
	// per source address. Default: off.
	RateLimit float64
	RateBurst int
	// TrustProxyHeaders takes the source address from X-Forwarded-For and
	// X-Real-IP. Only set it behind a proxy that overwrites them.
	TrustProxyHeaders bool
	// RetryAfter is the Retry-After sent with 503 and 429 answers. Default
	// 5 seconds.
	RetryAfter time.Duration
	// HeartbeatInterval is how often an idle followed log stream sends an
	// SSE comment so that proxies keep it open. Default 15 seconds.
	HeartbeatInterval time.Duration
	// Limits and AllowedImages are what GET /v1/config reports as the
	// maxima and image repositories in force when the Admitter is not a
	// PolicyConfigReporter. The policy bundle enforces them; this copy
	// only informs clients.
	Limits        api.Limits
	AllowedImages []string
	// CallbackKey is the HMAC-SHA256 key that signs completion callbacks
	// (X-Sandgate-Signature, see SignCallback); at least 16 bytes. Without
	// it a run that asks for a callback_url is refused.
	CallbackKey []byte
	// CallbackAttempts bounds the attempts of one callback (default 5);
	// CallbackTimeout bounds each (default 10 seconds); CallbackBackoff is
	// the wait after the first failed attempt, doubled after each and
	// capped at 30 seconds (default 1 second).
	CallbackAttempts int
	CallbackTimeout  time.Duration
	CallbackBackoff  time.Duration
	// CallbackWorkers deliver callbacks at once (default 4) from a queue
	// of at most CallbackQueue (default 1024; beyond it a callback is
	// recorded failed at once). CallbackDrain bounds how long Shutdown
	// lets pending callbacks be delivered (default 10 seconds).
	CallbackWorkers int
	CallbackQueue   int
	CallbackDrain   time.Duration

	// callbackLookup resolves callback hosts; tests set it.
	callbackLookup func(ctx context.Context, host string) ([]netip.Addr, error)
	// UploadDir holds the workspace archives of multipart runs from their
	// request to their run's end; it is this node's alone (New removes the
	// archives a previous process left there). Default:
	// sandgate-uploads/<node> in the system's temporary directory.
	UploadDir string
	// MaxWorkspaceBytes caps a workspace archive as sent; larger ones
	// answer 413. Default 256 MiB.
	MaxWorkspaceBytes int64
	// Uploads bound the uploads under way and the bytes they hold, per
	// principal, per team and in all (package admission's defaults for
	// zero fields); MaxBytes is MaxWorkspaceBytes.
	Uploads admission.UploadLimits
	// MaxWorkspaceUnpackedBytes caps what a workspace archive unpacks to;
	// the policy then holds it to the run's resources.workspace_mb.
	// Default 4 GiB.
	MaxWorkspaceUnpackedBytes int64
	// ReplayMaxDecisions bounds the decisions one policy replay evaluates
	// (its limit parameter may ask for fewer). Default 10,000.
	ReplayMaxDecisions int
	// ReplayTimeout bounds one policy replay; a replay out of time
	// answers what it replayed so far, marked timed_out. Default 1 minute.
	ReplayTimeout time.Duration
	// ApprovalSweep is how often the gateway expires the approvals whose
	// time ran out (default 30 s).
	ApprovalSweep time.Duration

	// The cluster (with Deps.Cluster): AdvertiseURL is where the other
	// nodes reach this node's API; ClusterSecret (at least 16 bytes, the
	// same on every node) signs the requests one node forwards to another,
	// and without it nothing is forwarded. NodeHeartbeat is how often the
	// node heartbeats (default 2 s); NodeLapse how old a heartbeat may be
	// before a survivor takes the node over (default 15 s). DockerHost is
	// this node's daemon as the registry records it, for a survivor to
	// reach; Capacity how many runs may hold a container here at once
	// (the executor's MaxConcurrent). KeyID and PublicKey (hex) are this
	// node's audit checkpoint key, Version the build.
	AdvertiseURL  string
	ClusterSecret []byte
	NodeHeartbeat time.Duration
	NodeLapse     time.Duration
	DockerHost    string
	Capacity      int
	KeyID         string
	PublicKey     string
	Version       string

	// MaxSessions is the node's session budget (the executor's), and
	// TeamSharePercent the most of it and of Capacity one team may hold:
	// with them admission refuses a team over its share (0: no bound).
	MaxSessions      int
	TeamSharePercent int
}

// capacity is the node's capacity as its teams share it.
func (c Config) capacity() sandgate.Capacity {
	return sandgate.Capacity{Runs: c.Capacity, Sessions: c.MaxSessions, SharePercent: c.TeamSharePercent}
}

// PolicyConfigReporter is implemented by an Admitter that can show the
// configuration of the policy in force (the bundle's sandgate.config
// data: "maxima", "allowed_images", …). GET /v1/config then reports the
// maxima and allowed images from it, current after every reload.
type PolicyConfigReporter interface {
	PolicyConfig() map[string]any
}

// MaskerSource is implemented by a Recorder that masks with a key of its
// own (the audit store). When Config.MaskKey is empty the gateway uses its
// Masker, so that the gateway's hashes and the trail's agree.
type MaskerSource interface {
	Masker() sandgate.Masker
}

// Authenticator maps a bearer token to its principal. *Principals is the
// implementation LoadPrincipals and DevPrincipals return.
type Authenticator interface {
	// Authenticate returns the principal whose token this is. It must take
	// the same time whatever the token.
	Authenticate(token string) (sandgate.Principal, bool)
}

// Deps are the parts the gateway drives. Every interface field is
// required; Clock, IDs, Logger, Registry and Metrics have defaults.
type Deps struct {
	// Admitter decides runs and reviews (package policies).
	Admitter sandgate.Admitter
	// Policies reports and reloads the policy (package policies).
	Policies sandgate.PolicyAdmin
	// Recorder commits admission events and receives auth.denied and
	// admission.reviewed (package audit).
	Recorder sandgate.Recorder
	// Audit answers audit queries, exports and verification (package audit).
	Audit sandgate.AuditTrail
	// Proofs answers checkpoint notes, inclusion and consistency proofs
	// and stores witnesses' cosignatures (package audit). Optional:
	// without it those routes answer NOT-FOUND.
	Proofs sandgate.AuditProofs
	// Runs stores runs (package runstore).
	Runs sandgate.RunStore
	// Keys claims Idempotency-Keys (package runstore). Optional: Runs is
	// used when it claims them; without either, a run with a key is
	// refused.
	Keys sandgate.IdempotencyKeys
	// Executor runs admitted jobs (package executor).
	Executor sandgate.Executor
	// Approvals keeps approvals (package runstore). Optional: without
	// it a decision that needs approval is a denial that says so.
	Approvals sandgate.ApprovalStore
	// Sessions stores sessions (package runstore). Optional: without it
	// (or with an Executor that is no sandgate.SessionExecutor), the
	// session routes answer NOT-FOUND.
	Sessions sandgate.SessionStore
	// Sandboxes lists and cleans up managed containers (package executor).
	Sandboxes sandgate.SandboxAdmin
	// Reconciler takes over the runs a previous process of this node left
	// unfinished. Optional: without it (and an Executor that is not one),
	// such runs end as lost.
	Reconciler sandgate.Reconciler
	// Volumes lists and removes the teams' cache volumes (package
	// executor). Optional: without it, /v1/volumes answers NOT-FOUND.
	Volumes sandgate.VolumeAdmin
	// Artifacts keeps the runs' collected artifacts (package runstore).
	// Optional: without it, the artifact routes answer NOT-FOUND and a
	// run's collection is not listed.
	Artifacts sandgate.ArtifactStore
	// Images lists the images sandgate built on this node's daemon, which
	// GET /v1/config reports with their IDs (package executor's Images).
	// Optional: without it the list is empty.
	Images sandgate.ImageCatalog
	// ImagePackages reads the package list an image carries, for GET
	// /v1/images/{ref}/packages (package executor/images' Images).
	// Optional: without it that route answers NOT-FOUND.
	ImagePackages sandgate.ImagePackageLister
	// Sinks reports where each audit sink (SIEM stream) stands (package
	// audit's Streamer). Optional: without it there are no sink metrics
	// and no sink warnings in /readyz.
	Sinks SinkReporter
	// Console, when set, is served under /console/ (package console's
	// Handler); / and /console redirect to it. Optional: without it the
	// gateway serves the API alone.
	Console http.Handler
	// MCP, when set, makes the MCP server's streamable HTTP transport
	// (package mcp's Handler) over the gateway's own handler, mounted at
	// /v1/mcp behind authentication. Optional: without it /v1/mcp is not
	// served.
	MCP func(api http.Handler, maxBody int64) http.Handler
	// Secrets keeps the secrets runs use through the egress proxy
	// (package secrets' Vault). Optional: without it /v1/secrets answers
	// NOT-FOUND and a run that names secrets is refused.
	Secrets SecretVault
	// Principals authenticates bearer tokens of the tokens file
	// (LoadPrincipals, DevPrincipals, TokensFile).
	Principals Authenticator
	// Authorizer maps sign-ins to principals and decides who may do what
	// on every route (package policies, authz.rego).
	Authorizer sandgate.Authorizer
	// Tokens verifies OpenID Connect bearer tokens (package identity).
	// Optional: without it only tokens of the tokens file and client
	// certificates sign in.
	Tokens TokenVerifier
	// Login is the console's sign-in through the OpenID provider
	// (package identity). Optional: without it the console takes a
	// pasted token only.
	Login ConsoleLogin
	// Clock defaults to time.Now.
	Clock sandgate.Clock
	// IDs makes run IDs; defaults to UUIDv7.
	IDs sandgate.IDSource
	// Logger receives the gateway's logs (one line per request, and each
	// run's start and end), each with its correlation ID and the node;
	// give it a component attribute if wanted. Defaults to discarding.
	Logger *slog.Logger
	// Registry is where the gateway's collectors are registered when
	// Metrics is nil; defaults to a new registry (see NewMetrics).
	Registry prometheus.Registerer
	// Gatherer serves /metrics; defaults to the registry the metrics are
	// registered on when it is a Gatherer, else prometheus.DefaultGatherer.
	Gatherer prometheus.Gatherer
	// Cluster is the node registry and the cluster's shared counts
	// (package runstore). Optional: without it the gateway is a node
	// alone, as before (no registry, no forwarding, limits per node).
	Cluster ClusterStore
	// ClusterControl is the same registry over database connections that
	// request traffic cannot take (audit.Store.ControlDB): the heartbeat,
	// the registration and the takeovers go through it, so that no
	// client's pace can make this node look dead. Default Cluster.
	ClusterControl ClusterStore
	// RemoteReconcilers reaches a dead node's Docker daemon to adopt its
	// containers (package executor). Optional: without it a dead node's
	// runs are lost.
	RemoteReconcilers RemoteReconcilers
	// CloseChains closes a dead node's audit chains (package audit).
	// Optional.
	CloseChains ChainCloser
	// Metrics, when set, is used instead of creating collectors on
	// Registry; pass the one whose Sink wraps the executor's event sink.
	Metrics *Metrics
}

// withDefaults returns c with every zero field set to its default.
func (c Config) withDefaults() Config {
	if c.Node == "" {
		c.Node = "local"
	}
	if c.MaxWait <= 0 {
		c.MaxWait = 5 * time.Minute
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = 30 * time.Second
	}
	if c.ApprovalSweep <= 0 {
		c.ApprovalSweep = 30 * time.Second
	}
	if c.BodyLimit <= 0 || c.BodyLimit > sandgate.MaxSpecBytes {
		c.BodyLimit = sandgate.MaxSpecBytes
	}
	if c.AuthFailureRate <= 0 {
		c.AuthFailureRate = 1
	}
	if c.AuthFailureBurst <= 0 {
		c.AuthFailureBurst = 10
	}
	if c.RateLimit > 0 && c.RateBurst <= 0 {
		c.RateBurst = max(1, int(c.RateLimit))
	}
	if c.RetryAfter <= 0 {
		c.RetryAfter = 5 * time.Second
	}
	if c.HeartbeatInterval <= 0 {
		c.HeartbeatInterval = 15 * time.Second
	}
	if c.CallbackAttempts <= 0 {
		c.CallbackAttempts = 5
	}
	if c.CallbackTimeout <= 0 {
		c.CallbackTimeout = 10 * time.Second
	}
	if c.CallbackBackoff <= 0 {
		c.CallbackBackoff = time.Second
	}
	if c.CallbackWorkers <= 0 {
		c.CallbackWorkers = 4
	}
	if c.CallbackQueue <= 0 {
		c.CallbackQueue = 1024
	}
	if c.CallbackDrain <= 0 {
		c.CallbackDrain = 10 * time.Second
	}
	if c.UploadDir == "" {
		c.UploadDir = filepath.Join(os.TempDir(), "sandgate-uploads", c.Node)
	}
	if c.MaxWorkspaceBytes <= 0 {
		c.MaxWorkspaceBytes = 256 << 20
	}
	if c.MaxWorkspaceUnpackedBytes <= 0 {
		c.MaxWorkspaceUnpackedBytes = 4 << 30
	}
	if c.ReplayMaxDecisions <= 0 {
		c.ReplayMaxDecisions = DefaultReplayMaxDecisions
	}
	if c.ReplayTimeout <= 0 {
		c.ReplayTimeout = time.Minute
	}
	if c.NodeHeartbeat <= 0 {
		c.NodeHeartbeat = defaultNodeHeartbeat
	}
	if c.NodeLapse <= 0 {
		c.NodeLapse = defaultNodeLapse
	}
	return c
}

// Validate reports the first setting that cannot work.
func (c Config) Validate() error {
	if len(c.MaskKey) > 0 && len(c.MaskKey) < 16 {
		return errors.New("gateway: MaskKey must be at least 16 bytes")
	}
	if len(c.CallbackKey) > 0 && len(c.CallbackKey) < 16 {
		return errors.New("gateway: CallbackKey must be at least 16 bytes")
	}
	for _, r := range c.MountRoots {
		if !filepath.IsAbs(r) {
			return fmt.Errorf("gateway: mount root %q is not an absolute path", r)
		}
	}
	if len(c.ClusterSecret) > 0 && len(c.ClusterSecret) < 16 {
		return errors.New("gateway: ClusterSecret must be at least 16 bytes")
	}
	if c.NodeLapse > 0 && c.NodeHeartbeat > 0 && c.NodeLapse < 2*c.NodeHeartbeat {
		return errors.New("gateway: NodeLapse must be at least twice NodeHeartbeat")
	}
	if c.RateLimit < 0 || c.AuthFailureRate < 0 {
		return errors.New("gateway: rate limits must not be negative")
	}
	return nil
}

// check reports the first missing dependency.
func (d Deps) check() error {
	missing := func(name string) error { return fmt.Errorf("gateway: Deps.%s is required", name) }
	switch {
	case d.Admitter == nil:
		return missing("Admitter")
	case d.Policies == nil:
		return missing("Policies")
	case d.Recorder == nil:
		return missing("Recorder")
	case d.Audit == nil:
		return missing("Audit")
	case d.Runs == nil:
		return missing("Runs")
	case d.Executor == nil:
		return missing("Executor")
	case d.Sandboxes == nil:
		return missing("Sandboxes")
	case d.Principals == nil:
		return missing("Principals")
	case d.Authorizer == nil:
		return missing("Authorizer")
	}
	return nil
}
