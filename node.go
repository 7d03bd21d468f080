package sandgate

import "time"

// NodeState is what the registry knows of a gateway node.
type NodeState string

// The states of a node.
const (
	// NodeAlive: its heartbeat is recent.
	NodeAlive NodeState = "alive"
	// NodeLapsed: its heartbeat is older than the lapse; a survivor is
	// about to take its work over (or it is coming back).
	NodeLapsed NodeState = "lapsed"
	// NodeGone: it left cleanly, or a survivor took its work over.
	NodeGone NodeState = "gone"
)

// Node is one `sandgate serve` of a cluster as the node registry keeps it.
type Node struct {
	Name string `json:"name"`
	// AdvertiseURL is where the other nodes reach its API.
	AdvertiseURL string `json:"advertise_url"`
	// DockerHost is the daemon it drives, as its DOCKER_HOST says; a
	// survivor reaches that daemon to adopt its containers.
	DockerHost    string `json:"docker_host"`
	DockerHealthy bool   `json:"docker_healthy"`
	DockerError   string `json:"docker_error,omitempty"`
	// Running is how many runs it holds (admitted, not finished), Capacity
	// how many may hold a container at once (SANDGATE_MAX_CONCURRENT).
	Running  int `json:"running"`
	Capacity int `json:"capacity"`
	// KeyID and PublicKey (hex) are its audit checkpoint key.
	KeyID     string `json:"key_id"`
	PublicKey string `json:"public_key"`
	// KeyRegistered is true when the audit key registry (audit_keys)
	// holds that key for this node: verify then trusts its checkpoints.
	// A node's key is registered before its first checkpoint.
	KeyRegistered bool      `json:"key_registered"`
	Version       string    `json:"version"`
	State         NodeState `json:"state"`
	StartedAt     time.Time `json:"started_at"`
	HeartbeatAt   time.Time `json:"heartbeat_at"`
	// HeartbeatAge is how long ago its last heartbeat was, by the
	// database's clock.
	HeartbeatAge time.Duration `json:"-"`
	// TakenOverBy names the survivor that took its work over.
	TakenOverBy string     `json:"taken_over_by,omitempty"`
	TakenOverAt *time.Time `json:"taken_over_at,omitempty"`
	// HeldEvents are the audit events it holds in its spool because the
	// database refused them as fenced (it was taken over), as it last
	// reported.
	HeldEvents int64 `json:"held_events,omitempty"`
}

// Takeover is what a survivor took from a dead node, in one transaction:
// the node as it was, and its unfinished runs and open sessions, whose
// node is now the survivor's.
type Takeover struct {
	Dead     Node
	Runs     []string
	Sessions []string
	// ChainsFenced counts the dead node's audit chains fenced in the
	// same transaction: the database takes nothing more of them.
	ChainsFenced int
}

// Slot is one admitted, unfinished run as the cluster counts it: its
// team, the node that holds it and what it asked for.
type Slot struct {
	RunID    string
	Team     string
	Node     string
	MemoryMB int64
	CPUs     float64
}

// SlotLimits are what a team's slots must fit in across the cluster
// (0: no limit): runs, the sum of their memory and of their CPUs.
type SlotLimits struct {
	TeamRuns     int
	TeamMemoryMB int64
	TeamCPUs     float64
}

// SlotUse is what a team held across the cluster when a slot was asked
// for.
type SlotUse struct {
	TeamRuns     int
	TeamMemoryMB int64
	TeamCPUs     float64
}
