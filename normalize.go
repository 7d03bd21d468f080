package sandgate

import (
	"encoding/base64"
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// Defaults are the values Normalize fills in where a request is silent. The
// policy bundle's data supplies them, so security staff change them without
// touching Go code.
type Defaults struct {
	Image            string     `json:"image"`
	User             string     `json:"user"`
	Network          string     `json:"network"`
	Workdir          string     `json:"workdir"`
	Resources        Resources  `json:"resources"`
	TimeoutSeconds   int        `json:"timeout_seconds"`
	OutputLimitBytes int64      `json:"output_limit_bytes"`
	PullPolicy       PullPolicy `json:"pull_policy"`
	// ArtifactLimitBytes bounds the artifacts a run's collection keeps.
	ArtifactLimitBytes int64 `json:"artifact_limit_bytes"`
	// WorkspaceWorkdir is the workdir of a run that has a workspace and
	// names no workdir.
	WorkspaceWorkdir string `json:"workspace_workdir"`
	// EgressLimits are the limits of an egress run that names none.
	EgressLimits EgressLimits `json:"egress_limits"`
	// SessionIdleTimeoutSeconds and SessionMaxLifetimeSeconds are a
	// session's limits when its request names none.
	SessionIdleTimeoutSeconds int `json:"session_idle_timeout_seconds"`
	SessionMaxLifetimeSeconds int `json:"session_max_lifetime_seconds"`
	// SessionKeepalive is the command that keeps a session's container
	// alive, by image (as written, without its digest, or its repository
	// alone), "*" for any image not named; a session request may name
	// its own.
	SessionKeepalive map[string][]string `json:"session_keepalive"`
	// Languages map a language a request may name instead of an image
	// ("python", "node", "shell", "toolchain") to that image. The image
	// is still judged by policy like any other.
	Languages map[string]string `json:"languages"`
}

// BuiltinDefaults are used for any default the bundle's data leaves out.
var BuiltinDefaults = Defaults{
	Image:              "sandgate/sandbox:latest",
	User:               "10001:10001",
	Network:            "none",
	Resources:          Resources{MemoryMB: 512, CPUs: 1, Pids: 256, TmpfsMB: 64, Nofile: 1024, WorkspaceMB: 256},
	TimeoutSeconds:     300,
	OutputLimitBytes:   1 << 20,
	PullPolicy:         PullNever,
	ArtifactLimitBytes: 64 << 20,
	WorkspaceWorkdir:   "/workspace",
	EgressLimits:       EgressLimits{Connections: 256, Bytes: 1 << 30, BytesPerSecond: 64 << 20},

	SessionIdleTimeoutSeconds: 600,
	SessionMaxLifetimeSeconds: 3600,
	SessionKeepalive:          map[string][]string{"*": {"sleep", "infinity"}},
	Languages: map[string]string{
		"shell": "sandgate/sandbox:latest", "python": "sandgate/python:3",
		"node": "sandgate/node:20", "toolchain": "sandgate/toolchain:1",
	},
}

// merge returns d with every zero field taken from BuiltinDefaults.
func (d Defaults) merge() Defaults {
	b := BuiltinDefaults
	pick := func(v, def string) string {
		if v == "" {
			return def
		}
		return v
	}
	pick64 := func(v, def int64) int64 {
		if v <= 0 {
			return def
		}
		return v
	}
	d.Image = pick(d.Image, b.Image)
	d.User = pick(d.User, b.User)
	d.Network = pick(d.Network, b.Network)
	d.Workdir = pick(d.Workdir, b.Workdir)
	d.PullPolicy = PullPolicy(pick(string(d.PullPolicy), string(b.PullPolicy)))
	d.Resources.MemoryMB = pick64(d.Resources.MemoryMB, b.Resources.MemoryMB)
	d.Resources.Pids = pick64(d.Resources.Pids, b.Resources.Pids)
	d.Resources.TmpfsMB = pick64(d.Resources.TmpfsMB, b.Resources.TmpfsMB)
	d.Resources.Nofile = pick64(d.Resources.Nofile, b.Resources.Nofile)
	d.Resources.WorkspaceMB = pick64(d.Resources.WorkspaceMB, b.Resources.WorkspaceMB)
	d.ArtifactLimitBytes = pick64(d.ArtifactLimitBytes, b.ArtifactLimitBytes)
	d.WorkspaceWorkdir = pick(d.WorkspaceWorkdir, b.WorkspaceWorkdir)
	d.EgressLimits.Connections = pick64(d.EgressLimits.Connections, b.EgressLimits.Connections)
	d.EgressLimits.Bytes = pick64(d.EgressLimits.Bytes, b.EgressLimits.Bytes)
	d.EgressLimits.BytesPerSecond = pick64(d.EgressLimits.BytesPerSecond, b.EgressLimits.BytesPerSecond)
	if d.Resources.CPUs <= 0 {
		d.Resources.CPUs = b.Resources.CPUs
	}
	if d.TimeoutSeconds <= 0 {
		d.TimeoutSeconds = b.TimeoutSeconds
	}
	d.OutputLimitBytes = pick64(d.OutputLimitBytes, b.OutputLimitBytes)
	if d.SessionIdleTimeoutSeconds <= 0 {
		d.SessionIdleTimeoutSeconds = b.SessionIdleTimeoutSeconds
	}
	if d.SessionMaxLifetimeSeconds <= 0 {
		d.SessionMaxLifetimeSeconds = b.SessionMaxLifetimeSeconds
	}
	if len(d.SessionKeepalive) == 0 {
		d.SessionKeepalive = b.SessionKeepalive
	}
	if d.Languages == nil {
		// Data without the key; an empty map ({}) names no language.
		d.Languages = b.Languages
	}
	return d
}

// resolveLanguage sets s.Image from s.Language through d.Languages and
// clears s.Language. A request names a language or an image, not both;
// a language the data does not map is an INVALID-REQUEST error naming
// the field and the languages there are.
func (d Defaults) resolveLanguage(s *RunSpec) error {
	if s.Language == "" {
		return nil
	}
	if s.Image != "" {
		return FieldError("language", "name a language or an image, not both (image %q)", s.Image)
	}
	image, ok := d.Languages[s.Language]
	if !ok || image == "" {
		names := make([]string, 0, len(d.Languages))
		for name := range d.Languages {
			names = append(names, name)
		}
		sort.Strings(names)
		if len(names) == 0 {
			names = []string{"none"}
		}
		return FieldError("language", "unknown language %q (the policy maps: %s)", shortKey(s.Language), strings.Join(names, ", "))
	}
	s.Image, s.Language = image, ""
	return nil
}

// Normalized is a run spec Normalize completed: every default filled in,
// every mount source resolved, the user and the security options parsed,
// capabilities spelt canonically. Policies judge it, mutations keep it
// one (they are normalised again), and the executor runs it: code after
// normalisation takes this type, never a RunSpec, and applies no default
// of its own, so no field can be defaulted twice or differently. Make one
// only with Normalize.
type Normalized struct {
	RunSpec
}

// Normalize returns the spec policies evaluate and the executor runs:
// defaults filled, every mount source resolved to a clean absolute host path
// with symlinks followed, security_opt parsed, capabilities canonical and the
// user parsed into numeric IDs where numeric. It refuses values that cannot
// be interpreted with an INVALID-REQUEST error naming the field; what is
// merely dangerous is left for policy to judge.
func Normalize(in RunSpec, d Defaults) (Normalized, error) {
	d = d.merge()
	s := in.clone()

	if err := d.resolveLanguage(&s); err != nil {
		return Normalized{}, err
	}
	if s.Image == "" {
		s.Image = d.Image
	}
	if strings.ContainsAny(s.Image, " \t\n\x00") {
		return Normalized{}, FieldError("image", "must not contain whitespace or NUL")
	}
	if len(s.Command) == 0 {
		return Normalized{}, FieldError("command", "is required: at least one element")
	}
	for i, a := range s.Command {
		if strings.IndexByte(a, 0) >= 0 {
			return Normalized{}, FieldError(fmt.Sprintf("command[%d]", i), "must not contain NUL")
		}
	}
	if err := checkEnv(s.Env); err != nil {
		return Normalized{}, err
	}
	if s.Workdir == "" {
		s.Workdir = d.Workdir
		if s.HasWorkspace() {
			s.Workdir = d.WorkspaceWorkdir
		}
	}
	if s.Workdir != "" {
		if !path.IsAbs(s.Workdir) || strings.IndexByte(s.Workdir, 0) >= 0 {
			return Normalized{}, FieldError("workdir", "must be an absolute path")
		}
		s.Workdir = path.Clean(s.Workdir)
	}

	if s.User == "" {
		s.User = d.User
	}
	uid, gid, err := parseUser(s.User)
	if err != nil {
		return Normalized{}, err
	}
	s.UID, s.GID = uid, gid

	if s.Network == "" {
		s.Network = d.Network
	}
	s.Network = strings.ToLower(strings.TrimSpace(s.Network))
	if s.PullPolicy == "" {
		s.PullPolicy = d.PullPolicy
	}
	switch s.PullPolicy {
	case PullNever, PullIfNotPresent, PullAlways:
	default:
		return Normalized{}, FieldError("pull_policy", "must be one of never, if-not-present, always; got %q", s.PullPolicy)
	}

	if s.Runtime != "" && !runtimeName.MatchString(s.Runtime) {
		return Normalized{}, FieldError("runtime", "must be a runtime name the daemon knows (letters, digits, '.', '_', '-'), like runc, crun or runsc; got %q", s.Runtime)
	}

	if err := normalizeResources(&s.Resources, d.Resources); err != nil {
		return Normalized{}, err
	}
	if s.TimeoutSeconds < 0 {
		return Normalized{}, FieldError("timeout_seconds", "must not be negative")
	}
	if s.TimeoutSeconds == 0 {
		s.TimeoutSeconds = d.TimeoutSeconds
	}
	if s.OutputLimitBytes < 0 {
		return Normalized{}, FieldError("output_limit_bytes", "must not be negative")
	}
	if s.OutputLimitBytes == 0 {
		s.OutputLimitBytes = d.OutputLimitBytes
	}
	if s.ArtifactLimitBytes < 0 {
		return Normalized{}, FieldError("artifact_limit_bytes", "must not be negative")
	}
	if s.ArtifactLimitBytes == 0 {
		s.ArtifactLimitBytes = d.ArtifactLimitBytes
	}
	if err := normalizeFiles(s.Files); err != nil {
		return Normalized{}, err
	}
	for i, a := range s.Artifacts {
		clean, err := CleanRelPath(a)
		if err != nil {
			return Normalized{}, FieldError(fmt.Sprintf("artifacts[%d]", i), "%s", err)
		}
		s.Artifacts[i] = clean
	}
	if s.HasWorkspace() && s.Workdir == "" {
		return Normalized{}, FieldError("workdir", "is required for a run with files, a workspace or artifacts")
	}
	if s.ReadOnlyRootfs == nil {
		t := true
		s.ReadOnlyRootfs = &t
	}

	for i := range s.Mounts {
		if err := normalizeMount(&s.Mounts[i], i); err != nil {
			return Normalized{}, err
		}
	}
	for i, v := range s.Volumes {
		if v.Name == "" {
			return Normalized{}, FieldError(fmt.Sprintf("volumes[%d].name", i), "is required")
		}
		t, err := cleanTarget(v.Target)
		if err != nil {
			return Normalized{}, FieldError(fmt.Sprintf("volumes[%d].target", i), "%s", err)
		}
		s.Volumes[i].Target = t
	}
	if err := checkTargets(s); err != nil {
		return Normalized{}, err
	}

	for i, c := range s.CapAdd {
		s.CapAdd[i] = CanonicalCapability(c)
	}
	sec, err := ParseSecurityOpts(s.SecurityOpt)
	if err != nil {
		return Normalized{}, err
	}
	s.Security = &sec
	for _, m := range []struct{ field, value string }{
		{"pid_mode", s.PIDMode}, {"ipc_mode", s.IPCMode}, {"uts_mode", s.UTSMode}, {"userns_mode", s.UsernsMode},
	} {
		if strings.IndexByte(m.value, 0) >= 0 {
			return Normalized{}, FieldError(m.field, "must not contain NUL")
		}
	}
	if s.CallbackURL != "" {
		if s.CallbackURL, err = NormalizeCallbackURL(s.CallbackURL); err != nil {
			return Normalized{}, err
		}
	}
	if err := normalizeEgress(&s, d); err != nil {
		return Normalized{}, err
	}
	if err := normalizeSecrets(s.Secrets); err != nil {
		return Normalized{}, err
	}
	for k := range s.Labels {
		if strings.HasPrefix(k, "sandgate.") {
			return Normalized{}, FieldError("labels."+k, "the sandgate. label prefix is reserved")
		}
	}
	return Normalized{s}, nil
}

func (s RunSpec) clone() RunSpec {
	c := s
	c.Command = append([]string(nil), s.Command...)
	c.Mounts = append([]Mount(nil), s.Mounts...)
	c.Volumes = append([]Volume(nil), s.Volumes...)
	c.CapAdd = append([]string(nil), s.CapAdd...)
	c.Devices = append([]string(nil), s.Devices...)
	c.SecurityOpt = append([]string(nil), s.SecurityOpt...)
	c.Ports = append([]string(nil), s.Ports...)
	c.Files = append([]File(nil), s.Files...)
	c.Artifacts = append([]string(nil), s.Artifacts...)
	c.Egress = append([]string(nil), s.Egress...)
	c.Secrets = append([]string(nil), s.Secrets...)
	if s.EgressLimits != nil {
		l := *s.EgressLimits
		c.EgressLimits = &l
	}
	if s.Workspace != nil {
		w := *s.Workspace
		c.Workspace = &w
	}
	c.Env = cloneMap(s.Env)
	c.Labels = cloneMap(s.Labels)
	c.Sysctls = cloneMap(s.Sysctls)
	if s.ReadOnlyRootfs != nil {
		v := *s.ReadOnlyRootfs
		c.ReadOnlyRootfs = &v
	}
	return c
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

var envName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// runtimeName is an OCI runtime's name as a Docker daemon registers it
// ("runc", "io.containerd.runc.v2", "runsc", "kata-qemu").
var runtimeName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

func checkEnv(env map[string]string) error {
	keys := make([]string, 0, len(env))
	for k := range env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		if !envName.MatchString(k) {
			return FieldError("env."+k, "must be a name of letters, digits and underscores")
		}
		if strings.IndexByte(env[k], 0) >= 0 {
			return FieldError("env."+k, "must not contain NUL")
		}
	}
	return nil
}

// parseUser parses "uid[:gid]". Numeric parts become IDs ("00" is uid 0);
// names are kept for policy to judge, with a nil ID.
func parseUser(u string) (uid, gid *int64, err error) {
	if strings.IndexByte(u, 0) >= 0 || strings.ContainsAny(u, " \t\n") {
		return nil, nil, FieldError("user", "must be uid[:gid] or name[:group]")
	}
	name, group, hasGroup := strings.Cut(u, ":")
	if name == "" || (hasGroup && group == "") || strings.Contains(group, ":") {
		return nil, nil, FieldError("user", "must be uid[:gid] or name[:group]; got %q", u)
	}
	parse := func(field, v string) (*int64, error) {
		if v == "" || strings.Trim(v, "0123456789") != "" {
			return nil, nil
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n > 1<<31-1 {
			return nil, FieldError(field, "id %q is out of range", v)
		}
		return &n, nil
	}
	if uid, err = parse("user", name); err != nil {
		return nil, nil, err
	}
	if gid, err = parse("user", group); err != nil {
		return nil, nil, err
	}
	return uid, gid, nil
}

func normalizeResources(r *Resources, d Resources) error {
	checks := []struct {
		field string
		v     *int64
		def   int64
	}{
		{"resources.memory_mb", &r.MemoryMB, d.MemoryMB},
		{"resources.pids", &r.Pids, d.Pids},
		{"resources.tmpfs_mb", &r.TmpfsMB, d.TmpfsMB},
		{"resources.nofile", &r.Nofile, d.Nofile},
		{"resources.workspace_mb", &r.WorkspaceMB, d.WorkspaceMB},
	}
	for _, c := range checks {
		if *c.v < 0 {
			return FieldError(c.field, "must not be negative")
		}
		if *c.v == 0 {
			*c.v = c.def
		}
	}
	if r.CPUs < 0 || r.CPUs != r.CPUs {
		return FieldError("resources.cpus", "must be a positive number")
	}
	if r.CPUs == 0 {
		r.CPUs = d.CPUs
	}
	return nil
}

func normalizeMount(m *Mount, i int) error {
	field := fmt.Sprintf("mounts[%d]", i)
	resolved, err := ResolveHostPath(m.Source)
	if err != nil {
		return FieldError(field+".source", "%s", err)
	}
	m.Resolved = resolved
	t, err := cleanTarget(m.Target)
	if err != nil {
		return FieldError(field+".target", "%s", err)
	}
	m.Target = t
	m.Propagation = strings.ToLower(strings.TrimSpace(m.Propagation))
	return nil
}

// ResolveHostPath turns a requested bind-mount source into the host path
// that would really be mounted: it must be absolute and free of NUL bytes,
// is cleaned, and has every symlink followed, so that policy judges the
// directory itself and not its spelling. A path that does not exist is an
// error.
func ResolveHostPath(p string) (string, error) {
	if p == "" {
		return "", fmt.Errorf("is required")
	}
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("must not contain NUL")
	}
	if !filepath.IsAbs(p) {
		return "", fmt.Errorf("must be an absolute path; got %q", p)
	}
	resolved, err := filepath.EvalSymlinks(filepath.Clean(p))
	if err != nil {
		return "", fmt.Errorf("cannot be resolved: %s does not exist or is not accessible", filepath.Clean(p))
	}
	return filepath.Clean(resolved), nil
}

func cleanTarget(t string) (string, error) {
	if t == "" {
		return "", fmt.Errorf("is required")
	}
	if strings.IndexByte(t, 0) >= 0 || strings.ContainsRune(t, ':') {
		return "", fmt.Errorf("must not contain NUL or ':'")
	}
	if !path.IsAbs(t) {
		return "", fmt.Errorf("must be an absolute path in the container; got %q", t)
	}
	c := path.Clean(t)
	if c == "/" {
		return "", fmt.Errorf("cannot be the container's root")
	}
	return c, nil
}

func checkTargets(s RunSpec) error {
	seen := map[string]string{}
	add := func(field, target string) error {
		if prev, ok := seen[target]; ok {
			return FieldError(field, "target %s is already used by %s", target, prev)
		}
		seen[target] = field
		return nil
	}
	if err := add("tmpfs", "/tmp"); err != nil {
		return err
	}
	if s.HasWorkspace() {
		if s.Workdir == "/" {
			return FieldError("workdir", "cannot be the container's root: the workspace is mounted there")
		}
		if err := add("workdir", s.Workdir); err != nil {
			return err
		}
	}
	for i, m := range s.Mounts {
		if err := add(fmt.Sprintf("mounts[%d].target", i), m.Target); err != nil {
			return err
		}
	}
	for i, v := range s.Volumes {
		if err := add(fmt.Sprintf("volumes[%d].target", i), v.Target); err != nil {
			return err
		}
	}
	return nil
}

// CanonicalCapability spells a Linux capability the way policy data does:
// upper case without the CAP_ prefix ("cap_sys_admin" → "SYS_ADMIN").
func CanonicalCapability(c string) string {
	c = strings.ToUpper(strings.TrimSpace(c))
	return strings.TrimPrefix(c, "CAP_")
}

// ParseSecurityOpts parses Docker-style security options, accepting both
// the "key=value" and the legacy "key:value" spellings.
func ParseSecurityOpts(opts []string) (SecurityOptions, error) {
	sec := SecurityOptions{NoNewPrivileges: true}
	for i, o := range opts {
		field := fmt.Sprintf("security_opt[%d]", i)
		key, value, hasValue := strings.Cut(o, "=")
		if !hasValue {
			key, value, hasValue = strings.Cut(o, ":")
		}
		key = strings.ToLower(strings.TrimSpace(key))
		value = strings.TrimSpace(value)
		switch key {
		case "seccomp":
			if value == "" {
				return sec, FieldError(field, "seccomp needs a profile")
			}
			sec.Seccomp = strings.ToLower(value)
		case "apparmor":
			if value == "" {
				return sec, FieldError(field, "apparmor needs a profile")
			}
			sec.AppArmor = strings.ToLower(value)
		case "no-new-privileges":
			if !hasValue {
				sec.NoNewPrivileges = true
				continue
			}
			b, err := strconv.ParseBool(value)
			if err != nil {
				return sec, FieldError(field, "no-new-privileges must be true or false; got %q", value)
			}
			sec.NoNewPrivileges = b
		case "label":
			if value == "" {
				return sec, FieldError(field, "label needs a value")
			}
			sec.Label = append(sec.Label, strings.ToLower(value))
		case "systempaths":
			sec.SystemPaths = strings.ToLower(value)
		default:
			return sec, FieldError(field, "unknown security option %q", key)
		}
	}
	return sec, nil
}

// HasWorkspace reports whether the run gets a workspace: a file system of
// its own at its workdir, for its files, its workspace archive or the
// artifacts it leaves.
func (s RunSpec) HasWorkspace() bool {
	return len(s.Files) > 0 || len(s.Artifacts) > 0 || s.Workspace != nil
}

// CleanRelPath checks a path relative to a run's workdir (a file's path,
// an artifact pattern, an archive entry's name) and returns it cleaned,
// with forward slashes: not empty, not absolute, no ".." component, no
// NUL or backslash, at most MaxPathBytes. Callers name the field.
func CleanRelPath(p string) (string, error) {
	switch {
	case p == "":
		return "", fmt.Errorf("is empty")
	case len(p) > MaxPathBytes:
		return "", fmt.Errorf("is %d bytes long; at most %d are allowed", len(p), MaxPathBytes)
	case strings.IndexByte(p, 0) >= 0:
		return "", fmt.Errorf("must not contain NUL")
	case strings.IndexByte(p, '\\') >= 0:
		return "", fmt.Errorf("must use '/' as its separator, not '\\'")
	case strings.HasPrefix(p, "/"):
		return "", fmt.Errorf("must be relative to the workdir; got %q", p)
	}
	for _, part := range strings.Split(p, "/") {
		if part == ".." {
			return "", fmt.Errorf("must not contain '..'; got %q", p)
		}
	}
	c := path.Clean(p)
	if c == "." {
		return "", fmt.Errorf("must name something inside the workdir; got %q", p)
	}
	return c, nil
}

// FileUTF8 is the default encoding of an inline file's content ("utf-8"
// is taken as well); the other is EncodingBase64.
const FileUTF8 = "utf8"

// normalizeFiles checks the inline files: paths relative, clean and
// distinct (no file is another's directory), encodings known and their
// content decodable, modes permission bits only. Paths are cleaned and
// encodings spelt out in place.
func normalizeFiles(files []File) error {
	seen := make(map[string]int, len(files))
	for i := range files {
		f := &files[i]
		field := fmt.Sprintf("files[%d]", i)
		clean, err := CleanRelPath(f.Path)
		if err != nil {
			return FieldError(field+".path", "%s", err)
		}
		if j, ok := seen[clean]; ok {
			return FieldError(field+".path", "%q is also files[%d]", clean, j)
		}
		seen[clean] = i
		f.Path = clean
		switch f.Encoding {
		case "", FileUTF8, EncodingUTF8:
			f.Encoding = FileUTF8
		case EncodingBase64:
			if _, err := base64.StdEncoding.DecodeString(f.Content); err != nil {
				return FieldError(field+".content", "is not valid base64: %v", err)
			}
		default:
			return FieldError(field+".encoding", "must be utf8 or base64; got %q", f.Encoding)
		}
		if f.Mode != nil && (*f.Mode < 0 || *f.Mode > 0o777) {
			return FieldError(field+".mode", "must be permission bits between 0 and 0777 (511); got %d", *f.Mode)
		}
	}
	for p, i := range seen {
		for dir := path.Dir(p); dir != "."; dir = path.Dir(dir) {
			if j, ok := seen[dir]; ok {
				return FieldError(fmt.Sprintf("files[%d].path", j), "%q is a file, and files[%d] is inside it", dir, i)
			}
		}
	}
	return nil
}

// Bytes is the file's content as written: decoded when it is base64.
// Normalize has checked that it decodes.
func (f File) Bytes() []byte {
	if f.Encoding == EncodingBase64 {
		b, _ := base64.StdEncoding.DecodeString(f.Content)
		return b
	}
	return []byte(f.Content)
}
