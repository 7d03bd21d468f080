package runstore

import (
	"context"
	"errors"
	"time"

	"gorm.io/gorm"

	"github.com/sandgate/sandgate"
)

// The node registry: each gateway node's row in nodes, its heartbeat and
// load, and the takeover of a node whose heartbeat lapsed. Times that
// compare nodes with each other are the database's (now()), so that the
// nodes' clocks need not agree.

type nodeRow struct {
	Name          string     `gorm:"column:name"`
	AdvertiseURL  string     `gorm:"column:advertise_url"`
	DockerHost    string     `gorm:"column:docker_host"`
	DockerHealthy bool       `gorm:"column:docker_healthy"`
	DockerError   string     `gorm:"column:docker_error"`
	Running       int        `gorm:"column:running"`
	Capacity      int        `gorm:"column:capacity"`
	KeyID         string     `gorm:"column:key_id"`
	PublicKey     string     `gorm:"column:public_key"`
	KeyRegistered bool       `gorm:"column:key_registered"`
	Version       string     `gorm:"column:version"`
	State         string     `gorm:"column:state"`
	StartedAt     time.Time  `gorm:"column:started_at"`
	HeartbeatAt   time.Time  `gorm:"column:heartbeat_at"`
	TakenOverBy   string     `gorm:"column:taken_over_by"`
	TakenOverAt   *time.Time `gorm:"column:taken_over_at"`
	HeldEvents    int64      `gorm:"column:held_events"`
	AgeSeconds    float64    `gorm:"column:age_seconds"`
}

func (r nodeRow) node(lapse time.Duration) sandgate.Node {
	n := sandgate.Node{
		Name: r.Name, AdvertiseURL: r.AdvertiseURL, DockerHost: r.DockerHost, DockerHealthy: r.DockerHealthy,
		DockerError: r.DockerError, Running: r.Running, Capacity: r.Capacity, KeyID: r.KeyID, PublicKey: r.PublicKey,
		KeyRegistered: r.KeyRegistered, Version: r.Version, StartedAt: r.StartedAt.UTC(), HeartbeatAt: r.HeartbeatAt.UTC(),
		HeartbeatAge: time.Duration(r.AgeSeconds * float64(time.Second)), TakenOverBy: r.TakenOverBy,
		TakenOverAt: utcPtr(r.TakenOverAt), HeldEvents: r.HeldEvents,
	}
	switch {
	case r.State == "gone":
		n.State = sandgate.NodeGone
	case n.HeartbeatAge > lapse:
		n.State = sandgate.NodeLapsed
	default:
		n.State = sandgate.NodeAlive
	}
	return n
}

const nodeColumns = `name, advertise_url, docker_host, docker_healthy, docker_error, running, capacity, key_id,
	public_key, version, state, started_at, heartbeat_at, taken_over_by, taken_over_at, held_events,
	extract(epoch FROM now() - heartbeat_at) AS age_seconds,
	EXISTS (SELECT 1 FROM audit_keys k WHERE k.node = nodes.name AND k.key_id = nodes.key_id) AS key_registered`

// RegisterNode records n as active with a fresh heartbeat: a node that
// starts (again) replaces what the registry said of it. Its load fields
// are set by Heartbeat.
func (s *Store) RegisterNode(ctx context.Context, n sandgate.Node) error {
	if n.Name == "" {
		return sandgate.FieldError("name", "is required")
	}
	err := s.db.WithContext(ctx).Exec(`INSERT INTO nodes (name, advertise_url, docker_host, docker_healthy, docker_error,
			running, capacity, key_id, public_key, version, state, started_at, heartbeat_at, taken_over_by, taken_over_at, takeover)
		VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'active', now(), now(), '', NULL, NULL)
		ON CONFLICT (name) DO UPDATE SET advertise_url = EXCLUDED.advertise_url, docker_host = EXCLUDED.docker_host,
			docker_healthy = EXCLUDED.docker_healthy, docker_error = EXCLUDED.docker_error, running = EXCLUDED.running,
			capacity = EXCLUDED.capacity, key_id = EXCLUDED.key_id, public_key = EXCLUDED.public_key,
			version = EXCLUDED.version, state = 'active', started_at = now(), heartbeat_at = now(),
			taken_over_by = '', taken_over_at = NULL, takeover = NULL`,
		n.Name, n.AdvertiseURL, n.DockerHost, n.DockerHealthy, n.DockerError, n.Running, n.Capacity,
		n.KeyID, n.PublicKey, n.Version).Error
	if err != nil {
		return storeErr(err, "register node")
	}
	return nil
}

