package sandgate

import (
	"encoding/json"
	"fmt"
	"io"
	"strconv"
)

// RunSpec is what a client asks to run: the body of POST /v1/runs and the
// "request" of a policy input. After Normalize it also carries the fields
// only the server sets (Mount.Resolved, UID, GID, Security); a request that
// sets them is refused by DecodeRunSpec.
type RunSpec struct {
	Image string `json:"image"`
	// Language names the image instead of Image: the bundle's data maps
	// it to one (defaults.languages). Normalize sets Image from it and
	// clears it, so policy, the executor and the trail see the image.
	Language         string            `json:"language,omitempty"`
	Command          []string          `json:"command"`
	Stdin            string            `json:"stdin,omitempty"`
	Env              map[string]string `json:"env,omitempty"`
	Workdir          string            `json:"workdir,omitempty"`
	User             string            `json:"user,omitempty"`
	Mounts           []Mount           `json:"mounts,omitempty"`
	Volumes          []Volume          `json:"volumes,omitempty"`
	Network          string            `json:"network,omitempty"`
	Resources        Resources         `json:"resources"`
	TimeoutSeconds   int               `json:"timeout_seconds,omitempty"`
	OutputLimitBytes int64             `json:"output_limit_bytes,omitempty"`
	PullPolicy       PullPolicy        `json:"pull_policy,omitempty"`
	// Runtime is the OCI runtime the daemon runs the container with
	// (runc, crun, runsc for gVisor, kata for Kata Containers), as the
	// daemon names it; "" is the daemon's default. Policy allowlists it
	// per team (data runtimes).
	Runtime     string `json:"runtime,omitempty"`
	SessionID   string `json:"session_id,omitempty"`
	TaskID      string `json:"task_id,omitempty"`
	CallbackURL string `json:"callback_url,omitempty"` // where the finished run is POSTed, signed
	// Egress are the destinations a run with network "egress" may reach
	// through sandgate's proxy: "host:port", "*.domain:port", "cidr:port".
	Egress       []string      `json:"egress,omitempty"`
	EgressLimits *EgressLimits `json:"egress_limits,omitempty"`
	// Secrets name the stored secrets the run uses through the egress
	// proxy: its sandbox holds a placeholder of each, never the value
	// (docs/secrets.md).
	Secrets []string          `json:"secrets,omitempty"`
	Labels  map[string]string `json:"labels,omitempty"`

	// Files are small files written into the workdir before the command
	// starts; a larger tree comes as a workspace archive (multipart).
	Files []File `json:"files,omitempty"`
	// Artifacts are paths or globs, relative to the workdir, of the files
	// collected when the command has ended, whatever its outcome, up to
	// ArtifactLimitBytes in all.
	Artifacts          []string `json:"artifacts,omitempty"`
	ArtifactLimitBytes int64    `json:"artifact_limit_bytes,omitempty"`

	// The dangerous fields exist so that policy answers a request for them
	// with a reason; the default policies deny them.
	Privileged     bool              `json:"privileged"`
	CapAdd         []string          `json:"cap_add,omitempty"`
	Devices        []string          `json:"devices,omitempty"`
	Sysctls        map[string]string `json:"sysctls,omitempty"`
	PIDMode        string            `json:"pid_mode,omitempty"`
	IPCMode        string            `json:"ipc_mode,omitempty"`
	UTSMode        string            `json:"uts_mode,omitempty"`
	UsernsMode     string            `json:"userns_mode,omitempty"`
	SecurityOpt    []string          `json:"security_opt,omitempty"`
	ReadOnlyRootfs *bool             `json:"read_only_rootfs,omitempty"`
	Ports          []string          `json:"ports,omitempty"`

	// Workspace describes the workspace archive sent with the spec (a
	// multipart request's workspace part). Set by the gateway only, once
	// it has checked every entry of the archive.
	Workspace *WorkspaceArchive `json:"workspace,omitempty"`

	// Set by Normalize only.
	UID      *int64           `json:"uid,omitempty"`
	GID      *int64           `json:"gid,omitempty"`
	Security *SecurityOptions `json:"security,omitempty"`
}

