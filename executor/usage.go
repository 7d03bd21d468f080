package executor

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/docker/docker/api/types/container"

	"github.com/sandgate/sandgate"
)

// What a run used, and how it is measured.
//
// A container's cgroup, and with it every counter of what it used, is
// removed when its last process exits, before ContainerWait answers and
// long before the inspect and the removal; so the counters are read while
// the container lives, by one sampler per handle, started once the
// command runs and stopped when its end is seen:
//
//   - With a local daemon (DOCKER_HOST empty or a unix socket) and the
//     host's cgroup files readable, the sampler reads the container's
//     cgroup files directly (cgroup.go): a few small files a reading
//     (about 50 µs), at once, then after 50 and 100 ms, then every
//     UsageInterval (200 ms by default); a last reading is tried as the
//     sampler stops. Peaks are the kernel's own high-water
//     marks (v1 memory.max_usage_in_bytes, v2 memory.peak, pids.peak),
//     which miss nothing up to the last reading; CPU time and I/O are
//     cumulative counters, so they miss what the command did after the
//     last reading: at most one interval of it.
//   - Otherwise (a remote daemon, or cgroups this process cannot see) the
//     Docker stats API is streamed, which the daemon fills about once a
//     second: the same counters, coarser.
//
// A run killed for memory reports its memory limit as its peak: that is
// where the kernel stopped it, whether or not a reading saw it. A warm
// container's counters are taken relative to the reading made as its run
// is handed in (its idle launcher's CPU time is not the run's); its peaks
// include the launcher's (a few hundred KB of shell).

// defaultUsageInterval is how often, at most, a running container's
// counters are read.
const defaultUsageInterval = 200 * time.Millisecond

// firstUsageInterval is the wait before the second reading; the wait
// doubles from there up to the configured interval. It was 5 ms at first,
// to read runs of a few tens of milliseconds more than once; but readings
// in the first tens of milliseconds, while the daemon is still busy
// starting the container (or already ending it), made a run of `true`
// about 5 ms slower at the median (BenchmarkUsageSampling, 5 of 5 runs),
// and from 50 ms on they cost nothing measurable.
const firstUsageInterval = 50 * time.Millisecond

// idleUsageInterval is the longest wait between two readings of a
// container whose CPU time has stopped moving (an idle session, a run
// waiting on a peer): its counters are cumulative and, where the kernel
// keeps them, its peaks the kernel's own, so fewer readings lose nothing
// but the freshness of a live view. 500 idle sessions read every 200 ms
// were 2,500 readings a second.
const idleUsageInterval = 5 * time.Second

// nextUsageWait is the wait after the next reading: doubling from this
// one up to interval, or, while the container's CPU time does not move
// and its peaks are the kernel's, up to idleUsageInterval (readCgroup
// cuts a long wait back to interval at the first reading that moved).
func nextUsageWait(wait, interval time.Duration, moved, kernelPeaks bool) time.Duration {
	if moved || !kernelPeaks {
		return min(wait*2, interval)
	}
	return min(wait*2, max(interval, idleUsageInterval))
}

// sampler reads one container's counters while it runs. It belongs to the
// container's handle, which starts it when the command starts and stops
// it when the container's end is seen.
type sampler struct {
	stopC    chan struct{}
	done     chan struct{}
	stopOnce sync.Once
	cancel   context.CancelFunc

	mu     sync.Mutex
	source sandgate.UsageSource
	// base is the first reading when the counters are relative to it (a
	// warm container); last is the latest.
	relative   bool
	base, last usageSample
	n          int
}

// statsAPI is the Docker calls a sampler makes: the stats stream, and the
// inspect that finds a container's first process.
type statsAPI interface {
	ContainerStats(ctx context.Context, id string, stream bool) (container.StatsResponseReader, error)
	ContainerInspect(ctx context.Context, id string) (container.InspectResponse, error)
}

// meter makes the samplers of containers, and reads their OOM counts.
type meter struct {
	interval time.Duration
	// cgroups is how the daemon host's cgroups are laid out, when this
	// process can read them (a local daemon); version 0 otherwise, and
	// the usage of runs comes from the Docker stats API.
	cgroups cgroupLayout
	docker  statsAPI
	now     sandgate.Clock
	log     *slog.Logger
}

func newMeter(cfg Config, d statsAPI, log *slog.Logger) *meter {
	return &meter{interval: cfg.UsageInterval, docker: d, now: cfg.Clock, log: log}
}

