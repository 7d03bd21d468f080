package executor

import (
	"fmt"
	"path"
	"regexp"
	"sort"
	"strings"

	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/mount"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/executor/seccomp"
)

// VolumePrefix is prepended to the Docker name of every named cache volume,
// so a run can never mount a volume sandgate does not own.
const VolumePrefix = "sandgate-cache-"

// labelCache marks the cache volumes sandgate creates.
const labelCache = "sandgate.cache"

// minMemoryMB is the smallest memory limit Docker accepts.
const minMemoryMB = 6

var (
	// safeName is what Docker accepts in container names, node names and
	// volume names.
	safeName   = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)
	unsafeRune = regexp.MustCompile(`[^a-zA-Z0-9_.-]+`)
)

// capabilities are the Linux capabilities a policy may admit by name.
var capabilities = map[string]bool{}

func init() {
	for _, c := range strings.Fields(`AUDIT_CONTROL AUDIT_READ AUDIT_WRITE BLOCK_SUSPEND BPF
		CHECKPOINT_RESTORE CHOWN DAC_OVERRIDE DAC_READ_SEARCH FOWNER FSETID IPC_LOCK IPC_OWNER
		KILL LEASE LINUX_IMMUTABLE MAC_ADMIN MAC_OVERRIDE MKNOD NET_ADMIN NET_BIND_SERVICE
		NET_BROADCAST NET_RAW PERFMON SETFCAP SETGID SETPCAP SETUID SYS_ADMIN SYS_BOOT
		SYS_CHROOT SYS_MODULE SYS_NICE SYS_PACCT SYS_PTRACE SYS_RAWIO SYS_RESOURCE SYS_TIME
		SYS_TTY_CONFIG SYSLOG WAKE_ALARM`) {
		capabilities[c] = true
	}
}

// containerName is "sandgate-{session}-{task}-{short run id}", with every
// character Docker does not accept in a name replaced. The short run ID is
// the tail of the ID: a UUIDv7 starts with its timestamp, so its head would
// collide between runs started in the same minute.
func containerName(job sandgate.Job) string {
	part := func(s string, max int) string {
		s = strings.Trim(unsafeRune.ReplaceAllString(s, "-"), "-._")
		if len(s) > max {
			s = s[:max]
		}
		if s == "" {
			return "none"
		}
		return s
	}
	id := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' {
			return r
		}
		return -1
	}, job.RunID)
	if len(id) > 12 {
		id = id[len(id)-12:]
	}
	if id == "" {
		id = "none"
	}
	return "sandgate-" + part(job.Spec.SessionID, 40) + "-" + part(job.Spec.TaskID, 40) + "-" + id
}

// settings is a job turned into Docker's terms.
type settings struct {
	name   string
	config *container.Config
	host   *container.HostConfig
}

// containerSettings builds the container a job runs in. The hardening is
// not negotiable: it is applied whatever the spec says, and a spec asking
// for something the hardening forbids (a policy would have had to allow
// it) is refused rather than silently weakened or silently ignored.
func containerSettings(job sandgate.Job, ecfg Config) (settings, error) {
	// Normalisation filled every default in: nothing is defaulted here.
	s := job.Spec.RunSpec
	if err := refuseUnsafe(s); err != nil {
		return settings{}, err
	}
	res := s.Resources
	switch {
	case res.MemoryMB < minMemoryMB:
		return settings{}, sandgate.Errorf(sandgate.CodeResourceLimit, "resources.memory_mb must be at least %d, not %d", minMemoryMB, res.MemoryMB)
	case res.CPUs < 0.01:
		return settings{}, sandgate.Errorf(sandgate.CodeResourceLimit, "resources.cpus must be at least 0.01, not %g", res.CPUs)
	case res.Pids < 1 || res.TmpfsMB < 1 || res.Nofile < 1:
		return settings{}, sandgate.Errorf(sandgate.CodeResourceLimit, "resources.pids, tmpfs_mb and nofile must be positive")
	}
	mounts, err := mountsFor(s, job.Team)
	if err != nil {
		return settings{}, err
	}
	// sandgate's own seccomp profile, whatever the spec says: "default"
	// is the only profile a spec may name, and it means this one.
	profile, err := seccomp.SecurityOpt()
	if err != nil {
		return settings{}, fmt.Errorf("seccomp profile: %w", err)
	}
	host := hostConfig(s, ecfg.MaxConcurrent, profile)
	host.NetworkMode = container.NetworkMode(networkOf(job, ecfg))
	host.Mounts = mounts
	return settings{name: containerName(job), config: containerConfig(job, ecfg), host: host}, nil
}

// networkOf is the Docker network of job's container.
func networkOf(job sandgate.Job, ecfg Config) string {
	switch network := job.Spec.Network; {
	case job.AirGapped:
		return "none"
	case network == "bridge":
		// Never Docker's default bridge: sandgate's own, where runs
		// cannot reach each other.
		return ecfg.BridgeNetwork
	case network == sandgate.NetworkEgress:
		// The internal egress network: the proxy is the only way out
		// (egress.go sets its address in the environment).
		return ecfg.EgressNetwork
	default:
		return network
	}
}