// Mount is a bind mount of a host directory.
type Mount struct {
	Source      string `json:"source"`
	Target      string `json:"target"`
	ReadOnly    bool   `json:"read_only"`
	Propagation string `json:"propagation,omitempty"`
	// Resolved is the clean absolute host path with symlinks followed. Set
	// by Normalize only; the executor mounts this path, never Source.
	Resolved string `json:"resolved,omitempty"`
}

// Volume is a named cache volume. The executor prefixes its Docker name
// with "sandgate-cache-".
type Volume struct {
	Name     string `json:"name"`
	Target   string `json:"target"`
	ReadOnly bool   `json:"read_only,omitempty"`
}

// Resources are the limits a container runs under.
type Resources struct {
	MemoryMB int64   `json:"memory_mb,omitempty"`
	CPUs     float64 `json:"cpus,omitempty"`
	Pids     int64   `json:"pids,omitempty"`
	TmpfsMB  int64   `json:"tmpfs_mb,omitempty"`
	Nofile   int64   `json:"nofile,omitempty"`
	// WorkspaceMB is the size of the run's workspace, the writable file
	// system at its workdir that holds its files, its unpacked workspace
	// archive and what it writes there. A run has one when it sends files,
	// a workspace archive or asks for artifacts.
	WorkspaceMB int64 `json:"workspace_mb,omitempty"`
}

// File is one inline file of a run spec.
type File struct {
	// Path is relative to the workdir, without "..".
	Path    string `json:"path"`
	Content string `json:"content"`
	// Encoding is how Content is written: "utf8" (the default) or "base64".
	Encoding string `json:"encoding,omitempty"`
	// Mode is the file's permission bits, 0644 when absent; only 0755 and
	// 0644 style bits are kept (no setuid, setgid or sticky).
	Mode *int `json:"mode,omitempty"`
}

// WorkspaceArchive is what the gateway found in a run's workspace archive.
type WorkspaceArchive struct {
	// Format is "tar", "tar.gz" or "zip".
	Format string `json:"format"`
	// SHA256 is the hex digest of the archive as it was sent.
	SHA256        string `json:"sha256"`
	ArchiveBytes  int64  `json:"archive_bytes"`
	Entries       int    `json:"entries"`
	UnpackedBytes int64  `json:"unpacked_bytes"`
}

// PullPolicy says when the executor may pull an image.
type PullPolicy string

// The pull policies. Air-gapped mode forces PullNever.
const (
	PullNever        PullPolicy = "never"
	PullIfNotPresent PullPolicy = "if-not-present"
	PullAlways       PullPolicy = "always"
)

// SecurityOptions is security_opt parsed into structured fields.
type SecurityOptions struct {
	// Seccomp is "" (Docker's default profile), "unconfined" or a profile name.
	Seccomp string `json:"seccomp"`
	// AppArmor is "" (the default profile), "unconfined" or a profile name.
	AppArmor string `json:"apparmor"`
	// NoNewPrivileges is false only when a request turned it off explicitly.
	NoNewPrivileges bool `json:"no_new_privileges"`
	// Label holds SELinux label options ("disable", "type:…").
	Label []string `json:"label"`
	// SystemPaths is "" or "unconfined".
	SystemPaths string `json:"systempaths"`
}

// ReadOnly reports whether the root filesystem is read-only; it is unless a
// request asked otherwise.
func (s RunSpec) ReadOnly() bool { return s.ReadOnlyRootfs == nil || *s.ReadOnlyRootfs }

// MaxSpecBytes is the largest request body sandgate accepts.
const MaxSpecBytes = 1 << 20

// DecodeRunSpec decodes a run spec strictly: unknown fields, trailing data,
// wrong types and server-owned fields are INVALID-REQUEST errors that name
// the field; a body over MaxSpecBytes is TOO-LARGE.
func DecodeRunSpec(r io.Reader) (RunSpec, error) {
	var spec RunSpec
	if err := DecodeStrict(r, &spec, MaxSpecBytes); err != nil {
		return RunSpec{}, err
	}
	if spec.UID != nil {
		return RunSpec{}, FieldError("uid", "unknown field")
	}
	if spec.GID != nil {
		return RunSpec{}, FieldError("gid", "unknown field")
	}
	if spec.Security != nil {
		return RunSpec{}, FieldError("security", "unknown field")
	}
	if spec.Workspace != nil {
		return RunSpec{}, FieldError("workspace", "unknown field: a workspace archive is sent as the workspace part of a multipart/form-data request")
	}
	for i, m := range spec.Mounts {
		if m.Resolved != "" {
			return RunSpec{}, FieldError(fmt.Sprintf("mounts[%d].resolved", i), "unknown field")
		}
	}
	if err := spec.CheckBounds(); err != nil {
		return RunSpec{}, err
	}
	return spec, nil
}