// Heartbeat stamps the node's heartbeat with its load and its daemon's
// health. It returns NOT-FOUND when the node is not registered as active:
// a survivor took it over while it was away, and it must register again
// (after its runs were taken from it).
func (s *Store) Heartbeat(ctx context.Context, n sandgate.Node) error {
	res := s.db.WithContext(ctx).Exec(`UPDATE nodes SET heartbeat_at = now(), running = ?, capacity = ?,
			docker_healthy = ?, docker_error = ?, key_id = CASE WHEN ? <> '' THEN ? ELSE key_id END,
			public_key = CASE WHEN ? <> '' THEN ? ELSE public_key END
		WHERE name = ? AND state = 'active'`,
		n.Running, n.Capacity, n.DockerHealthy, n.DockerError, n.KeyID, n.KeyID, n.PublicKey, n.PublicKey, n.Name)
	if res.Error != nil {
		return storeErr(res.Error, "node heartbeat")
	}
	if res.RowsAffected == 0 {
		return sandgate.Errorf(sandgate.CodeNotFound, "node %s is not registered as active", n.Name)
	}
	return nil
}

// LeaveNode marks the node gone after a clean shutdown: nothing of it is
// left to take over.
func (s *Store) LeaveNode(ctx context.Context, name string) error {
	if err := s.db.WithContext(ctx).Exec(`UPDATE nodes SET state = 'gone', running = 0, heartbeat_at = now()
		WHERE name = ? AND state = 'active'`, name).Error; err != nil {
		return storeErr(err, "leave node")
	}
	return nil
}

// ListNodes returns every registered node by name, its state judged with
// lapse: an active node whose heartbeat is older is lapsed.
func (s *Store) ListNodes(ctx context.Context, lapse time.Duration) ([]sandgate.Node, error) {
	var rows []nodeRow
	if err := s.db.WithContext(ctx).Raw(`SELECT ` + nodeColumns + ` FROM nodes ORDER BY name`).Scan(&rows).Error; err != nil {
		return nil, storeErr(err, "list nodes")
	}
	out := make([]sandgate.Node, len(rows))
	for i, r := range rows {
		out[i] = r.node(lapse)
	}
	return out, nil
}

// TakeOver takes the node dead over for survivor when its heartbeat is
// older than lapse and no one took it yet, in one transaction: the row
// becomes gone with taken_over_by = survivor, the dead node's audit
// chains are fenced at their heads (migration 15), and its unfinished
// runs, open sessions and run slots become the survivor's.
// Of any number of survivors trying at once exactly one gets ok = true
// (the row's lock orders them; the others find it gone).
func (s *Store) TakeOver(ctx context.Context, dead, survivor string, lapse time.Duration) (sandgate.Takeover, bool, error) {
	if dead == survivor {
		return sandgate.Takeover{}, false, sandgate.FieldError("node", "a node cannot take itself over")
	}
	var t sandgate.Takeover
	errNotYours := errors.New("not taken")
	err := s.db.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var rows []nodeRow
		err := tx.Raw(`UPDATE nodes SET state = 'gone', taken_over_by = ?, taken_over_at = now()
			WHERE name = ? AND state = 'active' AND heartbeat_at < now() - make_interval(secs => ?)
			RETURNING `+nodeColumns, survivor, dead, lapse.Seconds()).Scan(&rows).Error
		if err != nil {
			return err
		}
		if len(rows) == 0 {
			return errNotYours
		}
		t.Dead = rows[0].node(lapse)
		t.Dead.State = sandgate.NodeGone
		// The dead node's chains are fenced before anything of it moves:
		// whatever it still holds is refused by the database from now on,
		// so its runs' ends are recorded once, by the survivor.
		if err := tx.Raw(`SELECT audit_fence_node(?, ?, ?)`, dead, survivor,
			"node "+dead+" stopped heartbeating; "+survivor+" took it over").Scan(&t.ChainsFenced).Error; err != nil {
			return err
		}
		if err := tx.Raw(`UPDATE runs SET node = ?, updated_at = now() WHERE node = ? AND state <> 'finished' RETURNING id`,
			survivor, dead).Scan(&t.Runs).Error; err != nil {
			return err
		}
		if err := tx.Raw(`UPDATE sessions SET node = ?, updated_at = now() WHERE node = ? AND state = 'open' RETURNING id`,
			survivor, dead).Scan(&t.Sessions).Error; err != nil {
			return err
		}
		return tx.Exec(`UPDATE run_slots SET node = ? WHERE node = ?`, survivor, dead).Error
	})
	switch {
	case errors.Is(err, errNotYours):
		return sandgate.Takeover{}, false, nil
	case err != nil:
		return sandgate.Takeover{}, false, storeErr(err, "take node over")
	}
	return t, true, nil
}

