package audit

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/sandgate/sandgate"
)

// A DSN may name several servers, as libpq's do: keyword/value with lists
// ("host=a,b port=5432,5433 target_session_attrs=read-write") or a URL
// with several hosts ("postgres://a:5432,b:5433/sandgate?…"). Every new
// connection tries them in order and keeps the first that takes writes, so
// after a failover (the primary gone, a replica promoted) the pool's next
// connections reach the new primary by themselves. Connections to the old
// one fail and are dropped; the writer spools meanwhile (deliver.go).

// ParseDSN parses a Postgres DSN the way Open does. A DSN naming more than
// one server with no target_session_attrs gets read-write: sandgate only
// ever needs a server that takes writes, and a standby would only refuse
// them later, one statement at a time.
func ParseDSN(dsn string) (*pgx.ConnConfig, error) {
	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("parse DSN: %w", err)
	}
	defaultReadWrite(&cfg.Config, dsn)
	return cfg, nil
}

// parsePoolConfig is ParseDSN for a pool.
func parsePoolConfig(dsn string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("audit: parse DSN: %w", err)
	}
	defaultReadWrite(&cfg.ConnConfig.Config, dsn)
	return cfg, nil
}

func defaultReadWrite(cfg *pgconn.Config, dsn string) {
	if cfg.ValidateConnect == nil && len(servers(cfg)) > 1 && !strings.Contains(dsn, "target_session_attrs") {
		cfg.ValidateConnect = pgconn.ValidateConnectTargetSessionAttrsReadWrite
	}
}

// servers lists the distinct host:port pairs cfg tries, in order (pgx
// turns sslmode=prefer into two attempts at each).
func servers(cfg *pgconn.Config) []string {
	var out []string
	add := func(host string, port uint16) {
		s := host
		if !strings.HasPrefix(host, "/") {
			s = net.JoinHostPort(host, strconv.Itoa(int(port)))
		} else {
			s = fmt.Sprintf("%s/.s.PGSQL.%d", host, port)
		}
		for _, o := range out {
			if o == s {
				return
			}
		}
		out = append(out, s)
	}
	add(cfg.Host, cfg.Port)
	for _, f := range cfg.Fallbacks {
		add(f.Host, f.Port)
	}
	return out
}

// DatabaseState is where the gateway's connection pool stands, as
// readiness reports it.
type DatabaseState struct {
	// Servers are the servers the DSN names, in the order they are tried.
	Servers []string `json:"servers"`
	// Primary is the server a new connection reached: the one that takes
	// writes now.
	Primary string `json:"primary,omitempty"`
	// ReadOnly is set when that server is a standby (only possible with a
	// DSN whose target_session_attrs allows one).
	ReadOnly bool `json:"read_only,omitempty"`
}

// String is the state in one line: "primary 10.0.0.2:5432 of 10.0.0.1:5432,
// 10.0.0.2:5432".
func (d DatabaseState) String() string {
	role := "primary"
	if d.ReadOnly {
		role = "read-only standby"
	}
	if len(d.Servers) <= 1 {
		return role + " " + d.Primary
	}
	return role + " " + d.Primary + " of " + strings.Join(d.Servers, ", ")
}

// Database reports the server the pool reaches now, over a connection
// opened for the purpose (never an idle one of the pool, which may still
// point at a primary that is gone). It returns AUDIT-UNAVAILABLE naming
// every server and why it was refused when none takes writes: during a
// failover, until a replica is promoted.
func (s *Store) Database(ctx context.Context) (DatabaseState, error) {
	cc := s.pool.Config().ConnConfig.Copy()
	st := DatabaseState{Servers: servers(&cc.Config)}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	conn, err := pgx.ConnectConfig(ctx, cc)
	if err != nil {
		// pgx says why each server was refused, one per line.
		why := strings.Join(strings.Fields(strings.ReplaceAll(err.Error(), "\n", " ; ")), " ")
		return st, sandgate.WrapError(sandgate.CodeAuditUnavailable, err,
			"no writable Postgres among %s (%s)", strings.Join(st.Servers, ", "), why)
	}
	defer conn.Close(context.Background())
	st.Primary = conn.PgConn().Conn().RemoteAddr().String()
	var recovery bool
	if err := conn.QueryRow(ctx, `SELECT pg_is_in_recovery()`).Scan(&recovery); err != nil {
		return st, sandgate.WrapError(sandgate.CodeAuditUnavailable, err, "ask %s whether it is a standby", st.Primary)
	}
	st.ReadOnly = recovery
	return st, nil
}

// dbStatusTTL is how long DatabaseStatus's answer is shared.
const dbStatusTTL = time.Second

// dbStatus is the last DatabaseStatus answer and when it was had.
type dbStatus struct {
	mu   sync.Mutex
	at   time.Time
	line string
	err  error
}

// DatabaseStatus is Database in one line, for readiness. Readiness is
// asked by anyone who can reach the gateway, and Database opens a
// connection each time: the answer is shared for dbStatusTTL, and the
// callers of one moment wait for the one connection it opens, so a flood
// of probes opens at most one connection a second.
func (s *Store) DatabaseStatus(ctx context.Context) (string, error) {
	c := &s.status
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < dbStatusTTL {
		return c.line, c.err
	}
	st, err := s.Database(ctx)
	if ctx.Err() != nil {
		return "", err // this caller gave up; the next one asks again
	}
	c.at, c.line, c.err = time.Now(), "", err
	if err == nil {
		c.line = st.String()
	}
	return c.line, c.err
}
