package e2e

import (
	"archive/tar"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// The attack of #28 item 5: a sparse file. truncate -s 20G in a session
// whose workspace holds 32 MiB takes no block, and GET .../files of it
// streamed 20 GB of zeros out of the gateway.

// readCap is how much of an answer the tests read: twice the workspace's
// 32 MiB. An answer longer than that is the attack succeeding.
const readCap = 64 << 20

// getSessionFile GETs path out of session id, reading at most readCap
// bytes of the answer; over is true when the answer was longer.
func getSessionFile(t *testing.T, s *testServer, id, path string) (status int, body []byte, over bool) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, s.URL+"/v1/sessions/"+id+"/files?path="+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+s.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(io.LimitReader(resp.Body, readCap+1))
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Logf("reading the answer: %v", err)
	}
	return resp.StatusCode, body, len(body) > readCap
}

// TestSessionSparseFileRead: a 20 GB sparse file in a 32 MiB workspace is
// refused 413 TOO-LARGE naming the workspace's limit, before a byte of it
// is sent; a file within the workspace's size is still read whole.
// Variants: the same files read through their directory are left out of
// the tar, which stays within the workspace's size (as before); and a file made sparse
// past the limit by seeking and writing one byte at its end is refused
// like a truncated one.
func TestSessionSparseFileRead(t *testing.T) {
	s := startServer(t)
	c := s.Client
	ss := openSession(t, c, api.SessionRequest{IdleTimeoutSeconds: 300, RunSpec: sandgate.RunSpec{Resources: sandgate.Resources{WorkspaceMB: 32}}})
	t.Cleanup(func() { _, _ = c.DeleteSession(context.Background(), ss.ID) })
	r := execWait(t, c, ss.ID, api.ExecRequest{Command: []string{"sh", "-c",
		"mkdir d && truncate -s 20G d/big && dd if=/dev/zero of=d/seek bs=1 count=1 seek=1073741824 2>/dev/null && " +
			"head -c 1048576 /dev/urandom > d/small && du -k d/big d/seek && ls -l d"}})
	if outcomeOf(r) != sandgate.OutcomeSucceeded {
		t.Fatalf("making the sparse files: %s %q %q", outcomeOf(r), r.Stdout.Data, r.Stderr.Data)
	}
	t.Logf("in the session: %s", r.Stdout.Data)

	for _, name := range []string{"d/big", "d/seek"} {
		status, body, over := getSessionFile(t, s, ss.ID, name)
		if over {
			t.Fatalf("GET %s streamed more than %d MiB out of a 32 MiB workspace (status %d)", name, readCap>>20, status)
		}
		var e api.ErrorBody
		if err := json.Unmarshal(body, &e); status != http.StatusRequestEntityTooLarge || err != nil || e.Error.Code != sandgate.CodeTooLarge {
			t.Fatalf("GET %s = %d %.300s, want 413 %s", name, status, body, sandgate.CodeTooLarge)
		}
		if !strings.Contains(e.Error.Message, "32 MiB") || e.Error.Details["limit_bytes"] != float64(32<<20) {
			t.Errorf("GET %s: %q %v does not name the workspace's limit of 32 MiB", name, e.Error.Message, e.Error.Details)
		}
	}

	status, body, _ := getSessionFile(t, s, ss.ID, "d/small")
	if status != http.StatusOK || len(body) != 1<<20 {
		t.Fatalf("GET d/small = %d with %d bytes, want 200 with 1 MiB", status, len(body))
	}

	status, body, over := getSessionFile(t, s, ss.ID, "d")
	if over || status != http.StatusOK {
		t.Fatalf("GET d = %d, %d bytes (over %d MiB: %v)", status, len(body), readCap>>20, over)
	}
	tr := tar.NewReader(strings.NewReader(string(body)))
	var names []string
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the directory's tar: %v", err)
		}
		names = append(names, h.Name)
	}
	// Collection stops at the first file over the budget (d/big sorts
	// first): neither sparse file is in the tar.
	for _, n := range names {
		if n == "big" || n == "seek" {
			t.Errorf("the directory's tar holds the sparse file %s (all: %v)", n, names)
		}
	}
}