// watch starts the sampler of container id. network says whether the run
// has a network; relative that the counters are to be taken from the
// first reading (a warm container, which ran before its run).
func (m *meter) watch(ctx context.Context, id string, network, relative bool) *sampler {
	ctx, cancel := context.WithCancel(ctx)
	s := &sampler{stopC: make(chan struct{}), done: make(chan struct{}), cancel: cancel, relative: relative}
	if m.interval < 0 {
		close(s.done)
		return s
	}
	go func() {
		defer close(s.done)
		if m.cgroups.version == 0 {
			m.streamStats(ctx, s, id, network)
			return
		}
		dirs, ok := m.cgroups.find(id)
		if !ok {
			// A cgroup parent or driver of its own: ask where the
			// container's first process is.
			c, err := m.docker.ContainerInspect(ctx, id)
			if err != nil || c.ContainerJSONBase == nil || c.State == nil || !c.State.Running || c.State.Pid == 0 {
				return // ended already: nothing left to read
			}
			if dirs, ok = m.cgroups.ofPid(c.State.Pid); !ok {
				m.streamStats(ctx, s, id, network)
				return
			}
		}
		s.readCgroup(&cgroupReader{dirs: dirs, proc: m.cgroups.proc, network: network}, m.interval, m.now)
	}()
	return s
}

// oomKills is how many processes the kernel's OOM killer has killed in
// container id so far (memory.events on cgroup v2, memory.oom_control on
// v1); 0 when it cannot be read.
func (m *meter) oomKills(id string) int64 {
	dirs, ok := m.cgroups.find(id)
	if !ok {
		return 0
	}
	file := "memory.oom_control"
	if dirs.version == 2 {
		file = "memory.events"
	}
	b, err := os.ReadFile(filepath.Join(dirs.memory, file))
	if err != nil {
		return 0
	}
	return parseKeyValues(string(b))["oom_kill"]
}

// readCgroup reads the cgroup until the sampler is stopped or the cgroup
// is gone, and once more as it stops.
func (s *sampler) readCgroup(rd *cgroupReader, interval time.Duration, now sandgate.Clock) {
	s.mu.Lock()
	s.source = rd.source()
	s.mu.Unlock()
	// read reads the counters; moved says one of them is not the last
	// reading's (CPU time, or bytes in or out: a process blocked on a
	// socket receives without using CPU time of its own, and its network
	// counters are read through it, so not once it has exited).
	read := func() (ok, moved, kernelPeaks bool) {
		s.mu.Lock()
		prev, n := s.last, s.n
		s.mu.Unlock()
		var smp usageSample
		if err := rd.read(&smp, prev); err != nil {
			return false, false, false
		}
		smp.at = now()
		s.record(smp)
		moved = n == 0 || !prev.cpuOK || smp.cpu != prev.cpu ||
			smp.netRx != prev.netRx || smp.netTx != prev.netTx || smp.ioRead != prev.ioRead || smp.ioWrite != prev.ioWrite
		return true, moved, smp.kernelPeaks
	}
	wait := firstUsageInterval
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-s.stopC:
			read()
			return
		case <-t.C:
		}
		ok, moved, kernelPeaks := read()
		if !ok {
			return
		}
		if moved {
			wait = min(wait, interval) // busy again: no idle wait
		}
		t.Reset(wait)
		wait = nextUsageWait(wait, interval, moved, kernelPeaks)
	}
}

// streamStats follows the Docker stats API's stream of the container
// until the sampler is stopped or the stream ends.
func (m *meter) streamStats(ctx context.Context, s *sampler, id string, network bool) {
	rd, err := m.docker.ContainerStats(ctx, id, true)
	if err != nil {
		m.log.Debug("container stats", "container_id", id, "err", err)
		return
	}
	defer rd.Body.Close()
	s.mu.Lock()
	s.source = sandgate.UsageDockerStats
	s.mu.Unlock()
	dec := json.NewDecoder(rd.Body)
	for {
		var st container.StatsResponse
		if err := dec.Decode(&st); err != nil {
			return
		}
		if st.Read.IsZero() || st.CPUStats.CPUUsage.TotalUsage == 0 {
			continue // the empty answer about a container that stopped
		}
		s.mu.Lock()
		prev := s.last
		s.mu.Unlock()
		smp := statsSample(st, prev, network)
		smp.at = m.now()
		s.record(smp)
	}
}