// The maxima of a run spec's lists, maps and strings, checked at decode.
// Together with MaxSpecBytes they bound what one request can make sandgate
// hold, evaluate and record.
const (
	MaxCommandArgs   = 1024   // command elements
	MaxEnv           = 256    // env entries
	MaxLabels        = 64     // labels entries
	MaxMounts        = 16     // mounts
	MaxVolumes       = 8      // volumes
	MaxCapAdd        = 16     // cap_add elements
	MaxDevices       = 8      // devices elements
	MaxSysctls       = 32     // sysctls entries
	MaxSecurityOpt   = 16     // security_opt elements
	MaxPorts         = 16     // ports elements
	MaxFiles         = 256    // files elements
	MaxArtifacts     = 64     // artifacts elements (paths or globs)
	MaxNameBytes     = 256    // keys of env, labels and sysctls; image, user, network, modes, capability, volume names
	MaxIDBytes       = 128    // session_id, task_id
	MaxPathBytes     = 4096   // workdir, mount sources and targets, volume targets
	MaxValueBytes    = 131072 // an env or label value, a command element (Linux's own cap on one argument)
	MaxOptionBytes   = 1024   // a security_opt, device or port element
	MaxNamespaceMode = MaxNameBytes
	MaxCallbackURL   = 2048 // callback_url
)