// ReportHeld records, on the node's row whatever its state, how many
// audit events it holds because the database refused them as fenced.
func (s *Store) ReportHeld(ctx context.Context, name string, held int64) error {
	if err := s.db.WithContext(ctx).Exec(`UPDATE nodes SET held_events = ? WHERE name = ?`, held, name).Error; err != nil {
		return storeErr(err, "report held events")
	}
	return nil
}

// RecordTakeover keeps what the takeover of dead did on its row (shown by
// GET /v1/nodes as it is).
func (s *Store) RecordTakeover(ctx context.Context, dead string, summary []byte) error {
	if err := s.db.WithContext(ctx).Exec(`UPDATE nodes SET takeover = ? WHERE name = ?`, summary, dead).Error; err != nil {
		return storeErr(err, "record takeover")
	}
	return nil
}

// ReserveSlot counts slot against its team's limits across every node,
// under one advisory lock per team, and records it when it fits. It
// returns ok = false and what the team holds when it does not. The lock,
// the count and the insert are one statement (sandgate_reserve_slot,
// migration 16): the lock is held for its execution and commit, not
// across round trips.
func (s *Store) ReserveSlot(ctx context.Context, slot sandgate.Slot, l sandgate.SlotLimits) (sandgate.SlotUse, bool, error) {
	var use sandgate.SlotUse
	ok := false
	row := s.db.WithContext(ctx).Raw(`SELECT team_runs, team_memory_mb, team_cpus, reserved
		FROM sandgate_reserve_slot(?, ?, ?, ?, ?, ?, ?, ?)`,
		slot.RunID, slot.Team, slot.Node, slot.MemoryMB, slot.CPUs, l.TeamRuns, l.TeamMemoryMB, l.TeamCPUs).Row()
	if err := row.Scan(&use.TeamRuns, &use.TeamMemoryMB, &use.TeamCPUs, &ok); err != nil {
		return use, false, storeErr(err, "reserve run slot")
	}
	return use, ok, nil
}

// HoldSlot records slot whatever the limits (a run adopted after a
// restart or a takeover was admitted before).
func (s *Store) HoldSlot(ctx context.Context, slot sandgate.Slot) error {
	if err := s.db.WithContext(ctx).Exec(`INSERT INTO run_slots (run_id, team, node, memory_mb, cpus) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (run_id) DO UPDATE SET node = EXCLUDED.node`, slot.RunID, slot.Team, slot.Node, slot.MemoryMB, slot.CPUs).Error; err != nil {
		return storeErr(err, "hold run slot")
	}
	return nil
}

// ReleaseSlot gives the run's slot back.
func (s *Store) ReleaseSlot(ctx context.Context, runID string) error {
	if err := s.db.WithContext(ctx).Exec(`DELETE FROM run_slots WHERE run_id = ?`, runID).Error; err != nil {
		return storeErr(err, "release run slot")
	}
	return nil
}

