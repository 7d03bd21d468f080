package executor

import (
	"bufio"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate"
)

// A container's cgroup on the daemon's host, read directly.
//
// The Docker daemon removes a container's cgroup as soon as its last
// process has exited, before ContainerWait answers, so what a run used
// cannot be read "after the exit": it is read while the container lives,
// by a sampler (usage.go), from the files below. The paths are found from
// the container's ID, without asking the daemon, for the layouts Docker
// makes (cgroupfs: <root>/<controller>/docker/<id> on v1, <root>/docker/<id>
// on v2; systemd: …/system.slice/docker-<id>.scope), and otherwise from
// /proc/<pid>/cgroup of the container's first process.

// DefaultCgroupRoot is where the host's cgroup file systems are mounted.
const DefaultCgroupRoot = "/sys/fs/cgroup"

// cgroupLayout is how the host's cgroups are laid out: version 1 (one
// hierarchy per controller, under root/<controller>) or 2 (one unified
// hierarchy at root); version 0 when they cannot be read here.
type cgroupLayout struct {
	version int
	root    string
	proc    string
}

// detectCgroups finds the layout under root: a unified hierarchy mounted
// at root itself is v2 (a hybrid host's root/unified, which carries no
// controllers, is not); a cpuacct hierarchy under root is v1.
func detectCgroups(root, proc string) cgroupLayout {
	if _, err := os.Stat(filepath.Join(root, "cgroup.controllers")); err == nil {
		return cgroupLayout{version: 2, root: root, proc: proc}
	}
	if _, err := os.Stat(filepath.Join(root, "cpuacct", "cpuacct.usage")); err == nil {
		return cgroupLayout{version: 1, root: root, proc: proc}
	}
	return cgroupLayout{root: root, proc: proc}
}

// cgroupDirs are the directories of one container's cgroup.
type cgroupDirs struct {
	version int
	// cpu, memory, pids and blkio are the controllers' directories; on
	// v2 they are one directory. cpu is cpuacct's on v1, and throttle
	// the cpu controller's (its cpu.stat); on a host that mounts them
	// together they are the same.
	cpu, memory, pids, blkio, throttle string
}

// find returns the cgroup of container id when it has one of Docker's
// usual paths.
func (l cgroupLayout) find(id string) (cgroupDirs, bool) {
	for _, rel := range []string{"docker/" + id, "system.slice/docker-" + id + ".scope"} {
		if d, ok := l.at(rel); ok {
			return d, true
		}
	}
	return cgroupDirs{}, false
}

// at returns the cgroup at path rel of the hierarchies, if it exists.
func (l cgroupLayout) at(rel string) (cgroupDirs, bool) {
	switch l.version {
	case 1:
		d := cgroupDirs{version: 1,
			cpu:      filepath.Join(l.root, "cpuacct", rel),
			memory:   filepath.Join(l.root, "memory", rel),
			pids:     filepath.Join(l.root, "pids", rel),
			blkio:    filepath.Join(l.root, "blkio", rel),
			throttle: filepath.Join(l.root, "cpu", rel),
		}
		if _, err := os.Stat(filepath.Join(d.cpu, "cpuacct.usage")); err == nil {
			return d, true
		}
	case 2:
		dir := filepath.Join(l.root, rel)
		if _, err := os.Stat(filepath.Join(dir, "cpu.stat")); err == nil {
			return cgroupDirs{version: 2, cpu: dir, memory: dir, pids: dir, blkio: dir, throttle: dir}, true
		}
	}
	return cgroupDirs{}, false
}

// ofPid returns the cgroup of process pid, from /proc/<pid>/cgroup: for
// a cgroup parent or driver whose paths find does not know.
func (l cgroupLayout) ofPid(pid int) (cgroupDirs, bool) {
	b, err := os.ReadFile(filepath.Join(l.proc, strconv.Itoa(pid), "cgroup"))
	if err != nil {
		return cgroupDirs{}, false
	}
	rel, ok := parseProcCgroup(string(b), l.version)
	if !ok {
		return cgroupDirs{}, false
	}
	return l.at(strings.TrimPrefix(rel, "/"))
}

