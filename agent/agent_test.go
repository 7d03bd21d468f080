package agent

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// syncBuffer is a bytes.Buffer safe to read while the Conn writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startAgent runs Serve on pipes and dials it.
func startAgent(t *testing.T) (*Conn, chan error) {
	t.Helper()
	toAgentR, toAgentW := io.Pipe()
	toGatewayR, toGatewayW := io.Pipe()
	served := make(chan error, 1)
	go func() {
		err := Serve(toAgentR, toGatewayW)
		toGatewayW.CloseWithError(io.EOF)
		served <- err
	}()
	c, err := Dial(toGatewayR, toAgentW, NewKey())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		toAgentW.Close()
		<-c.Done()
	})
	return c, served
}

func run(t *testing.T, c *Conn, cmd Command, stdin []byte) (Exit, string, string, error) {
	t.Helper()
	var stdout, stderr syncBuffer
	p, err := c.Start(cmd, &stdout, &stderr, stdin)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(30 * time.Second):
		t.Fatalf("command %v did not end", cmd.Argv)
	}
	ex, err := p.Exit()
	return ex, stdout.String(), stderr.String(), err
}

func TestAgentRunsCommands(t *testing.T) {
	c, _ := startAgent(t)
	tests := []struct {
		name           string
		cmd            Command
		stdin          string
		want           Exit
		stdout, stderr string
	}{
		{name: "true", cmd: Command{Argv: []string{"true"}}, want: Exit{Code: 0}},
		{name: "exit code", cmd: Command{Argv: []string{"sh", "-c", "exit 7"}}, want: Exit{Code: 7}},
		{name: "output", cmd: Command{Argv: []string{"sh", "-c", "echo out; echo err >&2"}}, stdout: "out\n", stderr: "err\n"},
		{name: "env and dir", cmd: Command{Argv: []string{"sh", "-c", `echo "$X" "$(pwd)"`}, Env: []string{"X=y z"}, Dir: "/"}, stdout: "y z /\n"},
		{name: "stdin", cmd: Command{Argv: []string{"cat"}, Stdin: true}, stdin: "hello\x00world", stdout: "hello\x00world"},
		{name: "no stdin reads nothing", cmd: Command{Argv: []string{"cat"}}},
		{name: "killed by a signal", cmd: Command{Argv: []string{"sh", "-c", "kill -9 $$"}}, want: Exit{Code: 137, Signal: 9}},
		{name: "background child keeps output", cmd: Command{Argv: []string{"sh", "-c", "sleep 5 & echo done"}}, stdout: "done\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ex, out, errOut, err := run(t, c, tt.cmd, []byte(tt.stdin))
			if err != nil {
				t.Fatal(err)
			}
			if ex.Code != tt.want.Code || ex.Signal != tt.want.Signal || out != tt.stdout || errOut != tt.stderr {
				t.Errorf("got %+v %q %q, want %+v %q %q", ex, out, errOut, tt.want, tt.stdout, tt.stderr)
			}
		})
	}
	t.Run("usage", func(t *testing.T) {
		ex, _, _, err := run(t, c, Command{Argv: []string{"sh", "-c", "i=0; while [ $i -lt 20000 ]; do i=$((i+1)); done"}}, nil)
		if err != nil || ex.Code != 0 || ex.UserMS+ex.SystemMS <= 0 {
			t.Errorf("usage of a busy command: %+v %v", ex, err)
		}
	})
	// A program that cannot be run ends its command as a shell would:
	// 127 not found, 126 not executable, the reason on its stderr, and
	// no start (no PID a signal could be sent to).
	noExec := filepath.Join(t.TempDir(), "script")
	if err := os.WriteFile(noExec, []byte("#!/bin/sh\necho never\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, program string
		code          int
		stderr        string
	}{
		{"not found by path", "/no/such/program", 127, `exec: "/no/such/program": not found` + "\n"},
		{"not found on PATH", "make-no-such-program", 127, `exec: "make-no-such-program": not found` + "\n"},
		{"not executable", noExec, 126, fmt.Sprintf("exec: %q: cannot be executed: permission denied\n", noExec)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stderr syncBuffer
			p, err := c.Start(Command{Argv: []string{tc.program, "arg"}}, io.Discard, &stderr, nil)
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-p.Done():
			case <-time.After(30 * time.Second):
				t.Fatal("the command did not end")
			}
			ex, err := p.Exit()
			if err != nil || ex.Code != tc.code || stderr.String() != tc.stderr {
				t.Errorf("got %+v, %v, stderr %q; want code %d, stderr %q", ex, err, stderr.String(), tc.code, tc.stderr)
			}
			select {
			case <-p.Started():
				t.Errorf("a command that never ran was reported started (PID %d)", p.PID())
			default:
			}
		})
	}
}

