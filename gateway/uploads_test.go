package gateway

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/admission"
)

// stalledPut PUTs a file of size bytes declared to the session, sends
// first bytes of it and stalls until ctx ends. It returns the answer (or
// the client's error) on the channel.
func stalledPut(ctx context.Context, e *testEnv, id string, size, first int64) <-chan response {
	pr, pw := io.Pipe()
	go func() {
		pw.Write(make([]byte, first))
		<-ctx.Done()
		pw.CloseWithError(ctx.Err())
	}()
	out := make(chan response, 1)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPut, e.ts.URL+"/v1/sessions/"+id+"/files?path=f.bin", pr)
	req.ContentLength = size
	req.Header.Set("Authorization", "Bearer "+tokAlice)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- response{status: -1, body: []byte(err.Error())}
			return
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		out <- response{status: resp.StatusCode, body: body, header: resp.Header}
	}()
	return out
}

// TestUploadMinimumRate: an upload that stalls is cut at the end of its
// rate window, answered 400 naming the body, and what it held is freed.
func TestUploadMinimumRate(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *testEnv) {
		c.Uploads = admission.UploadLimits{RateWindow: 300 * time.Millisecond, MinRate: 64 << 10}
	})
	ss := e.do("POST", "/v1/sessions", tokAlice, `{}`).session(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	select {
	case r := <-stalledPut(ctx, e, ss.ID, 8<<20, 1<<10):
		if r.status != http.StatusBadRequest || r.errorCode() != string(sandgate.CodeInvalidRequest) {
			t.Errorf("a stalled upload = %d %s, want 400", r.status, r.body)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a stalled upload was not cut")
	}
	if b, n := e.srv.gate.Uploads(); b != 0 || n != 0 {
		t.Errorf("after the cut, uploads hold %d bytes, %d in flight", b, n)
	}
}

// TestUploadRefusedUnread: a stalled upload to another team's session,
// and to one that does not exist, is answered 404 at once, alike, and the
// answer does not wait for the body: nothing of it is read, not even to
// drain the connection.
func TestUploadRefusedUnread(t *testing.T) {
	e := newEnv(t)
	ss := e.do("POST", "/v1/sessions", tokBob, `{}`).session(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	answers := map[string]string{}
	for name, id := range map[string]string{"another team's": ss.ID, "none": "01900000-0000-7000-8000-0000000000ff"} {
		select {
		case r := <-stalledPut(ctx, e, id, 8<<20, 64<<10):
			if r.status != http.StatusNotFound {
				t.Errorf("%s session: %d %s, want 404", name, r.status, r.body)
			}
			answers[name] = r.errorCode() + " " + strings.ReplaceAll(r.errorBody().Error.Message, id, "{id}")
		case <-time.After(30 * time.Second):
			t.Fatalf("a stalled upload to %s session was not answered", name)
		}
	}
	if answers["another team's"] != answers["none"] {
		t.Errorf("answers differ: %v", answers)
	}
	if b, n := e.srv.gate.Uploads(); b != 0 || n != 0 {
		t.Errorf("uploads hold %d bytes, %d in flight", b, n)
	}
}

// TestUploadQuotas: a principal's uploads under way are bounded in
// number and bytes (RATE-LIMITED), and every principal's together in
// bytes (STORAGE-FULL, 507), before a byte of the refused one is read.
func TestUploadQuotas(t *testing.T) {
	e := newEnv(t, func(c *Config, _ *testEnv) {
		c.Uploads = admission.UploadLimits{PrincipalUploads: 2, PrincipalBytes: 64 << 20, GlobalBytes: 16<<20 + 100<<10, RateWindow: time.Minute}
	})
	ss := e.do("POST", "/v1/sessions", tokAlice, `{}`).session(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	first := stalledPut(ctx, e, ss.ID, 8<<20, 1<<10)
	second := stalledPut(ctx, e, ss.ID, 8<<20, 1<<10)
	deadline := time.Now().Add(30 * time.Second)
	for _, n := e.srv.gate.Uploads(); n != 2; _, n = e.srv.gate.Uploads() {
		if time.Now().After(deadline) {
			t.Fatalf("%d uploads in flight, want 2", n)
		}
		time.Sleep(5 * time.Millisecond)
	}
	r := <-stalledPut(ctx, e, ss.ID, 1<<20, 1<<10)
	if r.status != http.StatusTooManyRequests || r.errorBody().Error.Details["limit"] != "uploads" || r.header.Get("Retry-After") == "" {
		t.Errorf("a third upload of one principal = %d %s, want 429 naming the uploads", r.status, r.body)
	}
	// bob's own quota is untouched, the gateway's is not: 16 MiB of it
	// are held.
	r = e.putAs(tokBob, ss.ID, 200<<10)
	if r.status != http.StatusNotFound {
		t.Errorf("bob's upload to alice's session = %d, want 404 before any quota", r.status)
	}
	bobs := e.do("POST", "/v1/sessions", tokBob, `{}`).session(t)
	r = e.putAs(tokBob, bobs.ID, 200<<10)
	if r.status != http.StatusInsufficientStorage || r.errorCode() != string(sandgate.CodeStorageFull) {
		t.Errorf("an upload past the gateway's room = %d %s, want 507 STORAGE-FULL", r.status, r.body)
	}
	if r = e.putAs(tokBob, bobs.ID, 50<<10); r.status != http.StatusOK {
		t.Errorf("an upload that fits = %d %s", r.status, r.body)
	}
	cancel()
	<-first
	<-second
	deadline = time.Now().Add(30 * time.Second)
	for b, n := e.srv.gate.Uploads(); b != 0 || n != 0; b, n = e.srv.gate.Uploads() {
		if time.Now().After(deadline) {
			t.Fatalf("after the clients went away, uploads hold %d bytes, %d in flight", b, n)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// putAs PUTs n bytes to a session's file as token.
func (e *testEnv) putAs(token, id string, n int) response {
	e.t.Helper()
	return e.do("PUT", "/v1/sessions/"+id+"/files?path=f.bin", token, strings.Repeat("x", n), "Content-Type: application/octet-stream")
}
