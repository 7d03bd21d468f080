package executor

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/docker/docker/api/types/volume"

	"github.com/sandgate/sandgate"
)

// leaseVolume puts a lease volume of instance on node into the fake, as
// renewed at created, by a process elsewhere (or, with self, by this
// process's pid with another start time: a process that is gone).
func leaseVolume(f *fakeDocker, node, instance string, created time.Time, self bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.volumes == nil {
		f.volumes = map[string]*volume.Volume{}
	}
	p := process{host: "elsewhere", boot: "another-boot", pidns: "pid:[1]", pid: 4242, start: "100"}
	if self {
		p = thisProcess()
		p.start = "not-" + p.start
	}
	name := leaseVolumePrefix + node + "-" + instance + "-1"
	f.volumes[name] = &volume.Volume{Name: name, CreatedAt: created.UTC().Format(time.RFC3339), Labels: map[string]string{
		labelLeaseNode: node, labelLeaseInstance: instance, labelLeaseHost: p.host, labelLeaseBoot: p.boot,
		labelLeasePIDNS: p.pidns, labelLeasePID: strconv.Itoa(p.pid), labelLeaseStart: p.start,
	}}
}

// TestLeaseClaim: a node held by a live instance elsewhere is refused,
// naming it; one whose holder lapsed, or whose holder on this host is a
// process that is gone, is taken, and the dead claim removed.
func TestLeaseClaim(t *testing.T) {
	for _, tc := range []struct {
		name    string
		created time.Duration // before now
		self    bool
		refused bool
	}{
		{"live elsewhere", time.Second, false, true},
		{"lapsed", time.Hour, false, false},
		{"dead on this host", time.Second, true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFakeDocker()
			leaseVolume(f, "unit", "other", time.Now().Add(-tc.created), tc.self)
			e, _ := unitExecutor(t, f, nil)
			err := e.Claim(context.Background())
			if tc.refused {
				if sandgate.ErrorCodeOf(err) != sandgate.CodeConflict || !containsAll(err.Error(), "unit", "instance other", "elsewhere") {
					t.Fatalf("Claim = %v, want CONFLICT naming the node and the holder", err)
				}
				return
			}
			if err != nil {
				t.Fatalf("Claim = %v, want the dead holder's node taken", err)
			}
			defer e.Close()
			f.mu.Lock()
			defer f.mu.Unlock()
			for name, v := range f.volumes {
				if v.Labels[labelLeaseInstance] == "other" {
					t.Errorf("the dead claim %s is still there", name)
				}
			}
		})
	}
}

// TestLeaseNeverTwoHolders races claimants of one node on one daemon,
// many times: at most one holds it each round (both may step back).
func TestLeaseNeverTwoHolders(t *testing.T) {
	for round := range 50 {
		f := newFakeDocker()
		var (
			wg   sync.WaitGroup
			mu   sync.Mutex
			held int
			exs  []*Executor
		)
		for range 3 {
			e, _ := unitExecutor(t, f, nil)
			exs = append(exs, e)
			wg.Add(1)
			go func() {
				defer wg.Done()
				if e.Claim(context.Background()) == nil {
					mu.Lock()
					held++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		if held > 1 {
			t.Fatalf("round %d: %d claimants hold the node", round, held)
		}
		for _, e := range exs {
			e.Close()
		}
	}
}

// TestReaperSparesLiveInstances: on a node another live instance shares,
// the reaper removes this instance's orphans and a dead instance's
// containers, never the live instance's, nor a container that names no
// instance while another instance is alive.
func TestReaperSparesLiveInstances(t *testing.T) {
	f := newFakeDocker()
	leaseVolume(f, "unit", "live-other", time.Now(), false)
	e, log := unitExecutor(t, f, func(c *Config) { c.Instance = "me" })
	add := func(id, instance string) {
		l := map[string]string{sandgate.LabelManaged: "true", sandgate.LabelNode: "unit", sandgate.LabelRunID: "gone-" + id}
		if instance != "" {
			l[LabelInstance] = instance
		}
		f.containers[id] = &fakeContainer{id: id, name: id, labels: l}
	}
	add("mine", "me")
	add("dead", "dead-instance")
	add("live", "live-other")
	add("unlabelled", "")
	removed, err := e.reaper.CleanupOrphans(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]bool{}
	for _, s := range removed {
		got[s.ContainerID] = true
	}
	if !got["mine"] || !got["dead"] || len(got) != 2 {
		t.Errorf("removed %v, want mine and dead only", got)
	}
	if log.count(sandgate.EventOrphanRemoved) != 2 {
		t.Errorf("events %v, want two orphan.removed", log.types())
	}
	boxes, err := e.reaper.Sandboxes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	for _, b := range boxes {
		if b.Orphan {
			t.Errorf("%s listed as an orphan", b.ContainerID)
		}
	}
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
