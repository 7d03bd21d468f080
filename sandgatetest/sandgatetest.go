// Package sandgatetest holds the helpers the tests of several sandgate
// packages share: the unit tier's skip of integration tests, waiting for
// a condition, random names, free loopback ports, tar archives built from a list of entries, and the statistics
// the benchmarks report. It links the standard library only, so that any
// package's tests, in-package ones included, can use it.
package sandgatetest

import (
	"archive/tar"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"io"
	"net"
	"slices"
	"testing"
	"time"
)

// WaitFor polls cond until it holds, failing the test with what once
// limit has passed. The limit only bounds a hang: no assertion depends on
// how long the wait took. It polls every 10 ms at first, backing off to
// every 100 ms, so that a cond that asks a server is not a flood.
func WaitFor(t testing.TB, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(limit)
	wait := 10 * time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting for %s after %s", what, limit)
		}
		time.Sleep(wait)
		wait = min(2*wait, 100*time.Millisecond)
	}
}

// SkipShort skips t under go test -short, the unit tier: t needs what
// (the Docker daemon, a Postgres server, rsyslog), as integration tests
// do. The test-support packages that give tests those services call it.
func SkipShort(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s: an integration test, not run with -short", what)
	}
}

// RandomHex returns n random bytes in hex: names (of nodes, tags, files)
// no other test uses.
func RandomHex(t testing.TB, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// FreePort returns a TCP port of 127.0.0.1 that was free a moment ago.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// TarEntry is one entry of an archive Tar builds.
type TarEntry struct {
	Name string
	// Type is the tar type flag: '0' file (the default), '5' directory,
	// '2' symlink, '1' hard link, '3' character device, '4' block
	// device, '6' fifo. Builders of other formats may give it meanings
	// of their own (a zip's 's' socket).
	Type byte
	Mode int64 // 0644 for a file, 0755 for a directory when zero
	Body string
	Link string // a link's target
}

// TarEpoch is the modification time of every entry Tar writes.
var TarEpoch = time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)

// Tar builds a tar archive of entries, in order.
func Tar(t testing.TB, entries ...TarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		typ := e.Type
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := e.Mode
		if mode == 0 {
			mode = 0o644
			if typ == tar.TypeDir {
				mode = 0o755
			}
		}
		h := &tar.Header{Name: e.Name, Typeflag: typ, Mode: mode, Linkname: e.Link, ModTime: TarEpoch}
		if typ == tar.TypeReg {
			h.Size = int64(len(e.Body))
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatalf("tar header %q: %v", e.Name, err)
		}
		if _, err := io.WriteString(tw, e.Body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Median returns the median of ds, leaving ds as it was.
func Median(ds []time.Duration) time.Duration {
	s := slices.Sorted(slices.Values(ds))
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// Percentile returns the p-th percentile (0–100, nearest rank) of ds,
// leaving ds as it was.
func Percentile(ds []time.Duration, p float64) time.Duration {
	s := slices.Sorted(slices.Values(ds))
	if len(s) == 0 {
		return 0
	}
	i := int(float64(len(s))*p/100+0.5) - 1
	return s[max(0, min(i, len(s)-1))]
}