// parseProcCgroup returns the path of the cgroup a /proc/<pid>/cgroup
// names: on v1 that of the cpuacct hierarchy ("4:cpu,cpuacct:/docker/…"),
// on v2 that of the unified one ("0::/system.slice/…").
func parseProcCgroup(s string, version int) (string, bool) {
	for line := range strings.Lines(s) {
		parts := strings.SplitN(strings.TrimRight(line, "\n"), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch version {
		case 1:
			for _, c := range strings.Split(parts[1], ",") {
				if c == "cpuacct" {
					return parts[2], true
				}
			}
		case 2:
			if parts[0] == "0" && parts[1] == "" {
				return parts[2], true
			}
		}
	}
	return "", false
}

// usageSample is one reading of a container's counters. The CPU times
// are nanoseconds; each group is valid when its flag is set.
type usageSample struct {
	at                      time.Time
	cpu, cpuUser, cpuSystem int64
	memPeak, pidsPeak       int64
	ioRead, ioWrite         int64
	netRx, netTx            int64
	cpuOK, memOK, pidsOK    bool
	ioOK, netOK             bool
	// periods, throttled and throttledNs are the CPU limit's
	// enforcement periods, the throttled ones and the time throttled
	// (cpu.stat); valid with throttleOK.
	periods, throttled, throttledNs int64
	throttleOK                      bool
	// kernelPeaks says the memory and pids peaks are the kernel's own
	// high-water marks (memory.peak, pids.peak), not the most seen.
	kernelPeaks bool
}

// errCgroupGone means the container's cgroup is not there any more: it
// exited.
var errCgroupGone = errors.New("the container's cgroup is gone")

// cgroupReader reads the counters of one container's cgroup.
type cgroupReader struct {
	dirs cgroupDirs
	proc string
	// network asks for the network counters, read through a process of
	// the container (pid, found in cgroup.procs).
	network bool
	pid     int
}

// source is the usage source the reader stands for.
func (c *cgroupReader) source() sandgate.UsageSource {
	if c.dirs.version == 2 {
		return sandgate.UsageCgroupV2
	}
	return sandgate.UsageCgroupV1
}

// read reads every counter into s. The peaks of prev are kept when the
// kernel has no high-water mark of its own and s holds a current value.
// It fails with errCgroupGone once the CPU counters are gone.
func (c *cgroupReader) read(s *usageSample, prev usageSample) error {
	var err error
	if c.dirs.version == 2 {
		err = c.readV2(s)
	} else {
		err = c.readV1(s)
	}
	if err != nil {
		return err
	}
	if c.network {
		c.readNet(s)
	}
	if prev.memOK && (!s.memOK || prev.memPeak > s.memPeak) {
		s.memPeak, s.memOK = prev.memPeak, true
	}
	if prev.pidsOK && (!s.pidsOK || prev.pidsPeak > s.pidsPeak) {
		s.pidsPeak, s.pidsOK = prev.pidsPeak, true
	}
	return nil
}

// userHZ is the unit of cpuacct.stat: USER_HZ is 100 on every Linux ABI.
const userHZ = 100

func (c *cgroupReader) readV1(s *usageSample) error {
	d := c.dirs
	total, err := readInt(filepath.Join(d.cpu, "cpuacct.usage"))
	if err != nil {
		return gone(err)
	}
	s.cpu, s.cpuOK = total, true
	user, uerr := readInt(filepath.Join(d.cpu, "cpuacct.usage_user"))
	sys, serr := readInt(filepath.Join(d.cpu, "cpuacct.usage_sys"))
	if uerr == nil && serr == nil {
		s.cpuUser, s.cpuSystem = user, sys
	} else if b, err := os.ReadFile(filepath.Join(d.cpu, "cpuacct.stat")); err == nil {
		// Kernels before 4.7 have ticks only.
		kv := parseKeyValues(string(b))
		s.cpuUser, s.cpuSystem = kv["user"]*int64(time.Second/userHZ), kv["system"]*int64(time.Second/userHZ)
	}
	if b, err := os.ReadFile(filepath.Join(d.throttle, "cpu.stat")); err == nil {
		kv := parseKeyValues(string(b))
		_, ok := kv["nr_periods"]
		s.periods, s.throttled, s.throttledNs, s.throttleOK = kv["nr_periods"], kv["nr_throttled"], kv["throttled_time"], ok
	}
	if v, err := readInt(filepath.Join(d.memory, "memory.max_usage_in_bytes")); err == nil {
		s.memPeak, s.memOK = v, true
	}
	c.readPids(s)
	// From Linux 6.10 the v1 throttle counters are kept only for the
	// devices some cgroup has a throttle rule on: a file with no device
	// line says nothing, and the I/O counters are left unknown.
	b, err := os.ReadFile(filepath.Join(d.blkio, "blkio.throttle.io_service_bytes_recursive"))
	if err != nil {
		b, err = os.ReadFile(filepath.Join(d.blkio, "blkio.throttle.io_service_bytes"))
	}
	if err == nil {
		s.ioRead, s.ioWrite, s.ioOK = parseBlkioV1(string(b))
	}
	return nil
}

func (c *cgroupReader) readV2(s *usageSample) error {
	d := c.dirs
	b, err := os.ReadFile(filepath.Join(d.cpu, "cpu.stat"))
	if err != nil {
		return gone(err)
	}
	kv := parseKeyValues(string(b))
	s.cpu, s.cpuUser, s.cpuSystem = kv["usage_usec"]*1000, kv["user_usec"]*1000, kv["system_usec"]*1000
	s.cpuOK = true
	// The throttle counters are there when the cpu controller is
	// enabled for the cgroup (Docker enables it).
	_, throttleOK := kv["nr_periods"]
	s.periods, s.throttled, s.throttledNs, s.throttleOK = kv["nr_periods"], kv["nr_throttled"], kv["throttled_usec"]*1000, throttleOK
	// memory.peak is there from Linux 5.19; before, the most seen.
	memPeak := false
	if v, err := readInt(filepath.Join(d.memory, "memory.peak")); err == nil {
		s.memPeak, s.memOK, memPeak = v, true, true
	} else if v, err := readInt(filepath.Join(d.memory, "memory.current")); err == nil {
		s.memPeak, s.memOK = v, true
	}
	s.kernelPeaks = c.readPids(s) && memPeak
	if b, err := os.ReadFile(filepath.Join(d.blkio, "io.stat")); err == nil {
		s.ioRead, s.ioWrite = parseIOStatV2(string(b))
		s.ioOK = true
	}
	return nil
}

// readPids reads pids.peak (Linux 6.1 on), else pids.current: the most
// seen.
func (c *cgroupReader) readPids(s *usageSample) (kernelPeak bool) {
	if v, err := readInt(filepath.Join(c.dirs.pids, "pids.peak")); err == nil {
		s.pidsPeak, s.pidsOK = v, true
		return true
	} else if v, err := readInt(filepath.Join(c.dirs.pids, "pids.current")); err == nil {
		s.pidsPeak, s.pidsOK = v, true
	}
	return false
}

// readNet reads the container's network counters from /proc/<pid>/net/dev
// of one of its processes, which sees the container's network namespace.
func (c *cgroupReader) readNet(s *usageSample) {
	for range 2 {
		if c.pid == 0 {
			b, err := os.ReadFile(filepath.Join(c.dirs.pids, "cgroup.procs"))
			if err != nil {
				return
			}
			c.pid = firstPid(string(b))
			if c.pid == 0 {
				return
			}
		}
		b, err := os.ReadFile(filepath.Join(c.proc, strconv.Itoa(c.pid), "net", "dev"))
		if err == nil {
			s.netRx, s.netTx = parseNetDev(string(b))
			s.netOK = true
			return
		}
		c.pid = 0 // that process ended: ask the cgroup again
	}
}

func gone(err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return errCgroupGone
	}
	return err
}

