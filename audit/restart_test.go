package audit

import (
	"bufio"
	"context"
	"database/sql"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/sandgatetest"
)

// killedWriterEnv names the state directory of the writer
// TestRestartSignsKilledProcessRows runs as a child process and kills.
const killedWriterEnv = "SANDGATE_TEST_KILLED_WRITER"

// restartConfig is the configuration both processes of
// TestRestartSignsKilledProcessRows open the trail with: one node, one
// spool, one key, and checkpoints far apart (an hour, or 1,000 events).
func restartConfig(dsn, dir string) Config {
	return Config{
		DSN:                dsn,
		SpoolDir:           filepath.Join(dir, "spool"),
		SigningKeyFile:     filepath.Join(dir, "checkpoint.key"),
		Node:               "restarted-node",
		Logger:             testLogger(),
		RetryInterval:      20 * time.Millisecond,
		DecisionChain:      true,
		CheckpointEvery:    1000,
		CheckpointInterval: time.Hour,
	}
}

// TestRestartSignsKilledProcessRows: a gateway killed (SIGKILL, power
// loss) before its first checkpoint leaves rows in both its chains that no
// key vouches for; verify rightly calls them unsigned_chain once they are
// older than twice the interval. The same node started again continues
// those chains (the spool keeps their IDs) and must sign them at once, not
// an interval later: on the old code it signed them only when its own
// first interval had passed since its start (here an hour), and a verify
// in between reported the killed process's rows as added by no node.
func TestRestartSignsKilledProcessRows(t *testing.T) {
	if dir := os.Getenv(killedWriterEnv); dir != "" {
		runKilledWriter(t, os.Getenv("SANDGATE_TEST_DATABASE_URL"), dir)
		return
	}
	dsn, db := newDB(t)
	dir := t.TempDir()
	child := exec.Command(os.Args[0], "-test.run=^TestRestartSignsKilledProcessRows$", "-test.count=1")
	child.Env = append(os.Environ(), killedWriterEnv+"="+dir, "SANDGATE_TEST_DATABASE_URL="+dsn)
	child.Stderr = os.Stderr
	out, err := child.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := child.Start(); err != nil {
		t.Fatal(err)
	}
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if sc.Text() == "recorded" {
				ready <- true
			}
		}
		close(ready)
	}()
	select {
	case ok := <-ready:
		if !ok {
			t.Fatalf("the writer process ended before it recorded: %v", child.Wait())
		}
	case <-time.After(60 * time.Second):
		_ = child.Process.Kill()
		t.Fatal("the writer process did not record within a minute")
	}
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = child.Wait()

	chains := chainsOf(t, db, "restarted-node")
	if len(chains) != 2 {
		t.Fatalf("chains of the killed process: %v, want its own and its decision chain", chains)
	}
	for _, c := range chains {
		if n := count(t, db, `SELECT count(*) FROM audit_events WHERE chain_id = $1`, c); n == 0 {
			t.Fatalf("chain %s has no rows", c)
		}
		if n := count(t, db, `SELECT count(*) FROM audit_checkpoints WHERE chain_id = $1`, c); n != 0 {
			t.Fatalf("chain %s has %d checkpoints before the restart, want none (the process was killed before its first)", c, n)
		}
	}
	// Without a checkpoint the rows are unsigned_chain once older than
	// twice the interval (1 ms for this verifier).
	ctx := context.Background()
	strict := func(c *Config) { c.CheckpointInterval = time.Millisecond }
	time.Sleep(10 * time.Millisecond)
	rep, err := readOnly(t, dsn, strict).Verifier().Verify(ctx, sandgate.VerifyRange{})
	if err != nil {
		t.Fatal(err)
	}
	if problemKinds(rep)["unsigned_chain"] != 2 {
		t.Fatalf("verify before the restart: %+v, want both chains unsigned_chain", rep.Problems)
	}

	restarted, err := Open(ctx, restartConfig(dsn, dir))
	if err != nil {
		t.Fatal(err)
	}
	defer restarted.Close(ctx)
	if restarted.ChainID() != chains[0] && restarted.ChainID() != chains[1] {
		t.Fatalf("the restarted process writes chain %s, not the killed process's %v", restarted.ChainID(), chains)
	}
	for _, c := range chains {
		sandgatetest.WaitFor(t, "a checkpoint over the killed process's rows of "+c, 30*time.Second, func() bool {
			return count(t, db, `SELECT count(*) FROM audit_checkpoints k WHERE k.chain_id = $1
				AND k.seq >= (SELECT max(seq) FROM audit_events e WHERE e.chain_id = $1)`, c) > 0
		})
	}
	// The killed process's rows are vouched for now; with a 1 ms interval
	// the running process's newest checkpoint is already stale, which is
	// all verify may say until the process ends cleanly.
	auditor := readOnly(t, dsn, func(c *Config) {
		strict(c)
		trusting(restarted.PublicKey())(c)
	})
	rep, err = auditor.Verifier().Verify(ctx, sandgate.VerifyRange{})
	if err != nil {
		t.Fatal(err)
	}
	if kinds := problemKinds(rep); len(kinds) != 1 || kinds["stale_checkpoint"] != 2 {
		t.Fatalf("verify after the restart: %+v, want only the running chains' stale_checkpoint", rep.Problems)
	}
	if err := restarted.Close(ctx); err != nil {
		t.Fatal(err)
	}
	rep, err = auditor.Verifier().Verify(ctx, sandgate.VerifyRange{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK {
		t.Fatalf("verify after the restarted process ended: %+v", rep.Problems)
	}
}

// runKilledWriter is the child process: it records lifecycle events and
// decisions, says so once they are committed and waits to be killed.
func runKilledWriter(t *testing.T, dsn, dir string) {
	ctx := context.Background()
	s, err := Open(ctx, restartConfig(dsn, dir))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		s.Emit(lifecycle(i, "run-killed"))
		if err := s.Record(ctx, lifecycle(i, "run-decided")); err != nil {
			t.Fatal(err)
		}
	}
	sandgatetest.WaitFor(t, "the lifecycle events committed", 30*time.Second, func() bool {
		return count(t, s.DB(), `SELECT count(*) FROM audit_events WHERE chain_id = $1`, s.ChainID()) == 3
	})
	os.Stdout.WriteString("recorded\n")
	select {}
}

// chainsOf lists node's chains (its own and its decision chain), sorted.
func chainsOf(t *testing.T, db *sql.DB, node string) []string {
	t.Helper()
	rows, err := db.Query(`SELECT chain_id FROM audit_chains WHERE node = $1 OR node = $1 || '-decisions' ORDER BY chain_id`, node)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	var out []string
	for rows.Next() {
		var id string
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		out = append(out, id)
	}
	return out
}
