// Package sinkstest runs Debian's rsyslog as a test's syslog receiver: a
// foreground rsyslogd of the test's own, with a configuration in a
// temporary directory, listening on a free loopback port (TCP, or TLS
// with its GnuTLS driver), writing what it receives to files the test
// reads. When rsyslogd is not installed a test fails under CI=true and
// is skipped otherwise (deploy/bootstrap.sh installs it).
package sinkstest

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sandgate/sandgate/sandgatetest"
)

// Rsyslogd is where Debian installs rsyslog's daemon.
const Rsyslogd = "/usr/sbin/rsyslogd"

// TLS is a receiver's TLS material, PEM files: its certificate and key,
// and the CA that signed them (the sender verifies with it).
type TLS struct {
	CAFile, CertFile, KeyFile string
	// ClientCerts makes the receiver require a client certificate the CA
	// signed (authMode x509/certvalid).
	ClientCerts bool
}

// Rsyslog is one rsyslogd of a test.
type Rsyslog struct {
	t    testing.TB
	dir  string
	conf string
	port int
	cmd  *exec.Cmd
	log  *os.File
}

// Require fails (CI=true) or skips the test when rsyslogd is missing.
func Require(t testing.TB) {
	t.Helper()
	sandgatetest.SkipShort(t, "rsyslog")
	if _, err := os.Stat(Rsyslogd); err != nil {
		msg := "rsyslogd is not installed (apt-get install rsyslog rsyslog-gnutls, or bash deploy/bootstrap.sh)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// RequireTLS is Require for rsyslog's GnuTLS driver.
func RequireTLS(t testing.TB) {
	t.Helper()
	Require(t)
	if m, _ := filepath.Glob("/usr/lib/*/rsyslog/lmnsd_gtls.so"); len(m) == 0 {
		msg := "rsyslog's GnuTLS driver is not installed (apt-get install rsyslog-gnutls)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
}

// Start starts rsyslogd on a free loopback port, over TLS when tls is
// not nil, and stops it when the test ends.
func Start(t testing.TB, tls *TLS) *Rsyslog {
	t.Helper()
	if tls != nil {
		RequireTLS(t)
	} else {
		Require(t)
	}
	r := &Rsyslog{t: t, dir: t.TempDir(), port: sandgatetest.FreePort(t)}
	r.conf = filepath.Join(r.dir, "rsyslog.conf")
	var global, module string
	if tls != nil {
		global = fmt.Sprintf(` defaultNetstreamDriverCAFile=%q defaultNetstreamDriverCertFile=%q defaultNetstreamDriverKeyFile=%q`,
			tls.CAFile, tls.CertFile, tls.KeyFile)
		mode := "anon"
		if tls.ClientCerts {
			mode = "x509/certvalid"
		}
		module = ` streamDriver.name="gtls" streamDriver.mode="1" streamDriver.authMode="` + mode + `"`
	}
	// One worker on the main queue: what one connection
	// sends is written in the order it was sent, which the tests check.
	conf := fmt.Sprintf(`global(workDirectory=%q maxMessageSize="64k"%s)
main_queue(queue.workerThreads="1")
module(load="imtcp"%s)
template(name="raw" type="string" string="%%rawmsg%%\n")
template(name="parsed" type="string" string="%%protocol-version%% %%hostname%% %%app-name%% %%msgid%% %%syslogseverity%% %%syslogfacility%%\n")
template(name="msg" type="string" string="[%%msg%%]\n")
ruleset(name="in") {
  action(type="omfile" file=%q template="raw")
  action(type="omfile" file=%q template="parsed")
  action(type="omfile" file=%q template="msg")
}
input(type="imtcp" address="127.0.0.1" port="%d" ruleset="in")
`, r.dir, global, module, r.RawFile(), r.ParsedFile(), r.MsgFile(), r.port)
	if err := os.WriteFile(r.conf, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	r.Start()
	t.Cleanup(r.Stop)
	return r
}

// Addr is the receiver's host:port.
func (r *Rsyslog) Addr() string { return fmt.Sprintf("127.0.0.1:%d", r.port) }

// RawFile holds each message as received (%rawmsg%), a line each.
func (r *Rsyslog) RawFile() string { return filepath.Join(r.dir, "raw.log") }

// ParsedFile holds what rsyslog parsed of each message: protocol
// version, hostname, app name, msgid, severity and facility.
func (r *Rsyslog) ParsedFile() string { return filepath.Join(r.dir, "parsed.log") }

// MsgFile holds each message's MSG as rsyslog parsed it, one a line.
func (r *Rsyslog) MsgFile() string { return filepath.Join(r.dir, "msg.log") }

// Start starts (or restarts) rsyslogd on the same port and waits until it
// accepts connections.
func (r *Rsyslog) Start() {
	r.t.Helper()
	if r.cmd != nil {
		r.t.Fatal("sinkstest: rsyslogd is running")
	}
	var err error
	if r.log, err = os.OpenFile(filepath.Join(r.dir, "rsyslogd.out"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600); err != nil {
		r.t.Fatal(err)
	}
	pid := filepath.Join(r.dir, "rsyslogd.pid")
	_ = os.Remove(pid)
	r.cmd = exec.Command(Rsyslogd, "-n", "-f", r.conf, "-i", pid)
	r.cmd.Stdout, r.cmd.Stderr = r.log, r.log
	r.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := r.cmd.Start(); err != nil {
		r.t.Fatalf("sinkstest: start rsyslogd: %v", err)
	}
	deadline := time.Now().Add(15 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", r.Addr(), time.Second)
		if err == nil {
			c.Close()
			// rsyslogd starts with a configuration it could not parse
			// in part: that is the test's mistake.
			if out, _ := os.ReadFile(filepath.Join(r.dir, "rsyslogd.out")); bytes.Contains(out, []byte("error during parsing")) {
				r.t.Fatalf("sinkstest: rsyslogd refused part of its configuration:\n%s", out)
			}
			return
		}
		if time.Now().After(deadline) {
			out, _ := os.ReadFile(filepath.Join(r.dir, "rsyslogd.out"))
			r.t.Fatalf("sinkstest: rsyslogd does not listen on %s: %v\n%s", r.Addr(), err, out)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// Kill stops rsyslogd at once (SIGKILL), like a receiver that crashes.
func (r *Rsyslog) Kill() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Kill()
	_ = r.cmd.Wait()
	r.cmd = nil
	r.log.Close()
}

// Stop stops rsyslogd cleanly (SIGTERM), so that it writes out what it
// holds.
func (r *Rsyslog) Stop() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = r.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = r.cmd.Process.Kill()
		<-done
	}
	r.cmd = nil
	r.log.Close()
}

// Lines returns the complete lines of a file rsyslog writes (none when it
// does not exist yet).
func Lines(path string) []string {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []string
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 1<<16), 1<<20)
	for sc.Scan() {
		if l := strings.TrimRight(sc.Text(), "\r"); l != "" {
			out = append(out, l)
		}
	}
	return out
}

// WaitLines waits until path holds at least n lines and returns them.
func WaitLines(t testing.TB, path string, n int, within time.Duration) []string {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		l := Lines(path)
		if len(l) >= n {
			return l
		}
		if time.Now().After(deadline) {
			t.Fatalf("sinkstest: %s has %d lines after %v, want %d", filepath.Base(path), len(l), within, n)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
