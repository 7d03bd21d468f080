package e2e

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/client"
	"github.com/sandgate/sandgate/sandgatetest"
)

// TestMountSwappedWhileQueuedIsNotFollowed is the attack of a submitter
// with two admitted runs. With one slot, run A holds it with the team's
// directory mounted read-write; run B, which mounts the team's "proj"
// read-only, is admitted and waits in the queue. A then replaces proj
// with a symlink to the host's root and ends. When B's container is
// created, the daemon must not see the host's root: B fails with SBX-003
// before anything is mounted, and the trail says so.
func TestMountSwappedWhileQueuedIsNotFollowed(t *testing.T) {
	if os.Geteuid() != 0 && os.Getenv("CI") != "true" {
		t.Skip("bind mounts need root")
	}
	root := filepath.Join(t.TempDir(), "roots")
	team := filepath.Join(root, "dev") // the dev principal's team
	proj := filepath.Join(team, "proj")
	if err := os.MkdirAll(proj, 0o755); err != nil {
		t.Fatal(err)
	}
	// The team's runs (uid 10001) may write in the team's directory.
	if err := os.Chmod(team, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(proj, "marker"), []byte("inside\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, withEnv("SANDGATE_MOUNT_ROOTS", root), withEnv("SANDGATE_MAX_CONCURRENT", "1"))
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	attacker, err := s.Client.Submit(ctx, sandgate.RunSpec{
		Mounts:  []sandgate.Mount{{Source: team, Target: "/team"}},
		Command: []string{"sh", "-c", "while [ ! -e /team/go ]; do sleep 0.05; done; mv /team/proj /team/proj.gone && ln -s / /team/proj && echo swapped"},
	}, client.SubmitOptions{})
	if err != nil {
		t.Fatalf("submit the attacker: %v", err)
	}
	sandgatetest.WaitFor(t, "the attacker to run", time.Minute, func() bool {
		v, ok := s.runState(t, attacker.ID)
		return ok && v.State == sandgate.StateRunning
	})
	victim, err := s.Client.Submit(ctx, sandgate.RunSpec{
		Mounts:  []sandgate.Mount{{Source: proj, Target: "/workspace", ReadOnly: true}},
		Command: []string{"sh", "-c", "ls /workspace; cat /workspace/marker"},
	}, client.SubmitOptions{})
	if err != nil {
		t.Fatalf("submit the victim: %v", err)
	}
	if v, _ := s.runState(t, victim.ID); v.State == sandgate.StateFinished {
		t.Fatalf("the victim did not wait for the slot: %+v", v)
	}
	if err := os.WriteFile(filepath.Join(team, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}

	a := s.waitFinished(t, attacker.ID, time.Minute)
	if a.Outcome == nil || *a.Outcome != sandgate.OutcomeSucceeded || a.Stdout.Data != "swapped\n" {
		t.Fatalf("the attacker did not swap the directory: %+v", a)
	}
	if target, err := os.Readlink(proj); err != nil || target != "/" {
		t.Fatalf("proj is not a symlink to / after the attack: %q, %v", target, err)
	}
	v := s.waitFinished(t, victim.ID, time.Minute)
	for _, hostEntry := range []string{"proc", "etc", "usr"} {
		if strings.Contains(v.Stdout.Data, hostEntry) {
			t.Errorf("the victim saw the host's root: stdout %q", v.Stdout.Data)
			break
		}
	}
	if v.Outcome == nil || *v.Outcome != sandgate.OutcomeError || v.Error == nil || v.Error.Code != sandgate.CodeMountError {
		t.Fatalf("victim = outcome %v error %+v stdout %q; want error SBX-003", v.Outcome, v.Error, v.Stdout.Data)
	}
	if !strings.Contains(v.Error.Message, "mounts[0].source") {
		t.Errorf("the error does not name the mount: %q", v.Error.Message)
	}
	evs := s.runEvents(t, victim.ID)
	failed, ok := findEvent(evs, sandgate.EventRunFailed)
	if !ok || failed.Payload["error_code"] != string(sandgate.CodeMountError) {
		t.Errorf("the victim's trail has no run.failed with SBX-003: %s", eventTypes(evs))
	}
	if hasEvent(evs, sandgate.EventContainerCreated) {
		t.Errorf("a container was created for the victim: %s", eventTypes(evs))
	}
	// The attacker's container.created records the directory it got.
	created, ok := findEvent(s.runEvents(t, attacker.ID), sandgate.EventContainerCreated)
	if !ok {
		t.Fatal("the attacker has no container.created event")
	}
	mounts, _ := created.Payload["mounts"].([]any)
	if len(mounts) != 1 || mounts[0].(map[string]any)["source"] != team {
		t.Errorf("container.created mounts = %v, want the team directory", created.Payload["mounts"])
	}
	s.verifyTrail(t)
}

// TestOutputControlBytesBounded: a run that prints its whole output limit
// in control bytes is stored and served as base64, so its run is about
// 4/3 of the output, not six times it in JSON escapes; a list of runs
// carries sizes and digests, and the data only when asked.
func TestOutputControlBytesBounded(t *testing.T) {
	s := startServer(t)
	const limit = 1 << 20
	v := s.submitWait(t, s.Token, `{"command":["sh","-c","head -c 1048576 /dev/zero | tr '\\0' '\\1'; printf 'x\\001y' >&2"]}`)
	if v.Outcome == nil || *v.Outcome != sandgate.OutcomeSucceeded {
		t.Fatalf("run = %+v", v)
	}
	status, _, body := s.do(t, http.MethodGet, "/v1/runs/"+v.ID, "")
	if status != http.StatusOK {
		t.Fatalf("GET run = %d", status)
	}
	if len(body) > limit*3/2 {
		t.Errorf("GET of a run with 1 MiB of \\x01 is %d bytes, more than 1.5 times the output", len(body))
	}
	var got api.RunView
	if err := json.Unmarshal(body, &got); err != nil {
		t.Fatal(err)
	}
	raw, err := base64.StdEncoding.DecodeString(got.Stdout.Data)
	if got.Stdout.Encoding != sandgate.EncodingBase64 || err != nil || len(raw) != limit || strings.Trim(string(raw), "\x01") != "" {
		t.Errorf("stdout: encoding %s, %d bytes decoded (%v)", got.Stdout.Encoding, len(raw), err)
	}
	if got.Stderr.Encoding != sandgate.EncodingBase64 || got.Stderr.Data != base64.StdEncoding.EncodeToString([]byte("x\x01y")) {
		t.Errorf("stderr = %+v", got.Stderr)
	}

	status, _, body = s.do(t, http.MethodGet, "/v1/runs", "")
	if status != http.StatusOK || len(body) > 16<<10 {
		t.Errorf("GET /v1/runs = %d, %d bytes: a list carries the output", status, len(body))
	}
	var list api.RunList
	if err := json.Unmarshal(body, &list); err != nil || len(list.Runs) != 1 {
		t.Fatalf("list = %s (%v)", body, err)
	}
	if o := list.Runs[0].Stdout; o.Data != "" || o.Bytes != limit || o.SHA256 == "" {
		t.Errorf("listed stdout = data %d bytes, bytes %d, sha256 %q; want no data, the size and digest", len(o.Data), o.Bytes, o.SHA256)
	}
	status, _, body = s.do(t, http.MethodGet, "/v1/runs?include=output", "")
	if err := json.Unmarshal(body, &list); status != http.StatusOK || err != nil || len(list.Runs) != 1 || list.Runs[0].Stdout.Data != got.Stdout.Data {
		t.Errorf("GET /v1/runs?include=output = %d: the output is not there", status)
	}
}

// TestCacheVolumeAdmin: a run writes to its team's cache volume, which an
// admin sees in GET /v1/volumes (`sandgate volume list`) with what it
// uses, and empties with DELETE /v1/volumes/{team}/{name} (`sandgate
// volume rm`), recorded as volume.removed; the team's next run starts
// from an empty volume. A volume in use cannot be removed.
func TestCacheVolumeAdmin(t *testing.T) {
	if os.Geteuid() != 0 && os.Getenv("CI") != "true" {
		t.Skip("cache volumes need root")
	}
	s := startServer(t)
	v := s.submitWait(t, s.Token, `{"command":["sh","-c","head -c 2097152 /dev/zero > /cache/blob && echo written"],"volumes":[{"name":"deps","target":"/cache"}]}`)
	if v.Outcome == nil || *v.Outcome != sandgate.OutcomeSucceeded {
		t.Fatalf("write to the cache: %+v", v)
	}
	env := map[string]string{"SANDGATE_URL": s.URL, "SANDGATE_TOKEN": s.Token}
	out, err := auditCLI(env, "volume", "list", "--json")
	if err != nil {
		t.Fatalf("volume list: %v\n%s", err, out)
	}
	var list api.VolumeList
	if err := json.Unmarshal([]byte(out), &list); err != nil || len(list.Volumes) != 1 {
		t.Fatalf("volume list = %s (%v)", out, err)
	}
	if got := list.Volumes[0]; got.Team != "dev" || got.Name != "deps" || got.UsedBytes < 2<<20 || !got.Mounted {
		t.Errorf("volume = %+v, want team dev's deps with 2 MiB used", got)
	}

	// In use: refused.
	busy, err := s.Client.Submit(context.Background(), sandgate.RunSpec{Command: []string{"sleep", "30"},
		Volumes: []sandgate.Volume{{Name: "deps", Target: "/cache"}}}, client.SubmitOptions{})
	if err != nil {
		t.Fatal(err)
	}
	sandgatetest.WaitFor(t, "the run to hold the volume", time.Minute, func() bool {
		r, ok := s.runState(t, busy.ID)
		return ok && r.State == sandgate.StateRunning
	})
	if status, _, body := s.do(t, http.MethodDelete, "/v1/volumes/dev/deps", ""); status != http.StatusConflict {
		t.Errorf("removing a volume in use = %d %s, want 409", status, body)
	}
	if _, err := s.Client.Cancel(context.Background(), busy.ID); err != nil {
		t.Fatal(err)
	}
	s.waitFinished(t, busy.ID, time.Minute)

	if out, err := auditCLI(env, "volume", "rm", "dev", "deps"); err != nil {
		t.Fatalf("volume rm: %v\n%s", err, out)
	}
	s.waitAuditEvents(t, s.Token, url.Values{"type": {string(sandgate.EventVolumeRemoved)}}, func(evs []sandgate.AuditRecord) bool {
		return len(evs) == 1 && evs[0].Team == "dev" && evs[0].Payload["volume"] == "deps"
	})
	v = s.submitWait(t, s.Token, `{"command":["sh","-c","ls -A /cache | grep -v lost+found | wc -l"],"volumes":[{"name":"deps","target":"/cache"}]}`)
	if strings.TrimSpace(v.Stdout.Data) != "0" {
		t.Errorf("after removal the volume holds %q entries, want an empty one", v.Stdout.Data)
	}
	if status, _, _ := s.do(t, http.MethodDelete, "/v1/volumes/dev/none", ""); status != http.StatusNotFound {
		t.Errorf("removing a volume that does not exist = %d, want 404", status)
	}
}