// statsSample is a reading of the Docker stats API. The memory peak is
// the daemon's max_usage on cgroup v1, else the most usage seen; the pids
// peak the most seen.
func statsSample(st container.StatsResponse, prev usageSample, network bool) usageSample {
	cpu := st.CPUStats.CPUUsage
	s := usageSample{cpu: int64(cpu.TotalUsage), cpuUser: int64(cpu.UsageInUsermode), cpuSystem: int64(cpu.UsageInKernelmode), cpuOK: true}
	th := st.CPUStats.ThrottlingData
	s.periods, s.throttled, s.throttledNs, s.throttleOK = int64(th.Periods), int64(th.ThrottledPeriods), int64(th.ThrottledTime), true
	s.memPeak = int64(max(st.MemoryStats.MaxUsage, st.MemoryStats.Usage))
	s.memOK = s.memPeak > 0
	if st.PidsStats.Current > 0 {
		s.pidsPeak, s.pidsOK = int64(st.PidsStats.Current), true
	}
	for _, b := range st.BlkioStats.IoServiceBytesRecursive {
		s.ioOK = true
		switch strings.ToLower(b.Op) {
		case "read":
			s.ioRead += int64(b.Value)
		case "write":
			s.ioWrite += int64(b.Value)
		}
	}
	if network {
		for _, n := range st.Networks {
			s.netRx += int64(n.RxBytes)
			s.netTx += int64(n.TxBytes)
			s.netOK = true
		}
	}
	if prev.memOK && prev.memPeak > s.memPeak {
		s.memPeak, s.memOK = prev.memPeak, true
	}
	if prev.pidsOK && prev.pidsPeak > s.pidsPeak {
		s.pidsPeak, s.pidsOK = prev.pidsPeak, true
	}
	return s
}

func (s *sampler) record(smp usageSample) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.n == 0 {
		s.base = smp
	}
	s.last = smp
	s.n++
}

// stop ends the sampling, once; it returns when the sampler has made its
// last reading.
func (s *sampler) stop() {
	if s == nil {
		return
	}
	s.stopOnce.Do(func() {
		close(s.stopC)
		s.cancel()
	})
	<-s.done
}

// usage is what the container used, from the readings and the run's
// result: wall time from its start to its end, and its memory limit as
// its peak when it was killed for memory. s may be nil (no sampler ran).
func (s *sampler) usage(res sandgate.Result, memoryLimit int64) *sandgate.Usage {
	u := &sandgate.Usage{Source: sandgate.UsageNone}
	if !res.StartedAt.IsZero() && !res.FinishedAt.IsZero() {
		u.WallMS = max(0, res.FinishedAt.Sub(res.StartedAt).Milliseconds())
	}
	if s != nil {
		s.stop()
		s.mu.Lock()
		last, base, n, relative, source := s.last, s.base, s.n, s.relative, s.source
		s.mu.Unlock()
		if n > 0 {
			if !relative || n == 1 {
				// One reading of a warm container is its baseline
				// only when others follow.
				base = usageSample{}
			}
			at := last.at.UTC()
			u.Source, u.SampledAt = source, &at
			if last.cpuOK {
				u.CPUMS = ms(last.cpu - base.cpu)
				u.CPUUserMS = ms(last.cpuUser - base.cpuUser)
				u.CPUSystemMS = ms(last.cpuSystem - base.cpuSystem)
			}
			if last.throttleOK {
				u.CPUNrPeriods = ptr(max(0, last.periods-base.periods))
				u.CPUNrThrottled = ptr(max(0, last.throttled-base.throttled))
				u.CPUThrottledMS = ms(last.throttledNs - base.throttledNs)
			}
			if last.memOK {
				u.MemoryPeakBytes = ptr(last.memPeak)
			}
			if last.pidsOK {
				u.PidsPeak = ptr(last.pidsPeak)
			}
			if last.ioOK {
				u.IOReadBytes, u.IOWriteBytes = ptr(max(0, last.ioRead-base.ioRead)), ptr(max(0, last.ioWrite-base.ioWrite))
			}
			if last.netOK {
				u.NetRxBytes, u.NetTxBytes = ptr(max(0, last.netRx-base.netRx)), ptr(max(0, last.netTx-base.netTx))
			}
		}
	}
	if res.OOMKilled && memoryLimit > 0 && (u.MemoryPeakBytes == nil || *u.MemoryPeakBytes < memoryLimit) {
		u.MemoryPeakBytes = ptr(memoryLimit)
	}
	return u
}

func ms(ns int64) *int64 { return ptr(max(0, ns) / int64(time.Millisecond)) }

func ptr[T any](v T) *T { return &v }
