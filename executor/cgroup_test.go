package executor

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
)

// Samples of the files the sampler reads, as kernels write them.
const (
	v1CPUAcctStat = "user 312\nsystem 45\n"
	v1Blkio       = "8:0 Read 1048576\n8:0 Write 4096\n8:0 Sync 1052672\n8:0 Async 0\n8:0 Discard 0\n8:0 Total 1052672\n" +
		"7:1 Read 512\n7:1 Write 8388608\n7:1 Sync 0\n7:1 Async 8389120\n7:1 Discard 0\n7:1 Total 8389120\nTotal 9441792\n"
	v1BlkioEmpty = "Total 0\n"
	v2CPUStat    = "usage_usec 1234567\nuser_usec 1000000\nsystem_usec 234567\ncore_sched.force_idle_usec 0\n" +
		"nr_periods 10\nnr_throttled 2\nthrottled_usec 3456\nnr_bursts 0\nburst_usec 0\n"
	v2IOStat = "8:0 rbytes=1048576 wbytes=4096 rios=3 wios=1 dbytes=0 dios=0\n" +
		"259:0 rbytes=2048 wbytes=8388608 rios=1 wios=64 dbytes=0 dios=0\n"
	netDev = "Inter-|   Receive                                                |  Transmit\n" +
		" face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n" +
		"    lo:    1000      10    0    0    0     0          0         0     1000      10    0    0    0     0       0          0\n" +
		"  eth0:    5234      41    0    0    0     0          0         0      866      11    0    0    0     0       0          0\n" +
		"  eth1:     100       1    0    0    0     0          0         0       50       1    0    0    0     0       0          0\n"
	procCgroupV1 = "12:pids:/docker/abc\n11:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n1:name=systemd:/docker/abc\n0::/docker/abc\n"
	procCgroupV2 = "0::/system.slice/docker-abc.scope\n"
)

func TestCgroupParsers(t *testing.T) {
	t.Run("cpuacct.stat and cpu.stat", func(t *testing.T) {
		if diff := cmp.Diff(map[string]int64{"user": 312, "system": 45}, parseKeyValues(v1CPUAcctStat)); diff != "" {
			t.Errorf("cpuacct.stat (-want +got):\n%s", diff)
		}
		kv := parseKeyValues(v2CPUStat)
		if kv["usage_usec"] != 1234567 || kv["user_usec"] != 1000000 || kv["system_usec"] != 234567 {
			t.Errorf("cpu.stat = %v", kv)
		}
	})
	t.Run("v1 blkio sums Read and Write over devices", func(t *testing.T) {
		r, w, ok := parseBlkioV1(v1Blkio)
		if r != 1048576+512 || w != 4096+8388608 || !ok {
			t.Errorf("got %d, %d, %t", r, w, ok)
		}
		if _, _, ok := parseBlkioV1(v1BlkioEmpty); ok {
			t.Error("a file with only Total 0 says nothing, want ok false")
		}
	})
	t.Run("v2 io.stat sums rbytes and wbytes", func(t *testing.T) {
		r, w := parseIOStatV2(v2IOStat)
		if r != 1048576+2048 || w != 4096+8388608 {
			t.Errorf("got %d, %d", r, w)
		}
		if r, w := parseIOStatV2(""); r != 0 || w != 0 {
			t.Errorf("empty io.stat: %d, %d", r, w)
		}
	})
	t.Run("net/dev leaves loopback out", func(t *testing.T) {
		rx, tx := parseNetDev(netDev)
		if rx != 5334 || tx != 916 {
			t.Errorf("got rx %d tx %d, want 5334 916", rx, tx)
		}
	})
	t.Run("/proc/pid/cgroup", func(t *testing.T) {
		for _, tc := range []struct {
			in      string
			version int
			want    string
			ok      bool
		}{
			{procCgroupV1, 1, "/docker/abc", true},
			{procCgroupV2, 2, "/system.slice/docker-abc.scope", true},
			{procCgroupV2, 1, "", false},
			{"garbage", 2, "", false},
		} {
			got, ok := parseProcCgroup(tc.in, tc.version)
			if got != tc.want || ok != tc.ok {
				t.Errorf("parseProcCgroup(%q, %d) = %q, %t; want %q, %t", tc.in, tc.version, got, ok, tc.want, tc.ok)
			}
		}
	})
	t.Run("cgroup.procs", func(t *testing.T) {
		if got := firstPid("4242\n4250\n"); got != 4242 {
			t.Errorf("firstPid = %d", got)
		}
		if got := firstPid(""); got != 0 {
			t.Errorf("firstPid of nothing = %d", got)
		}
	})
}

