package executor_test

import (
	"fmt"
	"testing"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/sandgatetest"
)

// TestRunUsage runs real containers and checks what each reports it used,
// in its result and in its container.exited event. The bands are loose:
// the counters are exact, but a run's last moments after the last reading
// are not in them, and the machine is shared.
func TestRunUsage(t *testing.T) {
	ex, rec := newTestExecutor(t, nil)
	const mb = 1 << 20
	volume := "usage-io-" + sandgatetest.RandomHex(t, 4)
	cases := []struct {
		name    string
		tune    func(*sandgate.RunSpec)
		cmd     []string
		outcome sandgate.Outcome
		check   func(t *testing.T, u *sandgate.Usage)
		network bool
	}{
		{
			name:    "true reports a usage with its source",
			cmd:     []string{"true"},
			outcome: sandgate.OutcomeSucceeded,
			check:   func(t *testing.T, u *sandgate.Usage) {},
		},
		{
			name: "a second of CPU burnt reports at least half of it",
			// A busy loop of the shell of a fixed amount of work (about
			// 1.5 s of one CPU here), not of wall time: on a loaded host
			// a second of wall time may hold far less CPU.
			tune:    func(s *sandgate.RunSpec) { s.Resources.CPUs = 1 },
			cmd:     []string{"sh", "-c", burnCPU},
			outcome: sandgate.OutcomeSucceeded,
			check: func(t *testing.T, u *sandgate.Usage) {
				if u.CPUMS == nil || *u.CPUMS < 500 {
					t.Errorf("cpu_ms = %v, want >= 500", deref(u.CPUMS))
				}
				if u.CPUUserMS == nil || u.CPUSystemMS == nil {
					t.Errorf("cpu_user_ms = %v, cpu_system_ms = %v, want both", deref(u.CPUUserMS), deref(u.CPUSystemMS))
				}
			},
		},
		{
			name: "40 MB written to tmpfs reports a peak of at least that",
			tune: func(s *sandgate.RunSpec) { s.Resources.TmpfsMB = 64; s.Resources.MemoryMB = 128 },
			// tmpfs pages are charged to the container's memory.
			cmd:     []string{"sh", "-c", "head -c 41943040 /dev/zero > /tmp/fill && sleep 0.5"},
			outcome: sandgate.OutcomeSucceeded,
			check: func(t *testing.T, u *sandgate.Usage) {
				if u.MemoryPeakBytes == nil || *u.MemoryPeakBytes < 40*mb {
					t.Errorf("memory_peak_bytes = %v, want >= %d", deref(u.MemoryPeakBytes), 40*mb)
				}
				if u.PidsPeak == nil || *u.PidsPeak < 2 {
					t.Errorf("pids_peak = %v, want >= 2 (init and the shell)", deref(u.PidsPeak))
				}
			},
		},
		{
			name:    "a run killed for memory reports its limit as its peak",
			tune:    func(s *sandgate.RunSpec) { s.Resources.MemoryMB = 32 },
			cmd:     []string{"sh", "-c", "head -c 200m /dev/zero | tail"},
			outcome: sandgate.OutcomeOOMKilled,
			check: func(t *testing.T, u *sandgate.Usage) {
				if u.MemoryPeakBytes == nil || *u.MemoryPeakBytes != 32*mb {
					t.Errorf("memory_peak_bytes = %v, want the limit %d", deref(u.MemoryPeakBytes), 32*mb)
				}
			},
		},
		{
			name: "direct I/O to a disk-backed volume is counted as block I/O",
			tune: func(s *sandgate.RunSpec) {
				s.Volumes = []sandgate.Volume{{Name: volume, Target: "/cache"}}
			},
			// Direct I/O: its requests are the container's own. Buffered
			// writes reach the disk later through the kernel's flusher,
			// which cgroup v1 charges to the root cgroup.
			cmd: []string{"sh", "-c", "dd if=/dev/zero of=/cache/f bs=1M count=8 oflag=direct 2>/dev/null && " +
				"dd if=/cache/f of=/dev/null bs=1M iflag=direct 2>/dev/null && sleep 0.3 && rm /cache/f"},
			outcome: sandgate.OutcomeSucceeded,
			check: func(t *testing.T, u *sandgate.Usage) {
				if (u.IOReadBytes == nil) != (u.IOWriteBytes == nil) {
					t.Fatalf("io_read_bytes = %v, io_write_bytes = %v: both or neither", deref(u.IOReadBytes), deref(u.IOWriteBytes))
				}
				if u.IOReadBytes == nil {
					// cgroup v1 from Linux 6.10 keeps no block I/O
					// counters without a throttle rule on the device.
					t.Logf("the kernel keeps no block I/O counters for this cgroup")
					return
				}
				if *u.IOReadBytes < 8*mb || *u.IOWriteBytes < 8*mb {
					t.Errorf("io_read_bytes = %d, io_write_bytes = %d, want >= %d each", *u.IOReadBytes, *u.IOWriteBytes, 8*mb)
				}
			},
		},
		{
			name:    "a bridge run reports network counters",
			tune:    func(s *sandgate.RunSpec) { s.Network = "bridge" },
			cmd:     []string{"sleep", "0.3"},
			outcome: sandgate.OutcomeSucceeded,
			network: true,
			check: func(t *testing.T, u *sandgate.Usage) {
				if u.NetRxBytes == nil || u.NetTxBytes == nil {
					t.Errorf("net_rx_bytes = %v, net_tx_bytes = %v, want both", deref(u.NetRxBytes), deref(u.NetTxBytes))
				}
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			job := newJob(t, tc.tune, tc.cmd...)
			res := execute(t, ex, job)
			if res.Outcome != tc.outcome {
				t.Fatalf("outcome = %s, want %s (%+v)", res.Outcome, tc.outcome, res.Error)
			}
			u := res.Usage
			if u == nil {
				t.Fatal("no usage in the result")
			}
			if u.Source == "" {
				t.Error("usage has no source")
			}
			if u.Source != sandgate.UsageNone && u.SampledAt == nil {
				t.Error("usage has a source but no sampled_at")
			}
			if want := res.FinishedAt.Sub(res.StartedAt).Milliseconds(); u.WallMS != want {
				t.Errorf("wall_ms = %d, want %d", u.WallMS, want)
			}
			if !tc.network && (u.NetRxBytes != nil || u.NetTxBytes != nil) {
				t.Errorf("net counters %v/%v for a run without a network", deref(u.NetRxBytes), deref(u.NetTxBytes))
			}
			tc.check(t, u)
			t.Logf("usage: %s", usageString(u))

			var exited *sandgate.Event
			for _, ev := range rec.of(job.RunID) {
				if ev.Type == sandgate.EventContainerExited {
					exited = &ev
				}
			}
			if exited == nil {
				t.Fatal("no container.exited event")
			}
			p, ok := exited.Payload["usage"].(map[string]any)
			if !ok {
				t.Fatalf("container.exited payload has no usage: %v", exited.Payload)
			}
			if p["source"] != string(u.Source) || p["wall_ms"] != u.WallMS {
				t.Errorf("event usage %v, want the result's %s", p, usageString(u))
			}
			if u.MemoryPeakBytes != nil && p["memory_peak_bytes"] != *u.MemoryPeakBytes {
				t.Errorf("event memory_peak_bytes = %v, want %d", p["memory_peak_bytes"], *u.MemoryPeakBytes)
			}
		})
	}
}

