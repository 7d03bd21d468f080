package sandgate

import "time"

// UsageSource says how a run's resource usage was measured.
type UsageSource string

// The usage sources.
const (
	// UsageCgroupV1 and UsageCgroupV2 are the container's own cgroup
	// files, read on the host while the container lived.
	UsageCgroupV1 UsageSource = "cgroup-v1"
	UsageCgroupV2 UsageSource = "cgroup-v2"
	// UsageDockerStats is the Docker stats API, for a daemon whose cgroup
	// files the gateway cannot read (a remote daemon).
	UsageDockerStats UsageSource = "docker-stats"
	// UsageRusage is what the kernel reported at a command's exit
	// (wait4): the CPU time of the command and of the descendants it
	// waited for, and the wall time. A command in a session has it: the
	// session's cgroup, shared by its commands, cannot tell them apart.
	UsageRusage UsageSource = "rusage"
	// UsageNone means nothing but the wall time is known: the container
	// ended before its counters could be read, or was not watched at all
	// (it exited while no gateway ran).
	UsageNone UsageSource = "none"
)

// Usage is what a run's container used, from the start of its command to
// its end. Counters the source could not give are nil (left out of the
// JSON): the network counters for a run without a network, the pids peak
// on a kernel without pids.peak. Counters are read while the container
// runs, since its cgroup goes with it, so the CPU and I/O counters can
// miss what the container did after the last reading, at most one
// sampling interval; peaks are the kernel's own high-water marks and miss
// nothing up to that reading. A run killed for memory reports its memory
// limit as its peak.
type Usage struct {
	// CPUMS is CPU time, user and system together, in milliseconds.
	CPUMS       *int64 `json:"cpu_ms,omitempty"`
	CPUUserMS   *int64 `json:"cpu_user_ms,omitempty"`
	CPUSystemMS *int64 `json:"cpu_system_ms,omitempty"`
	// CPUNrPeriods and CPUNrThrottled are how many enforcement periods
	// of its CPU limit (cpu.cfs_period_us, 100 ms) passed while it ran
	// and in how many it was throttled, having used its quota;
	// CPUThrottledMS is the time its threads spent throttled, summed
	// over the CPUs, so that it can exceed the wall time. A run without a
	// CPU limit is never throttled (and reports zeros).
	CPUNrPeriods   *int64 `json:"cpu_nr_periods,omitempty"`
	CPUNrThrottled *int64 `json:"cpu_nr_throttled,omitempty"`
	CPUThrottledMS *int64 `json:"cpu_throttled_ms,omitempty"`
	// MemoryPeakBytes is the most memory the container was charged at
	// once, page cache and tmpfs included.
	MemoryPeakBytes *int64 `json:"memory_peak_bytes,omitempty"`
	// PidsPeak is the most processes and threads alive in it at once.
	PidsPeak *int64 `json:"pids_peak,omitempty"`
	// IOReadBytes and IOWriteBytes are block device I/O: what reached a
	// disk, not what went to tmpfs or the page cache only.
	IOReadBytes  *int64 `json:"io_read_bytes,omitempty"`
	IOWriteBytes *int64 `json:"io_write_bytes,omitempty"`
	// NetRxBytes and NetTxBytes are the bytes its network interfaces
	// (loopback aside) received and sent; only for runs with a network.
	NetRxBytes *int64 `json:"net_rx_bytes,omitempty"`
	NetTxBytes *int64 `json:"net_tx_bytes,omitempty"`
	// WallMS is the time from the command's start to the container's end.
	WallMS int64 `json:"wall_ms"`
	// Source is how the counters were obtained.
	Source UsageSource `json:"source"`
	// SampledAt is when the counters were last read; nil with UsageNone.
	SampledAt *time.Time `json:"sampled_at,omitempty"`
}

// Payload is the usage as the flat map of numbers (and the source) that
// an audit event's payload carries: the counters that are known, by their
// JSON names.
func (u *Usage) Payload() map[string]any {
	p := map[string]any{"wall_ms": u.WallMS, "source": string(u.Source)}
	for name, v := range map[string]*int64{
		"cpu_ms": u.CPUMS, "cpu_user_ms": u.CPUUserMS, "cpu_system_ms": u.CPUSystemMS,
		"cpu_nr_periods": u.CPUNrPeriods, "cpu_nr_throttled": u.CPUNrThrottled, "cpu_throttled_ms": u.CPUThrottledMS,
		"memory_peak_bytes": u.MemoryPeakBytes, "pids_peak": u.PidsPeak,
		"io_read_bytes": u.IOReadBytes, "io_write_bytes": u.IOWriteBytes,
		"net_rx_bytes": u.NetRxBytes, "net_tx_bytes": u.NetTxBytes,
	} {
		if v != nil {
			p[name] = *v
		}
	}
	return p
}