// writeFiles makes the files under root.
func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestCgroupReaderV1 and V2 read a container's cgroup laid out as Docker's
// cgroupfs and systemd drivers lay it out, in a directory of files.
func TestCgroupReaderV1(t *testing.T) {
	root, proc := t.TempDir(), t.TempDir()
	id := "0123abcd"
	writeFiles(t, root, map[string]string{
		"cpuacct/cpuacct.usage":                                   "1\n",
		"cpuacct/docker/" + id + "/cpuacct.usage":                 "1500000000\n",
		"cpuacct/docker/" + id + "/cpuacct.usage_user":            "1200000000\n",
		"cpuacct/docker/" + id + "/cpuacct.usage_sys":             "300000000\n",
		"memory/docker/" + id + "/memory.max_usage_in_bytes":      "41943040\n",
		"pids/docker/" + id + "/pids.peak":                        "7\n",
		"pids/docker/" + id + "/cgroup.procs":                     "99\n100\n",
		"blkio/docker/" + id + "/blkio.throttle.io_service_bytes": v1Blkio,
		"cpu/docker/" + id + "/cpu.stat":                          "nr_periods 20\nnr_throttled 15\nthrottled_time 1250000000\nnr_bursts 0\nburst_time 0\n",
	})
	writeFiles(t, proc, map[string]string{"99/net/dev": netDev})
	l := detectCgroups(root, proc)
	if l.version != 1 {
		t.Fatalf("version = %d, want 1", l.version)
	}
	dirs, ok := l.find(id)
	if !ok {
		t.Fatal("cgroup not found")
	}
	rd := &cgroupReader{dirs: dirs, proc: proc, network: true}
	var s usageSample
	if err := rd.read(&s, usageSample{}); err != nil {
		t.Fatal(err)
	}
	want := usageSample{cpu: 1500000000, cpuUser: 1200000000, cpuSystem: 300000000, memPeak: 41943040, pidsPeak: 7,
		ioRead: 1048576 + 512, ioWrite: 4096 + 8388608, netRx: 5334, netTx: 916,
		periods: 20, throttled: 15, throttledNs: 1250000000, throttleOK: true,
		cpuOK: true, memOK: true, pidsOK: true, ioOK: true, netOK: true}
	if diff := cmp.Diff(want, s, cmp.AllowUnexported(usageSample{})); diff != "" {
		t.Errorf("sample (-want +got):\n%s", diff)
	}
	if rd.source() != sandgate.UsageCgroupV1 {
		t.Errorf("source = %s", rd.source())
	}

	// Without usage_user and usage_sys (before Linux 4.7): cpuacct.stat.
	os.Remove(filepath.Join(root, "cpuacct/docker", id, "cpuacct.usage_user"))
	writeFiles(t, root, map[string]string{"cpuacct/docker/" + id + "/cpuacct.stat": v1CPUAcctStat})
	s = usageSample{}
	if err := rd.read(&s, usageSample{}); err != nil {
		t.Fatal(err)
	}
	if s.cpuUser != 3120*int64(time.Millisecond) || s.cpuSystem != 450*int64(time.Millisecond) {
		t.Errorf("from ticks: user %d system %d", s.cpuUser, s.cpuSystem)
	}

	// The container exited: its cgroup is gone.
	if err := os.RemoveAll(filepath.Join(root, "cpuacct/docker", id)); err != nil {
		t.Fatal(err)
	}
	if err := rd.read(&s, usageSample{}); err != errCgroupGone {
		t.Errorf("read of a removed cgroup: %v, want errCgroupGone", err)
	}
}