func TestAgentConcurrentAndSignal(t *testing.T) {
	c, _ := startAgent(t)
	var stdout, stderr syncBuffer
	long, err := c.Start(Command{Argv: []string{"sh", "-c", "sleep 30; echo never"}}, &stdout, &stderr, nil)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Go(func() {
			ex, _, _, err := run(t, c, Command{Argv: []string{"sh", "-c", "exit $0", string(rune('0' + i%10))}}, nil)
			if err != nil || ex.Code != i%10 {
				t.Errorf("command %d: %+v %v", i, ex, err)
			}
		})
	}
	wg.Wait()
	<-long.Started()
	if err := long.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case <-long.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("signalled command did not end")
	}
	if ex, err := long.Exit(); err != nil || ex.Signal != int(syscall.SIGTERM) || stdout.String() != "" {
		t.Errorf("signalled: %+v %v %q", ex, err, stdout.String())
	}
}

// TestAgentHostileOutput: whatever bytes a command writes, frames made
// with the agent's own encoder and a guessed key included, reach the
// gateway as that command's output and nothing else.
func TestAgentHostileOutput(t *testing.T) {
	c, _ := startAgent(t)
	var forged bytes.Buffer
	w := newWriter(&forged, toGateway, make([]byte, KeySize))
	for seq := 0; seq < 4; seq++ {
		_ = w.write(Frame{Type: TypeExit, ID: 1, Payload: []byte(`{"code":0}`)})
	}
	hostile := forged.String() + "\x00\xff\x01\x00\x00\x00\x01" + strings.Repeat("\x45", 100)
	cmd := Command{Argv: []string{"sh", "-c", `cat; cat >&2 </dev/null; sleep 0.2; exit 3`}, Stdin: true}
	ex, out, _, err := run(t, c, cmd, []byte(hostile))
	if err != nil || ex.Code != 3 || out != hostile {
		t.Fatalf("got %+v %v, output equal %v", ex, err, out == hostile)
	}
	// And the agent goes on.
	if ex, _, _, err := run(t, c, Command{Argv: []string{"true"}}, nil); err != nil || ex.Code != 0 {
		t.Fatalf("after hostile output: %+v %v", ex, err)
	}
}

// TestAgentRefusesWithoutKey: a stream whose frames are not made with the
// key of hello ends the agent, and kills what it runs; forged frames to
// the gateway end the Conn.
func TestAgentRefusesWithoutKey(t *testing.T) {
	key := NewKey()
	t.Run("agent", func(t *testing.T) {
		var in bytes.Buffer
		good := newWriter(&in, toAgent, key)
		_ = good.write(Frame{Type: TypeHello, Payload: key})
		bad := newWriter(&in, toAgent, NewKey())
		bad.seq = 1
		_ = bad.write(Frame{Type: TypeStart, ID: 1, Payload: []byte(`{"argv":["sh","-c","echo pwned"]}`)})
		var out bytes.Buffer
		err := Serve(&in, &out)
		if !errors.Is(err, ErrAuth) {
			t.Fatalf("Serve = %v, want ErrAuth", err)
		}
		rd := NewGatewayReader(&out, key)
		f, err := rd.Next()
		if err != nil || f.Type != TypeReady {
			t.Fatalf("first frame %v %v", f, err)
		}
		if f, err := rd.Next(); err != io.EOF {
			t.Fatalf("the agent answered a forged start: %v %v", f.Type, err)
		}
	})
	t.Run("replayed frame", func(t *testing.T) {
		var in bytes.Buffer
		good := newWriter(&in, toAgent, key)
		_ = good.write(Frame{Type: TypeHello, Payload: key})
		mark := in.Len()
		_ = good.write(Frame{Type: TypeSignal, ID: 1, Payload: []byte{15}})
		in.Write(append([]byte(nil), in.Bytes()[mark:]...))
		if err := Serve(&in, io.Discard); !errors.Is(err, ErrAuth) {
			t.Fatalf("Serve = %v, want ErrAuth for a replayed frame", err)
		}
	})
	t.Run("no hello", func(t *testing.T) {
		var in bytes.Buffer
		_ = newWriter(&in, toAgent, key).write(Frame{Type: TypeStart, ID: 1, Payload: []byte(`{"argv":["true"]}`)})
		if err := Serve(&in, io.Discard); !errors.Is(err, ErrAuth) {
			t.Fatalf("Serve = %v, want ErrAuth", err)
		}
	})
	t.Run("gateway", func(t *testing.T) {
		var in bytes.Buffer
		_ = newWriter(&in, toGateway, key).write(Frame{Type: TypeReady, Payload: []byte(Version)})
		_ = newWriter(&in, toGateway, NewKey()).write(Frame{Type: TypeExit, ID: 1, Payload: []byte(`{}`)})
		rd := NewGatewayReader(&in, key)
		if _, err := rd.Next(); err != nil {
			t.Fatal(err)
		}
		if _, err := rd.Next(); !errors.Is(err, ErrAuth) {
			t.Fatalf("forged frame: %v, want ErrAuth", err)
		}
	})
	t.Run("direction", func(t *testing.T) {
		// A frame the gateway sent, reflected back, is not the agent's.
		var in bytes.Buffer
		_ = newWriter(&in, toAgent, key).write(Frame{Type: TypeReady, Payload: []byte(Version)})
		if _, err := NewGatewayReader(&in, key).Next(); !errors.Is(err, ErrAuth) {
			t.Fatalf("reflected frame: %v, want ErrAuth", err)
		}
	})
}

