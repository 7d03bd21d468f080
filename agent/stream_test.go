package agent

import (
	"bytes"
	"crypto/rand"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// readUntil reads st until its output holds want, or fails.
func readUntil(t *testing.T, st *Stream, out *bytes.Buffer, want string) {
	t.Helper()
	buf := make([]byte, 4096)
	deadline := time.AfterFunc(20*time.Second, func() { _ = st.Close() })
	defer deadline.Stop()
	for !strings.Contains(out.String(), want) {
		n, err := st.Read(buf)
		out.Write(buf[:n])
		if err != nil {
			t.Fatalf("terminal ended before %q: %v; output %q", want, err, out.String())
		}
	}
}

func TestAgentTerminal(t *testing.T) {
	c, _ := startAgent(t)
	st, err := c.Open(Open{Argv: []string{"sh"}, Env: []string{"PS1=$ ", "TERM=dumb"}, Rows: 30, Cols: 100}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if st.PID() == 0 {
		t.Fatal("a terminal's PID is not reported")
	}
	var out bytes.Buffer
	// A terminal: stdin is a tty, and its size is the one asked for.
	if _, err := st.Write([]byte("test -t 0 && echo IS-A-$((0))TTY; stty size\n")); err != nil {
		t.Fatal(err)
	}
	readUntil(t, st, &out, "30 100\r\n")
	if !strings.Contains(out.String(), "IS-A-0TTY") {
		t.Fatalf("stdin is not a terminal: %q", out.String())
	}
	// Resize reaches the terminal.
	if err := st.Resize(50, 132); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	st.Write([]byte("stty size\n"))
	readUntil(t, st, &out, "50 132\r\n")
	// Ctrl-C, the terminal's own line discipline, interrupts the
	// foreground command, not the shell.
	out.Reset()
	st.Write([]byte("sleep 30; echo SL$((0))EPT\n"))
	time.Sleep(200 * time.Millisecond)
	st.Write([]byte{3})
	st.Write([]byte("echo AFTER-$((1+1))\n"))
	readUntil(t, st, &out, "AFTER-2\r\n")
	if strings.Contains(out.String(), "SL0EPT") {
		t.Fatalf("Ctrl-C did not interrupt: %q", out.String())
	}
	st.Write([]byte("exit 3\n"))
	select {
	case <-st.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("the terminal did not end")
	}
	ex, err := st.Exit()
	if err != nil || ex.Code != 3 {
		t.Fatalf("exit = %+v, %v; want code 3", ex, err)
	}
}

func TestAgentTerminalClosedHangsUp(t *testing.T) {
	c, _ := startAgent(t)
	st, err := c.Open(Open{Argv: []string{"sh", "-c", "trap '' INT; sleep 60"}}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	pid := st.PID()
	st.Close()
	select {
	case <-st.Done():
	case <-time.After(20 * time.Second):
		t.Fatal("a closed terminal's process did not end")
	}
	if processAlive(pid) {
		t.Fatalf("process %d outlived its terminal", pid)
	}
}

// echoServer listens on the host's loopback (where the agent of these
// tests runs) and echoes each connection.
func echoServer(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().(*net.TCPAddr).Port
}

func TestAgentPortStream(t *testing.T) {
	c, _ := startAgent(t)
	port := echoServer(t)
	conn, err := c.Open(Open{Port: port}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	nc := conn.NetConn()
	defer nc.Close()
	// Many windows' worth each way: flow control carries it whole.
	payload := make([]byte, 8*Window+12345)
	rand.Read(payload)
	go func() {
		nc.Write(payload)
	}()
	got := make([]byte, len(payload))
	nc.SetReadDeadline(time.Now().Add(60 * time.Second))
	if _, err := io.ReadFull(nc, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, payload) {
		t.Fatal("the echoed bytes differ")
	}
}

// A stream whose reader does not read holds its window, and nothing else:
// the agent's commands go on.
func TestAgentStreamSlowReaderStopsOnlyItself(t *testing.T) {
	c, _ := startAgent(t)
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			return
		}
		defer conn.Close()
		conn.Write(make([]byte, 64<<20)) // far more than a window
	}()
	st, err := c.Open(Open{Port: ln.Addr().(*net.TCPAddr).Port}, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ex, out, _, err := run(t, c, Command{Argv: []string{"echo", "still-served"}}, nil)
	if err != nil || ex.Code != 0 || out != "still-served\n" {
		t.Fatalf("a command beside an unread stream: %+v %q %v", ex, out, err)
	}
	st.mu.Lock()
	held := len(st.buf)
	st.mu.Unlock()
	if held > Window {
		t.Fatalf("the gateway holds %d bytes of an unread stream, over the window %d", held, Window)
	}
}

func TestAgentOpenRefused(t *testing.T) {
	c, _ := startAgent(t)
	closed := echoServer(t)
	for name, o := range map[string]Open{
		"port and argv":   {Port: closed, Argv: []string{"sh"}},
		"port zero":       {},
		"port over range": {Port: 70000},
		"no listener":     {Port: 1},
		"no program":      {Argv: []string{"/no/such/program"}},
	} {
		t.Run(name, func(t *testing.T) {
			if st, err := c.Open(o, 10*time.Second); err == nil {
				st.Close()
				t.Fatalf("Open(%+v) opened", o)
			}
		})
	}
}

// processAlive reports whether pid runs (a zombie does not).
func processAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	return i >= 0 && len(s) > i+2 && s[i+2] != 'Z'
}