func TestCgroupReaderV2(t *testing.T) {
	root, proc := t.TempDir(), t.TempDir()
	id := "4567cdef"
	dir := "system.slice/docker-" + id + ".scope/"
	writeFiles(t, root, map[string]string{
		"cgroup.controllers":   "cpu io memory pids\n",
		dir + "cpu.stat":       v2CPUStat,
		dir + "memory.current": "1000\n",
		dir + "pids.current":   "3\n",
		dir + "io.stat":        v2IOStat,
	})
	l := detectCgroups(root, proc)
	if l.version != 2 {
		t.Fatalf("version = %d, want 2", l.version)
	}
	dirs, ok := l.find(id)
	if !ok {
		t.Fatal("cgroup not found")
	}
	rd := &cgroupReader{dirs: dirs, proc: proc}
	// Without memory.peak and pids.peak (kernels before 5.19 and 6.1) the
	// most seen is kept: an earlier reading saw more.
	var s usageSample
	if err := rd.read(&s, usageSample{memPeak: 5000, memOK: true, pidsPeak: 2, pidsOK: true}); err != nil {
		t.Fatal(err)
	}
	want := usageSample{cpu: 1234567000, cpuUser: 1000000000, cpuSystem: 234567000, memPeak: 5000, pidsPeak: 3,
		ioRead: 1048576 + 2048, ioWrite: 4096 + 8388608, cpuOK: true, memOK: true, pidsOK: true, ioOK: true,
		periods: 10, throttled: 2, throttledNs: 3456000, throttleOK: true}
	if diff := cmp.Diff(want, s, cmp.AllowUnexported(usageSample{})); diff != "" {
		t.Errorf("sample (-want +got):\n%s", diff)
	}
	// With them, the kernel's marks.
	writeFiles(t, root, map[string]string{dir + "memory.peak": "9000\n", dir + "pids.peak": "11\n"})
	s = usageSample{}
	if err := rd.read(&s, usageSample{}); err != nil {
		t.Fatal(err)
	}
	if s.memPeak != 9000 || s.pidsPeak != 11 {
		t.Errorf("peaks %d %d, want 9000 11", s.memPeak, s.pidsPeak)
	}
	if rd.source() != sandgate.UsageCgroupV2 {
		t.Errorf("source = %s", rd.source())
	}
}

// TestCgroupOfPid finds a cgroup whose path is not one of Docker's usual
// ones through /proc/<pid>/cgroup.
func TestCgroupOfPid(t *testing.T) {
	root, proc := t.TempDir(), t.TempDir()
	writeFiles(t, root, map[string]string{
		"cgroup.controllers":            "cpu memory pids\n",
		"custom/parent/ctr/cpu.stat":    v2CPUStat,
		"custom/parent/ctr/memory.peak": "1\n",
	})
	writeFiles(t, proc, map[string]string{"77/cgroup": "0::/custom/parent/ctr\n"})
	l := detectCgroups(root, proc)
	if _, ok := l.find("ctr"); ok {
		t.Fatal("found by the usual paths")
	}
	dirs, ok := l.ofPid(77)
	if !ok || dirs.cpu != filepath.Join(root, "custom/parent/ctr") {
		t.Errorf("ofPid = %+v, %t", dirs, ok)
	}
	if _, ok := l.ofPid(78); ok {
		t.Error("found the cgroup of a process that does not exist")
	}
	if l := detectCgroups(t.TempDir(), proc); l.version != 0 {
		t.Errorf("an empty root is version %d, want 0", l.version)
	}
}