// containerConfig is the container's process, environment and labels:
// the spec's labels but sandgate's own, and sandgate's, which name the
// run, its session and task, its correlation, its node and the instance
// that made it.
func containerConfig(job sandgate.Job, ecfg Config) *container.Config {
	s := job.Spec.RunSpec
	env := make([]string, 0, len(s.Env))
	for k, v := range s.Env {
		env = append(env, k+"="+v)
	}
	sort.Strings(env)
	labels := make(map[string]string, len(s.Labels)+7)
	for k, v := range s.Labels {
		if !strings.HasPrefix(k, "sandgate.") {
			labels[k] = v
		}
	}
	labels[sandgate.LabelManaged] = "true"
	labels[sandgate.LabelRunID] = job.RunID
	labels[sandgate.LabelSession] = s.SessionID
	labels[sandgate.LabelTask] = s.TaskID
	labels[sandgate.LabelCorrelationID] = job.CorrelationID
	labels[sandgate.LabelNode] = ecfg.Node
	labels[LabelInstance] = ecfg.Instance
	stdin := s.Stdin != ""
	return &container.Config{
		Image:        s.Image,
		Cmd:          append([]string(nil), s.Command...),
		Env:          env,
		WorkingDir:   s.Workdir,
		User:         s.User,
		Labels:       labels,
		AttachStdout: true,
		AttachStderr: true,
		AttachStdin:  stdin,
		OpenStdin:    stdin,
		StdinOnce:    stdin,
		StopSignal:   "SIGTERM",
	}
}

// hostConfig is the hardening every container gets, with the spec's
// admitted runtime, capabilities, security options and resources, and
// seccompOpt, the option that applies sandgate's seccomp profile; its
// network and mounts are containerSettings'.
func hostConfig(s sandgate.RunSpec, maxConcurrent int, seccompOpt string) *container.HostConfig {
	res := s.Resources
	secOpt := []string{"no-new-privileges", seccompOpt}
	if sec := s.Security; sec != nil {
		if sec.AppArmor != "" {
			secOpt = append(secOpt, "apparmor="+sec.AppArmor)
		}
		for _, l := range sec.Label {
			secOpt = append(secOpt, "label="+l)
		}
	}
	caps := make([]string, 0, len(s.CapAdd))
	for _, c := range s.CapAdd {
		caps = append(caps, "CAP_"+sandgate.CanonicalCapability(c))
	}
	// Docker's default IPC mode is the daemon's to choose (shareable on
	// older daemons); a run gets the private namespace it was admitted
	// with, or none at all (private, without /dev/shm) when it asked.
	ipc := container.IpcMode("private")
	if s.IPCMode == "none" {
		ipc = "none"
	}
	init := true
	pids := res.Pids
	// RLIMIT_NPROC counts every process of the uid on the host, across all
	// containers that run as it; PidsLimit is the per-container bound, so
	// nproc leaves room for every concurrent run to reach its own limit.
	nproc := res.Pids * int64(max(maxConcurrent, 1))
	return &container.HostConfig{
		Runtime:        s.Runtime,
		IpcMode:        ipc,
		Privileged:     false,
		CapDrop:        []string{"ALL"},
		CapAdd:         caps,
		SecurityOpt:    secOpt,
		ReadonlyRootfs: true,
		Tmpfs:          map[string]string{"/tmp": fmt.Sprintf("rw,nosuid,nodev,size=%dm,mode=1777", res.TmpfsMB)},
		Init:           &init,
		Sysctls:        s.Sysctls,
		// Output is captured through the attach stream; a log driver would
		// only keep a second, uncapped copy on the daemon's disk.
		LogConfig: container.LogConfig{Type: "none"},
		Resources: container.Resources{
			Memory:     res.MemoryMB << 20,
			MemorySwap: res.MemoryMB << 20,
			NanoCPUs:   int64(res.CPUs * 1e9),
			PidsLimit:  &pids,
			Ulimits: []*container.Ulimit{
				{Name: "nofile", Soft: res.Nofile, Hard: res.Nofile},
				{Name: "nproc", Soft: nproc, Hard: nproc},
			},
		},
	}
}