// CheckBounds refuses a spec with a list, map or string over its maximum,
// naming the field: INVALID-REQUEST. DecodeRunSpec calls it; a spec made
// in code can be checked the same way.
func (s RunSpec) CheckBounds() error {
	count := func(field string, n, max int) error {
		if n > max {
			return FieldError(field, "has %d elements; at most %d are allowed", n, max)
		}
		return nil
	}
	size := func(field, v string, max int) error {
		if len(v) > max {
			return FieldError(field, "is %d bytes long; at most %d are allowed", len(v), max)
		}
		return nil
	}
	strs := func(field string, vs []string, maxN, maxLen int) error {
		if err := count(field, len(vs), maxN); err != nil {
			return err
		}
		for i, v := range vs {
			if err := size(fmt.Sprintf("%s[%d]", field, i), v, maxLen); err != nil {
				return err
			}
		}
		return nil
	}
	kvs := func(field string, m map[string]string, maxN, maxValue int) error {
		if err := count(field, len(m), maxN); err != nil {
			return err
		}
		for k, v := range m {
			if err := size(field+" key "+strconv.Quote(shortKey(k)), k, MaxNameBytes); err != nil {
				return err
			}
			if err := size(field+"."+k, v, maxValue); err != nil {
				return err
			}
		}
		return nil
	}
	checks := []func() error{
		func() error { return strs("command", s.Command, MaxCommandArgs, MaxValueBytes) },
		func() error { return kvs("env", s.Env, MaxEnv, MaxValueBytes) },
		func() error { return kvs("labels", s.Labels, MaxLabels, MaxValueBytes) },
		func() error { return kvs("sysctls", s.Sysctls, MaxSysctls, MaxOptionBytes) },
		func() error { return strs("cap_add", s.CapAdd, MaxCapAdd, MaxNameBytes) },
		func() error { return strs("devices", s.Devices, MaxDevices, MaxOptionBytes) },
		func() error { return strs("security_opt", s.SecurityOpt, MaxSecurityOpt, MaxOptionBytes) },
		func() error { return strs("ports", s.Ports, MaxPorts, MaxOptionBytes) },
		func() error { return strs("artifacts", s.Artifacts, MaxArtifacts, MaxPathBytes) },
		func() error { return strs("egress", s.Egress, MaxEgress, MaxNameBytes) },
		func() error { return strs("secrets", s.Secrets, MaxSecrets, MaxNameBytes) },
		func() error {
			if err := count("files", len(s.Files), MaxFiles); err != nil {
				return err
			}
			for i, f := range s.Files {
				if err := size(fmt.Sprintf("files[%d].path", i), f.Path, MaxPathBytes); err != nil {
					return err
				}
				if err := size(fmt.Sprintf("files[%d].encoding", i), f.Encoding, MaxNameBytes); err != nil {
					return err
				}
			}
			return nil
		},
		func() error { return size("image", s.Image, MaxNameBytes) },
		func() error { return size("language", s.Language, MaxNameBytes) },
		func() error { return size("user", s.User, MaxNameBytes) },
		func() error { return size("network", s.Network, MaxNameBytes) },
		func() error { return size("workdir", s.Workdir, MaxPathBytes) },
		func() error { return size("session_id", s.SessionID, MaxIDBytes) },
		func() error { return size("task_id", s.TaskID, MaxIDBytes) },
		func() error { return size("callback_url", s.CallbackURL, MaxCallbackURL) },
		func() error { return size("pid_mode", s.PIDMode, MaxNamespaceMode) },
		func() error { return size("ipc_mode", s.IPCMode, MaxNamespaceMode) },
		func() error { return size("uts_mode", s.UTSMode, MaxNamespaceMode) },
		func() error { return size("userns_mode", s.UsernsMode, MaxNamespaceMode) },
		func() error { return size("pull_policy", string(s.PullPolicy), MaxNameBytes) },
		func() error { return size("runtime", s.Runtime, MaxNameBytes) },
		func() error {
			if err := count("mounts", len(s.Mounts), MaxMounts); err != nil {
				return err
			}
			for i, m := range s.Mounts {
				for _, f := range []struct{ name, v string }{{"source", m.Source}, {"target", m.Target}, {"propagation", m.Propagation}} {
					if err := size(fmt.Sprintf("mounts[%d].%s", i, f.name), f.v, MaxPathBytes); err != nil {
						return err
					}
				}
			}
			return nil
		},
		func() error {
			if err := count("volumes", len(s.Volumes), MaxVolumes); err != nil {
				return err
			}
			for i, v := range s.Volumes {
				if err := size(fmt.Sprintf("volumes[%d].name", i), v.Name, MaxNameBytes); err != nil {
					return err
				}
				if err := size(fmt.Sprintf("volumes[%d].target", i), v.Target, MaxPathBytes); err != nil {
					return err
				}
			}
			return nil
		},
	}
	for _, check := range checks {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// shortKey is a key cut to a length fit for an error message.
func shortKey(k string) string {
	if len(k) > 64 {
		return k[:64] + "…"
	}
	return k
}

// Document returns s as the generic JSON document it encodes to: what
// decoding its JSON with json.Decoder.UseNumber gives (objects as
// map[string]any, arrays as []any, numbers as json.Number), built without
// the round trip. The gateway masks secrets in it and the audit trail
// stores it; both would otherwise encode and decode every spec.
// TestRunSpecDocument holds it to the JSON encoding, field by field.
func (s RunSpec) Document() map[string]any {
	d := make(map[string]any, 16)
	d["image"] = s.Image
	setString(d, "language", s.Language)
	d["command"] = stringsDoc(s.Command)
	setString(d, "stdin", s.Stdin)
	if len(s.Env) > 0 {
		d["env"] = stringMapDoc(s.Env)
	}
	setString(d, "workdir", s.Workdir)
	setString(d, "user", s.User)
	if len(s.Mounts) > 0 {
		ms := make([]any, len(s.Mounts))
		for i, m := range s.Mounts {
			md := map[string]any{"source": m.Source, "target": m.Target, "read_only": m.ReadOnly}
			setString(md, "propagation", m.Propagation)
			setString(md, "resolved", m.Resolved)
			ms[i] = md
		}
		d["mounts"] = ms
	}
	if len(s.Volumes) > 0 {
		vs := make([]any, len(s.Volumes))
		for i, v := range s.Volumes {
			vd := map[string]any{"name": v.Name, "target": v.Target}
			if v.ReadOnly {
				vd["read_only"] = true
			}
			vs[i] = vd
		}
		d["volumes"] = vs
	}
	setString(d, "network", s.Network)
	r := make(map[string]any, 5)
	setInt(r, "memory_mb", s.Resources.MemoryMB)
	if s.Resources.CPUs != 0 {
		r["cpus"] = floatNumber(s.Resources.CPUs)
	}
	setInt(r, "pids", s.Resources.Pids)
	setInt(r, "tmpfs_mb", s.Resources.TmpfsMB)
	setInt(r, "nofile", s.Resources.Nofile)
	setInt(r, "workspace_mb", s.Resources.WorkspaceMB)
	d["resources"] = r
	setInt(d, "timeout_seconds", int64(s.TimeoutSeconds))
	setInt(d, "output_limit_bytes", s.OutputLimitBytes)
	setString(d, "pull_policy", string(s.PullPolicy))
	setString(d, "runtime", s.Runtime)
	setString(d, "session_id", s.SessionID)
	setString(d, "task_id", s.TaskID)
	setString(d, "callback_url", s.CallbackURL)
	setStrings(d, "egress", s.Egress)
	if l := s.EgressLimits; l != nil {
		ld := make(map[string]any, 2)
		setInt(ld, "connections", l.Connections)
		setInt(ld, "bytes", l.Bytes)
		setInt(ld, "bytes_per_second", l.BytesPerSecond)
		d["egress_limits"] = ld
	}
	setStrings(d, "secrets", s.Secrets)
	if len(s.Labels) > 0 {
		d["labels"] = stringMapDoc(s.Labels)
	}
	if len(s.Files) > 0 {
		fs := make([]any, len(s.Files))
		for i, f := range s.Files {
			fd := map[string]any{"path": f.Path, "content": f.Content}
			setString(fd, "encoding", f.Encoding)
			if f.Mode != nil {
				fd["mode"] = json.Number(strconv.Itoa(*f.Mode))
			}
			fs[i] = fd
		}
		d["files"] = fs
	}
	setStrings(d, "artifacts", s.Artifacts)
	setInt(d, "artifact_limit_bytes", s.ArtifactLimitBytes)
	d["privileged"] = s.Privileged
	setStrings(d, "cap_add", s.CapAdd)
	setStrings(d, "devices", s.Devices)
	if len(s.Sysctls) > 0 {
		d["sysctls"] = stringMapDoc(s.Sysctls)
	}
	setString(d, "pid_mode", s.PIDMode)
	setString(d, "ipc_mode", s.IPCMode)
	setString(d, "uts_mode", s.UTSMode)
	setString(d, "userns_mode", s.UsernsMode)
	setStrings(d, "security_opt", s.SecurityOpt)
	if s.ReadOnlyRootfs != nil {
		d["read_only_rootfs"] = *s.ReadOnlyRootfs
	}
	setStrings(d, "ports", s.Ports)
	if w := s.Workspace; w != nil {
		d["workspace"] = map[string]any{
			"format": w.Format, "sha256": w.SHA256,
			"archive_bytes":  json.Number(strconv.FormatInt(w.ArchiveBytes, 10)),
			"entries":        json.Number(strconv.Itoa(w.Entries)),
			"unpacked_bytes": json.Number(strconv.FormatInt(w.UnpackedBytes, 10)),
		}
	}
	if s.UID != nil {
		d["uid"] = json.Number(strconv.FormatInt(*s.UID, 10))
	}
	if s.GID != nil {
		d["gid"] = json.Number(strconv.FormatInt(*s.GID, 10))
	}
	if o := s.Security; o != nil {
		d["security"] = map[string]any{
			"seccomp": o.Seccomp, "apparmor": o.AppArmor, "no_new_privileges": o.NoNewPrivileges,
			"label": stringsDoc(o.Label), "systempaths": o.SystemPaths,
		}
	}
	return d
}

// stringsDoc is ss as a JSON document: null when nil, as encoding/json has it.
func stringsDoc(ss []string) any {
	if ss == nil {
		return nil
	}
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

func stringMapDoc(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// setString, setInt and setStrings set an omitempty field: only when it is
// not empty.
func setString(d map[string]any, k, v string) {
	if v != "" {
		d[k] = v
	}
}

func setInt(d map[string]any, k string, v int64) {
	if v != 0 {
		d[k] = json.Number(strconv.FormatInt(v, 10))
	}
}

func setStrings(d map[string]any, k string, v []string) {
	if len(v) > 0 {
		d[k] = stringsDoc(v)
	}
}

// floatNumber is f as encoding/json writes it.
func floatNumber(f float64) any {
	b, err := json.Marshal(f)
	if err != nil {
		// NaN and infinities have no JSON form; encoding the spec fails
		// for them too.
		return nil
	}
	return json.Number(b)
}