// FuzzReader: the decoder never panics, never returns a payload over its
// bound, and accepts only the frames made with the key, in their order:
// whatever the input, an accepted frame is the valid stream's next one.
func FuzzReader(f *testing.F) {
	key := bytes.Repeat([]byte{7}, KeySize)
	valid := []Frame{
		{Type: TypeReady, Payload: []byte(Version)},
		{Type: TypeStdout, ID: 1, Payload: []byte("x")},
		{Type: TypeExit, ID: 1, Payload: []byte(`{"code":0}`)},
	}
	var ok bytes.Buffer
	w := newWriter(&ok, toGateway, key)
	for _, fr := range valid {
		_ = w.write(fr)
	}
	f.Add(ok.Bytes())
	f.Add([]byte{})
	f.Add([]byte{0x43, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		rd := NewGatewayReader(bytes.NewReader(b), key)
		for i := 0; ; i++ {
			fr, err := rd.Next()
			if err != nil {
				return
			}
			if len(fr.Payload) > MaxPayload {
				t.Fatalf("payload of %d bytes", len(fr.Payload))
			}
			if i >= len(valid) || fr.Type != valid[i].Type || fr.ID != valid[i].ID || !bytes.Equal(fr.Payload, valid[i].Payload) {
				t.Fatalf("frame %d accepted from fuzzed input: %+v", i, fr)
			}
		}
	})
}

// TestAgentCommandsAreTheOOMVictims: a command's OOM score is raised, so
// a sandbox out of memory loses the command, not its agent.
func TestAgentCommandsAreTheOOMVictims(t *testing.T) {
	c, _ := startAgent(t)
	_, out, _, err := run(t, c, Command{Argv: []string{"sh", "-c", "sleep 0.2; cat /proc/$$/oom_score_adj"}}, nil)
	if err != nil || out != "1000\n" {
		t.Errorf("oom_score_adj %q %v, want 1000", out, err)
	}
}

// TestAgentSignalReachesNewSessions: a signal to a command reaches the
// processes it started in a session of their own.
func TestAgentSignalReachesNewSessions(t *testing.T) {
	c, _ := startAgent(t)
	var out syncBuffer
	// setsid makes a new session (and group); the parent waits on it.
	p, err := c.Start(Command{Argv: []string{"sh", "-c", "setsid sh -c 'echo started; sleep 60' & wait"}}, &out, io.Discard, nil)
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for out.String() != "started\n" && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if err := p.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the command did not end")
	}
	// The setsid'd sleep was killed too: nothing holds the output, so the
	// exit came without the drain's wait, and no sleep 60 of ours is left.
	b, _ := exec.Command("sh", "-c", "ps -eo args | grep -c '^sleep 60$' || true").Output()
	if strings.TrimSpace(string(b)) != "0" {
		t.Errorf("sleep 60 processes left: %s", b)
	}
}