// TestRunUsageSourceIsCgroup holds a local daemon's runs to the cgroup
// files: a run long enough to be read at least once says which version.
func TestRunUsageSourceIsCgroup(t *testing.T) {
	ex, _ := newTestExecutor(t, nil)
	res := execute(t, ex, newJob(t, nil, "sleep", "0.2"))
	if res.Usage == nil {
		t.Fatal("no usage")
	}
	switch res.Usage.Source {
	case sandgate.UsageCgroupV1, sandgate.UsageCgroupV2:
	default:
		t.Errorf("source = %q, want cgroup-v1 or cgroup-v2 for a local daemon", res.Usage.Source)
	}
	if res.Usage.CPUMS == nil || res.Usage.MemoryPeakBytes == nil {
		t.Errorf("usage %s lacks CPU or memory", usageString(res.Usage))
	}
}

// burnCPU is a shell busy loop of a fixed amount of work: about 1.5 s of
// one CPU on this machine (0.8 s per 300,000 rounds under busybox sh),
// however long the host's load stretches it in wall time.
const burnCPU = `i=0; while [ $i -lt 600000 ]; do i=$((i+1)); done`

func deref(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}

func usageString(u *sandgate.Usage) string {
	return fmt.Sprint(u.Payload())
}

// TestWarmRunUsage: a run served from the warm pool reports its usage as
// a cold one does, its CPU time counted from its own start (not the
// launcher's wait before it), and its limit as its peak when killed for
// memory.
func TestWarmRunUsage(t *testing.T) {
	small := func(s *sandgate.RunSpec) { s.Resources.MemoryMB = 32 }
	ex, rec := newWarmExecutor(t, 1, nil, profileOf(t, nil), profileOf(t, small))

	burn := newJob(t, nil, "sh", "-c", burnCPU)
	res := execute(t, ex, burn)
	if !warm(rec, burn.RunID) {
		t.Fatal("the run was not served from the warm pool")
	}
	u := res.Usage
	if u == nil || (u.Source != sandgate.UsageCgroupV1 && u.Source != sandgate.UsageCgroupV2) {
		t.Fatalf("usage %+v, want one read from the cgroup", u)
	}
	if u.CPUMS == nil || *u.CPUMS < 500 || *u.CPUMS > u.WallMS+200 {
		t.Errorf("cpu_ms = %v with wall_ms %d, want >= 500 and no more than the wall time with one CPU", deref(u.CPUMS), u.WallMS)
	}
	t.Logf("warm usage: %s", usageString(u))

	waitIdle(t, ex, 2)
	oom := newJob(t, small, "sh", "-c", "head -c 200m /dev/zero | tail")
	res = execute(t, ex, oom)
	if !warm(rec, oom.RunID) || res.Outcome != sandgate.OutcomeOOMKilled {
		t.Fatalf("warm %t, outcome %s: want a warm run killed for memory", warm(rec, oom.RunID), res.Outcome)
	}
	if res.Usage == nil {
		t.Fatal("no usage")
	}
	if p := res.Usage.MemoryPeakBytes; p == nil || *p != 32<<20 {
		t.Errorf("memory_peak_bytes = %v, want the limit %d", deref(p), 32<<20)
	}
}