// ReleaseNodeSlots drops the slots of node but those of keep: at a
// start, the slots a previous process left for runs that are over.
func (s *Store) ReleaseNodeSlots(ctx context.Context, node string, keep []string) error {
	q := s.db.WithContext(ctx).Where("node = ?", node)
	if len(keep) > 0 {
		q = q.Where("run_id NOT IN ?", keep)
	}
	if err := q.Delete(&slotRow{}).Error; err != nil {
		return storeErr(err, "release node slots")
	}
	return nil
}

type slotRow struct {
	RunID string `gorm:"column:run_id;primaryKey"`
}

func (slotRow) TableName() string { return "run_slots" }

// NodeSlots counts the slots each node holds.
func (s *Store) NodeSlots(ctx context.Context) (map[string]int, error) {
	var rows []struct {
		Node string
		N    int
	}
	if err := s.db.WithContext(ctx).Raw(`SELECT node, count(*) AS n FROM run_slots GROUP BY node`).Scan(&rows).Error; err != nil {
		return nil, storeErr(err, "count node slots")
	}
	out := make(map[string]int, len(rows))
	for _, r := range rows {
		out[r.Node] = r.N
	}
	return out, nil
}

// ClaimTimeout is how long a claimed idempotency key whose run was never
// stored keeps its claim: the node that claimed it died, or lost the
// database, in the middle of the admission. An admission takes seconds.
const ClaimTimeout = time.Minute

// ClaimIdempotencyKey claims key for principal and the run ID runID
// before the request is decided, with digest, which identifies the
// request (a keyed hash: it must not reveal the request's secrets). It
// returns "" when the claim is this caller's (nothing held the key within
// IdempotencyWindow, or a claim older than ClaimTimeout made no run),
// otherwise the run ID the key names (a run made by another request, or
// one still being admitted on some node) and the digest of the request
// that claimed it ("" for a key stored without one).
func (s *Store) ClaimIdempotencyKey(ctx context.Context, principal, key, runID, digest string) (string, string, error) {
	now := s.cfg.Clock()
	var taken []string
	err := s.db.WithContext(ctx).Raw(`INSERT INTO idempotency_keys (principal, key, run_id, created_at, request_digest) VALUES (?, ?, ?, ?, ?)
		ON CONFLICT (principal, key) DO UPDATE SET run_id = EXCLUDED.run_id, created_at = EXCLUDED.created_at,
			request_digest = EXCLUDED.request_digest
		WHERE idempotency_keys.created_at <= ?
			OR (idempotency_keys.created_at <= ? AND NOT EXISTS (SELECT 1 FROM runs r WHERE r.id = idempotency_keys.run_id))
		RETURNING run_id`, principal, key, runID, now, digest, now.Add(-IdempotencyWindow), now.Add(-ClaimTimeout)).Scan(&taken).Error
	if err != nil {
		return "", "", storeErr(err, "claim idempotency key")
	}
	if len(taken) > 0 {
		return "", "", nil
	}
	var held, heldDigest string
	if err := s.db.WithContext(ctx).Raw(`SELECT run_id, request_digest FROM idempotency_keys WHERE principal = ? AND key = ?`,
		principal, key).Row().Scan(&held, &heldDigest); err != nil {
		return "", "", storeErr(err, "read idempotency key")
	}
	if held == runID {
		return "", "", nil
	}
	return held, heldDigest, nil
}

// ReleaseIdempotencyKey gives up the claim of key for runID (its request
// was denied, or failed before its run was stored), so that a retry is
// decided afresh.
func (s *Store) ReleaseIdempotencyKey(ctx context.Context, principal, key, runID string) error {
	if err := s.db.WithContext(ctx).Exec(`DELETE FROM idempotency_keys WHERE principal = ? AND key = ? AND run_id = ?`,
		principal, key, runID).Error; err != nil {
		return storeErr(err, "release idempotency key")
	}
	return nil
}