func readInt(path string) (int64, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, err
	}
	return strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
}

// firstPid is the first process ID of a cgroup.procs, 0 when empty.
func firstPid(s string) int {
	line, _, _ := strings.Cut(s, "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(line))
	if err != nil {
		return 0
	}
	return pid
}

// parseKeyValues parses "key value" lines: cpu.stat, cpuacct.stat.
// Lines that are not a key and an integer are skipped.
func parseKeyValues(s string) map[string]int64 {
	kv := map[string]int64{}
	for line := range strings.Lines(s) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok {
			continue
		}
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
			kv[k] = n
		}
	}
	return kv
}

// parseBlkioV1 sums the Read and Write bytes of every device of a v1
// blkio.throttle.io_service_bytes ("8:0 Read 4096" lines, then "Total");
// ok is false when it has no device line, only "Total 0".
func parseBlkioV1(s string) (read, write int64, ok bool) {
	for line := range strings.Lines(s) {
		f := strings.Fields(line)
		if len(f) != 3 {
			continue
		}
		n, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			continue
		}
		ok = true
		switch f[1] {
		case "Read":
			read += n
		case "Write":
			write += n
		}
	}
	return read, write, ok
}

// parseIOStatV2 sums rbytes and wbytes over the devices of a v2 io.stat
// ("8:0 rbytes=4096 wbytes=0 rios=1 wios=0 dbytes=0 dios=0" lines).
func parseIOStatV2(s string) (read, write int64) {
	for line := range strings.Lines(s) {
		f := strings.Fields(line)
		for _, kv := range f[min(1, len(f)):] {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				continue
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				continue
			}
			switch k {
			case "rbytes":
				read += n
			case "wbytes":
				write += n
			}
		}
	}
	return read, write
}

// parseNetDev sums the received and sent bytes of every interface but
// loopback in a /proc/<pid>/net/dev: after two header lines,
// "  eth0: rx_bytes rx_packets … (8 fields) tx_bytes …".
func parseNetDev(s string) (rx, tx int64) {
	sc := bufio.NewScanner(strings.NewReader(s))
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(name) == "lo" {
			continue
		}
		f := strings.Fields(rest)
		if len(f) < 9 {
			continue
		}
		r, err1 := strconv.ParseInt(f[0], 10, 64)
		t, err2 := strconv.ParseInt(f[8], 10, 64)
		if err1 != nil || err2 != nil {
			continue
		}
		rx += r
		tx += t
	}
	return rx, tx
}