// TestRunCPUThrottled: a run that burns CPU under a limit of a tenth of a
// CPU reports the periods it was throttled in and the time throttled, in
// its usage and its container.exited event, and its trail records
// run.cpu_throttled; a run under the same limit that sleeps is throttled
// for less than the share (its start may be, its sleep is not) and
// records no such event.
func TestRunCPUThrottled(t *testing.T) {
	ex, rec := newTestExecutor(t, nil)
	limited := func(s *sandgate.RunSpec) { s.Resources.CPUs = 0.1 }
	throttledEvents := func(runID string) []sandgate.Event {
		var out []sandgate.Event
		for _, ev := range rec.of(runID) {
			if ev.Type == sandgate.EventRunCPUThrottled {
				out = append(out, ev)
			}
		}
		return out
	}

	// A fifth of burnCPU's work: about 0.3 s of one CPU, so at least 3 s
	// under the limit, however loaded the host.
	busy := newJob(t, limited, "sh", "-c", `i=0; while [ $i -lt 120000 ]; do i=$((i+1)); done`)
	res := execute(t, ex, busy)
	u := res.Usage
	if res.Outcome != sandgate.OutcomeSucceeded || u == nil {
		t.Fatalf("busy run: outcome %s, usage %v", res.Outcome, u)
	}
	t.Logf("busy usage: %s", usageString(u))
	if u.CPUNrPeriods == nil || u.CPUNrThrottled == nil || u.CPUThrottledMS == nil {
		t.Fatalf("no throttle counters in the usage: %s", usageString(u))
	}
	if *u.CPUNrThrottled == 0 || *u.CPUNrThrottled > *u.CPUNrPeriods || *u.CPUThrottledMS == 0 {
		t.Errorf("throttled in %d of %d periods, %d ms: want throttled", *u.CPUNrThrottled, *u.CPUNrPeriods, *u.CPUThrottledMS)
	}
	evs := throttledEvents(busy.RunID)
	if len(evs) != 1 {
		t.Fatalf("%d run.cpu_throttled events, want 1: %v", len(evs), rec.typesOf(busy.RunID))
	}
	p := evs[0].Payload
	if p["cpu_throttled_ms"] != *u.CPUThrottledMS || p["cpu_nr_throttled"] != *u.CPUNrThrottled || p["wall_ms"] != u.WallMS ||
		p["threshold"] != 0.25 || p["throttled_share"].(float64) <= 0.25 {
		t.Errorf("run.cpu_throttled = %v, want the usage's counters and a share above the threshold 0.25", p)
	}
	for _, ev := range rec.of(busy.RunID) {
		if ev.Type == sandgate.EventContainerExited {
			if eu, _ := ev.Payload["usage"].(map[string]any); eu == nil || eu["cpu_nr_throttled"] != *u.CPUNrThrottled {
				t.Errorf("container.exited usage = %v, want cpu_nr_throttled %d", ev.Payload["usage"], *u.CPUNrThrottled)
			}
		}
	}

	// Its start (runc's init and exec: ~50 ms of CPU, which a tenth of a
	// CPU serves in about five periods) may be throttled for ~0.3 s; a
	// 3 s sleep keeps that well under a quarter (1 s did not, once).
	idle := newJob(t, limited, "sleep", "3")
	res = execute(t, ex, idle)
	if u := res.Usage; u == nil || u.CPUThrottledMS == nil || *u.CPUThrottledMS*4 >= u.WallMS {
		// The container's start may be throttled in a period or two;
		// its sleep is not.
		t.Errorf("sleeping run's usage: %s, want throttled for less than a quarter of its time", usageString(res.Usage))
	}
	if evs := throttledEvents(idle.RunID); len(evs) != 0 {
		t.Errorf("sleeping run recorded run.cpu_throttled: %v", evs[0].Payload)
	}
}