// refuseUnsafe refuses a spec that asks for what no sandgate container
// gets, whatever a policy admitted.
func refuseUnsafe(s sandgate.RunSpec) error {
	refuse := func(field, format string, args ...any) error {
		return &sandgate.Error{Code: sandgate.CodeContainerCreate, Field: field, Message: "refused by the executor: " + fmt.Sprintf(format, args...)}
	}
	switch {
	case s.Privileged:
		return refuse("privileged", "privileged containers are never created")
	case len(s.Devices) > 0:
		return refuse("devices", "host devices are never mapped")
	case len(s.Ports) > 0:
		return refuse("ports", "ports are never published")
	case !s.ReadOnly():
		return refuse("read_only_rootfs", "the root filesystem is always read-only")
	case s.UID != nil && *s.UID == 0, s.User == "root" || strings.HasPrefix(s.User, "root:"):
		return refuse("user", "containers never run as root")
	case len(s.Command) == 0:
		return &sandgate.Error{Code: sandgate.CodeInvalidRequest, Field: "command", Message: "is required"}
	}
	for _, m := range []struct{ field, value string }{
		{"pid_mode", s.PIDMode}, {"uts_mode", s.UTSMode}, {"userns_mode", s.UsernsMode},
	} {
		if m.value != "" && m.value != "private" {
			return refuse(m.field, "only a private namespace is allowed, not %q", m.value)
		}
	}
	switch s.IPCMode {
	case "", "private", "none":
	default:
		return refuse("ipc_mode", "only a private IPC namespace is allowed, not %q", s.IPCMode)
	}
	switch n := strings.ToLower(s.Network); {
	case n == "host", strings.HasPrefix(n, "container:"):
		return refuse("network", "network %q is never granted", s.Network)
	case n != "" && !safeName.MatchString(n):
		return refuse("network", "%q is not a network name", s.Network)
	}
	if sec := s.Security; sec != nil {
		switch {
		case sec.Seccomp != "" && sec.Seccomp != "default" && sec.Seccomp != "runtime/default":
			return refuse("security_opt", "only sandgate's seccomp profile is used, not %q", sec.Seccomp)
		case sec.AppArmor == "unconfined":
			return refuse("security_opt", "apparmor is never unconfined")
		case !sec.NoNewPrivileges:
			return refuse("security_opt", "no-new-privileges is always on")
		case sec.SystemPaths != "":
			return refuse("security_opt", "system paths are always masked")
		}
		for _, l := range sec.Label {
			switch l {
			case "disable", "type:spc_t", "type:unconfined_t", "type:container_runtime_t":
				// Types whose processes SELinux does not confine.
				return refuse("security_opt", "SELinux confinement is never lifted (label %q)", l)
			}
		}
	}
	for i, c := range s.CapAdd {
		if c := sandgate.CanonicalCapability(c); !capabilities[c] {
			return refuse(fmt.Sprintf("cap_add[%d]", i), "unknown capability %q", c)
		}
	}
	return nil
}

// mountsFor turns the spec's bind mounts and cache volumes into Docker
// mounts.
func mountsFor(s sandgate.RunSpec, team string) ([]mount.Mount, error) {
	binds, err := bindMounts(s)
	if err != nil {
		return nil, err
	}
	vols, err := volumeMounts(s, team)
	if err != nil {
		return nil, err
	}
	return append(binds, vols...), nil
}

// bindMounts turns the spec's bind mounts into Docker mounts. Binds use
// the resolved host path, never the requested spelling, and rprivate
// propagation.
func bindMounts(s sandgate.RunSpec) ([]mount.Mount, error) {
	var out []mount.Mount
	for i, m := range s.Mounts {
		field := fmt.Sprintf("mounts[%d]", i)
		if m.Resolved == "" || !path.IsAbs(m.Resolved) || path.Clean(m.Resolved) != m.Resolved {
			return nil, &sandgate.Error{Code: sandgate.CodeMountError, Field: field + ".source", Message: "has no resolved host path; the spec was not normalised"}
		}
		if !path.IsAbs(m.Target) {
			return nil, &sandgate.Error{Code: sandgate.CodeMountError, Field: field + ".target", Message: "must be an absolute path"}
		}
		switch m.Propagation {
		case "", "rprivate", "private":
		default:
			return nil, &sandgate.Error{Code: sandgate.CodeMountError, Field: field + ".propagation", Message: fmt.Sprintf("refused by the executor: propagation is always rprivate, not %q", m.Propagation)}
		}
		out = append(out, mount.Mount{
			Type:        mount.TypeBind,
			Source:      m.Resolved,
			Target:      m.Target,
			ReadOnly:    m.ReadOnly,
			BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate},
		})
	}
	return out, nil
}

// volumeMounts turns the spec's cache volumes into Docker mounts of
// team's volumes.
func volumeMounts(s sandgate.RunSpec, team string) ([]mount.Mount, error) {
	var out []mount.Mount
	for i, v := range s.Volumes {
		field := fmt.Sprintf("volumes[%d]", i)
		docker, ok := VolumeName(team, v.Name)
		if !ok {
			return nil, &sandgate.Error{Code: sandgate.CodeMountError, Field: field + ".name",
				Message: fmt.Sprintf("team %q cannot have a cache volume named %q: a name is 1 to 64 letters, digits, '_' and '-', and a team's 1 to 63 letters, digits, '_', '.' and '-'", team, v.Name)}
		}
		if !path.IsAbs(v.Target) {
			return nil, &sandgate.Error{Code: sandgate.CodeMountError, Field: field + ".target", Message: "must be an absolute path"}
		}
		out = append(out, mount.Mount{
			Type:     mount.TypeVolume,
			Source:   docker,
			Target:   v.Target,
			ReadOnly: v.ReadOnly,
			VolumeOptions: &mount.VolumeOptions{
				Labels: map[string]string{labelCache: "true"},
			},
		})
	}
	return out, nil
}
