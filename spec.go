package sandgate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// RunSpec is what a client asks to run: the body of POST /v1/runs and the
// "request" of a policy input. After Normalize it also carries the fields
// only the server sets (Mount.Resolved, UID, GID, Security); a request that
// sets them is refused by DecodeRunSpec.
type RunSpec struct {
	Image            string            `json:"image"`
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
	SessionID        string            `json:"session_id,omitempty"`
	TaskID           string            `json:"task_id,omitempty"`
	Labels           map[string]string `json:"labels,omitempty"`

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
	for i, m := range spec.Mounts {
		if m.Resolved != "" {
			return RunSpec{}, FieldError(fmt.Sprintf("mounts[%d].resolved", i), "unknown field")
		}
	}
	return spec, nil
}

// DecodeStrict decodes one JSON value from r into v, refusing unknown
// fields, trailing data and bodies over limit bytes. Errors are *Error with
// code INVALID-REQUEST (naming the field) or TOO-LARGE.
func DecodeStrict(r io.Reader, v any, limit int64) error {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return WrapError(CodeInvalidRequest, err, "read body")
	}
	if int64(len(data)) > limit {
		return Errorf(CodeTooLarge, "body exceeds %d bytes", limit)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return FieldError("body", "empty body, a JSON object is required")
	}
	// encoding/json would quietly turn invalid UTF-8 into U+FFFD and run
	// something other than what was sent; JSON must be UTF-8 (RFC 8259).
	if !utf8.Valid(data) {
		return FieldError("body", "is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return jsonFieldError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return FieldError("body", "unexpected data after the JSON object")
	}
	return nil
}

// jsonFieldError turns an encoding/json error into an INVALID-REQUEST error
// that names the field, when the decoder says which.
func jsonFieldError(err error) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			field = "body"
		}
		return FieldError(field, "must be %s, not JSON %s", jsonKind(typeErr.Type.Kind().String()), typeErr.Value)
	case errors.As(err, &syntaxErr):
		return FieldError("body", "malformed JSON at byte %d: %v", syntaxErr.Offset, syntaxErr)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return FieldError("body", "truncated JSON")
	}
	// encoding/json reports unknown fields only as text: `json: unknown field "x"`.
	if name, ok := strings.CutPrefix(err.Error(), "json: unknown field "); ok {
		return FieldError(strings.Trim(name, `"`), "unknown field")
	}
	return FieldError("body", "invalid JSON: %v", err)
}

func jsonKind(k string) string {
	switch k {
	case "slice", "array":
		return "an array"
	case "map", "struct":
		return "an object"
	case "int", "int64", "int32", "uint", "uint64":
		return "an integer"
	case "float64", "float32":
		return "a number"
	case "bool":
		return "a boolean"
	case "string":
		return "a string"
	case "ptr":
		return "a value of the right type"
	}
	return "a " + k
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
	d["resources"] = r
	setInt(d, "timeout_seconds", int64(s.TimeoutSeconds))
	setInt(d, "output_limit_bytes", s.OutputLimitBytes)
	setString(d, "pull_policy", string(s.PullPolicy))
	setString(d, "session_id", s.SessionID)
	setString(d, "task_id", s.TaskID)
	if len(s.Labels) > 0 {
		d["labels"] = stringMapDoc(s.Labels)
	}
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