// TestUsageOf turns readings into a run's usage: milliseconds, a warm
// container's counters from its baseline, the limit as the peak of a run
// killed for memory, and wall time only without readings.
func TestUsageOf(t *testing.T) {
	start := time.Date(2026, 11, 27, 10, 0, 0, 0, time.UTC)
	res := sandgate.Result{StartedAt: start, FinishedAt: start.Add(1500 * time.Millisecond)}
	at := start.Add(1400 * time.Millisecond)
	sampled := func(relative bool, samples ...usageSample) *sampler {
		s := &sampler{stopC: make(chan struct{}), done: make(chan struct{}), cancel: func() {}, relative: relative, source: sandgate.UsageCgroupV1}
		close(s.done)
		for _, smp := range samples {
			s.record(smp)
		}
		return s
	}
	base := usageSample{cpu: 100e6, cpuUser: 60e6, cpuSystem: 40e6, memPeak: 1 << 20, ioRead: 10, ioWrite: 20, netRx: 5, netTx: 6,
		cpuOK: true, memOK: true, ioOK: true, netOK: true, at: start}
	last := usageSample{cpu: 1100e6, cpuUser: 860e6, cpuSystem: 240e6, memPeak: 30 << 20, pidsPeak: 4, ioRead: 110, ioWrite: 220, netRx: 505, netTx: 606,
		cpuOK: true, memOK: true, pidsOK: true, ioOK: true, netOK: true, at: at}
	cases := []struct {
		name  string
		s     *sampler
		res   sandgate.Result
		limit int64
		want  sandgate.Usage
	}{
		{"cold: counters as read", sampled(false, base, last), res, 64 << 20, sandgate.Usage{
			CPUMS: ptr[int64](1100), CPUUserMS: ptr[int64](860), CPUSystemMS: ptr[int64](240), MemoryPeakBytes: ptr[int64](30 << 20), PidsPeak: ptr[int64](4),
			IOReadBytes: ptr[int64](110), IOWriteBytes: ptr[int64](220), NetRxBytes: ptr[int64](505), NetTxBytes: ptr[int64](606),
			WallMS: 1500, Source: sandgate.UsageCgroupV1, SampledAt: &at}},
		{"warm: counters from the baseline, peaks as read", sampled(true, base, last), res, 64 << 20, sandgate.Usage{
			CPUMS: ptr[int64](1000), CPUUserMS: ptr[int64](800), CPUSystemMS: ptr[int64](200), MemoryPeakBytes: ptr[int64](30 << 20), PidsPeak: ptr[int64](4),
			IOReadBytes: ptr[int64](100), IOWriteBytes: ptr[int64](200), NetRxBytes: ptr[int64](500), NetTxBytes: ptr[int64](600),
			WallMS: 1500, Source: sandgate.UsageCgroupV1, SampledAt: &at}},
		{"oom: the limit is the peak", sampled(false, last), sandgate.Result{StartedAt: res.StartedAt, FinishedAt: res.FinishedAt, OOMKilled: true}, 32 << 20, sandgate.Usage{
			CPUMS: ptr[int64](1100), CPUUserMS: ptr[int64](860), CPUSystemMS: ptr[int64](240), MemoryPeakBytes: ptr[int64](32 << 20), PidsPeak: ptr[int64](4),
			IOReadBytes: ptr[int64](110), IOWriteBytes: ptr[int64](220), NetRxBytes: ptr[int64](505), NetTxBytes: ptr[int64](606),
			WallMS: 1500, Source: sandgate.UsageCgroupV1, SampledAt: &at}},
		{"no readings: wall time only", sampled(false), res, 64 << 20, sandgate.Usage{WallMS: 1500, Source: sandgate.UsageNone}},
		{"no sampler, killed for memory", nil, sandgate.Result{StartedAt: res.StartedAt, FinishedAt: res.FinishedAt, OOMKilled: true}, 32 << 20,
			sandgate.Usage{WallMS: 1500, Source: sandgate.UsageNone, MemoryPeakBytes: ptr[int64](32 << 20)}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.s.usage(tc.res, tc.limit)
			if diff := cmp.Diff(&tc.want, got); diff != "" {
				t.Errorf("usage (-want +got):\n%s", diff)
			}
		})
	}
}

// TestNextUsageWait: the readings' waits double from the first up to the
// interval; a container whose CPU time stops moving is read less often,
// up to idleUsageInterval, but only where the peaks are the kernel's own
// (otherwise a reading is how a peak is seen); an interval configured
// above the idle one is kept.
func TestNextUsageWait(t *testing.T) {
	const iv = 200 * time.Millisecond
	for _, tc := range []struct {
		wait        time.Duration
		moved, peak bool
		want        time.Duration
	}{
		{firstUsageInterval, true, true, 2 * firstUsageInterval},
		{iv, true, true, iv},
		{iv, false, true, 2 * iv},
		{4 * time.Second, false, true, idleUsageInterval},
		{idleUsageInterval, false, true, idleUsageInterval},
		{iv, false, false, iv},
		{idleUsageInterval, true, true, iv},
	} {
		if got := nextUsageWait(tc.wait, iv, tc.moved, tc.peak); got != tc.want {
			t.Errorf("nextUsageWait(%v, moved %v, kernel peaks %v) = %v, want %v", tc.wait, tc.moved, tc.peak, got, tc.want)
		}
	}
	if got := nextUsageWait(20*time.Second, 30*time.Second, false, true); got != 30*time.Second {
		t.Errorf("an interval above the idle one: %v", got)
	}
}
