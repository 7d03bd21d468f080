package sandgate

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
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
