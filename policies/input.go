package policies

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/sandgate/sandgate"
)

// inputValue builds the policy input as an AST value directly from the
// domain types, so that a decision costs no JSON round trip. The document
// is exactly what encoding/json makes of sandgate.AdmissionInput (the same
// fields, the same omitempty rules); input_test.go holds it to that.
// settings is settingsTerm of the gateway settings, which an engine makes
// once rather than per decision.
func inputValue(apiVersion string, op sandgate.Operation, pr sandgate.Principal, spec sandgate.RunSpec, settings *ast.Term) ast.Value {
	var b termBuf
	rolesTerm := ast.NullTerm()
	if pr.Roles != nil {
		roles := make([]*ast.Term, len(pr.Roles))
		for i, r := range pr.Roles {
			roles[i] = b.str(string(r))
		}
		rolesTerm = ast.ArrayTerm(roles...)
	}
	return ast.NewObject(
		item("api_version", b.str(apiVersion)),
		item("operation", b.str(string(op))),
		item("principal", ast.ObjectTerm(
			item("name", b.str(pr.Name)),
			item("team", b.str(pr.Team)),
			item("roles", rolesTerm),
		)),
		item("request", b.term(b.specValue(spec))),
		item("settings", settings),
	)
}

// withSession adds the "session" member of a session's or a command's
// input (operations session and exec); other inputs have none.
func withSession(v ast.Value, s *sandgate.SessionInput) ast.Value {
	obj, ok := v.(ast.Object)
	if s == nil || !ok {
		return v
	}
	obj.Insert(ast.StringTerm("session"), ast.ObjectTerm(
		item("id", ast.StringTerm(s.ID)),
		item("idle_timeout_seconds", ast.InternedTerm(s.IdleTimeoutSeconds)),
		item("max_lifetime_seconds", ast.InternedTerm(s.MaxLifetimeSeconds)),
	))
	return obj
}

// withApproval adds the "approval" member of a decision taken again after
// an approval; other inputs have none.
func withApproval(v ast.Value, a *sandgate.ApprovalInput) ast.Value {
	obj, ok := v.(ast.Object)
	if a == nil || !ok {
		return v
	}
	var b termBuf
	var roles []string
	for _, r := range a.Approver.Roles {
		roles = append(roles, string(r))
	}
	obj.Insert(ast.StringTerm("approval"), ast.ObjectTerm(
		item("id", ast.StringTerm(a.ID)),
		item("approver", ast.ObjectTerm(
			item("name", ast.StringTerm(a.Approver.Name)),
			item("team", ast.StringTerm(a.Approver.Team)),
			item("roles", b.strings(roles)),
		)),
		item("rules", b.strings(a.Rules)),
		item("comment", ast.StringTerm(a.Comment)),
	))
	return obj
}

// withPort adds the "port" member of a port connection's input
// (operation port); other inputs have none.
func withPort(v ast.Value, p *sandgate.PortInput) ast.Value {
	obj, ok := v.(ast.Object)
	if p == nil || !ok {
		return v
	}
	obj.Insert(ast.StringTerm("port"), ast.ObjectTerm(item("number", ast.InternedTerm(p.Number))))
	return obj
}

// withSecrets adds the "secrets" member of an input whose request names
// stored secrets: each with its version.
func withSecrets(v ast.Value, secrets map[string]sandgate.SecretState) ast.Value {
	obj, ok := v.(ast.Object)
	if len(secrets) == 0 || !ok {
		return v
	}
	items := make([][2]*ast.Term, 0, len(secrets))
	for name, st := range secrets {
		items = append(items, [2]*ast.Term{ast.StringTerm(name), ast.ObjectTerm(item("version", ast.InternedTerm(int(st.Version))))})
	}
	obj.Insert(ast.StringTerm("secrets"), ast.ObjectTerm(items...))
	return obj
}

// settingsTerm is the "settings" member of the input.
func settingsTerm(st sandgate.Settings) *ast.Term {
	var b termBuf
	groups := ast.NullTerm()
	if st.HostGroups != nil {
		terms := make([]*ast.Term, len(st.HostGroups))
		for i, g := range st.HostGroups {
			terms[i] = ast.ObjectTerm(item("gid", ast.IntNumberTerm(int(g.GID))), item("owns", b.str(g.Owns)))
		}
		groups = ast.ArrayTerm(terms...)
	}
	return ast.ObjectTerm(
		item("air_gapped", ast.InternedTerm(st.AirGapped)),
		item("mount_roots", b.strings(st.MountRoots)),
		item("host_groups", groups),
	)
}

// item is an object member. The keys of the input document are made once:
// terms are immutable, and sharing them saves an allocation per member.
func item(k string, v *ast.Term) [2]*ast.Term {
	kt, ok := inputKeys[k]
	if !ok {
		kt = ast.StringTerm(k)
	}
	return [2]*ast.Term{kt, v}
}

var inputKeys = internedTerms(
	"api_version", "operation", "principal", "name", "team", "roles", "request", "settings", "air_gapped", "mount_roots",
	"image", "command", "stdin", "env", "workdir", "user", "mounts", "source", "target", "read_only", "propagation",
	"resolved", "volumes", "network", "resources", "memory_mb", "cpus", "pids", "tmpfs_mb", "nofile",
	"timeout_seconds", "output_limit_bytes", "pull_policy", "session_id", "task_id", "labels", "privileged",
	"cap_add", "devices", "sysctls", "pid_mode", "ipc_mode", "uts_mode", "userns_mode", "security_opt",
	"read_only_rootfs", "ports", "uid", "gid", "security", "seccomp", "apparmor", "no_new_privileges", "label",
	"systempaths", "workspace_mb", "files", "path", "content", "encoding", "mode", "artifacts",
	"artifact_limit_bytes", "workspace", "format", "sha256", "archive_bytes", "entries", "unpacked_bytes",
	"systempaths", "callback_url", "egress", "egress_limits", "connections", "bytes", "bytes_per_second",
	"runtime", "secrets", "version",
)

// inputValues are values most inputs carry, made once like the keys.
var inputValues = internedTerms(
	"", string(sandgate.APIVersion), string(sandgate.OperationRun), string(sandgate.OperationReview),
	"none", "bridge", "host", "never", "always", "if-not-present", "unconfined",
)

func internedTerms(ss ...string) map[string]*ast.Term {
	m := make(map[string]*ast.Term, len(ss))
	for _, s := range ss {
		m[s] = ast.StringTerm(s)
	}
	return m
}

// termBuf hands out the terms of one input document from a few larger
// allocations instead of one each: they live and die together.
type termBuf struct{ free []ast.Term }

func (b *termBuf) term(v ast.Value) *ast.Term {
	if len(b.free) == 0 {
		b.free = make([]ast.Term, 32)
	}
	t := &b.free[0]
	b.free = b.free[1:]
	t.Value = v
	return t
}

func (b *termBuf) str(s string) *ast.Term {
	if t, ok := inputValues[s]; ok {
		return t
	}
	return b.term(ast.String(s))
}

// strings is a string slice as JSON has it: null when nil.
func (b *termBuf) strings(ss []string) *ast.Term {
	if ss == nil {
		return ast.NullTerm()
	}
	ts := make([]*ast.Term, len(ss))
	for i, s := range ss {
		ts[i] = b.str(s)
	}
	return b.term(ast.NewArray(ts...))
}

func (b *termBuf) stringMap(m map[string]string) *ast.Term {
	items := make([][2]*ast.Term, 0, len(m))
	for k, v := range m {
		items = append(items, [2]*ast.Term{b.str(k), b.str(v)})
	}
	return b.term(ast.NewObject(items...))
}

// specValue is a RunSpec as its JSON encoding has it.
func (b *termBuf) specValue(s sandgate.RunSpec) ast.Value {
	items := make([][2]*ast.Term, 0, 40)
	add := func(k string, v *ast.Term) { items = append(items, item(k, v)) }
	str := func(k, v string) {
		if v != "" {
			add(k, b.str(v))
		}
	}
	add("image", b.str(s.Image))
	add("command", b.strings(s.Command))
	str("stdin", s.Stdin)
	if len(s.Env) > 0 {
		add("env", b.stringMap(s.Env))
	}
	str("workdir", s.Workdir)
	str("user", s.User)
	if len(s.Mounts) > 0 {
		ms := make([]*ast.Term, len(s.Mounts))
		for i, m := range s.Mounts {
			mi := make([][2]*ast.Term, 0, 5)
			mi = append(mi,
				item("source", b.str(m.Source)),
				item("target", b.str(m.Target)),
				item("read_only", ast.InternedTerm(m.ReadOnly)),
			)
			if m.Propagation != "" {
				mi = append(mi, item("propagation", b.str(m.Propagation)))
			}
			if m.Resolved != "" {
				mi = append(mi, item("resolved", b.str(m.Resolved)))
			}
			ms[i] = b.term(ast.NewObject(mi...))
		}
		add("mounts", b.term(ast.NewArray(ms...)))
	}
	if len(s.Volumes) > 0 {
		vs := make([]*ast.Term, len(s.Volumes))
		for i, v := range s.Volumes {
			vi := make([][2]*ast.Term, 0, 3)
			vi = append(vi,
				item("name", b.str(v.Name)),
				item("target", b.str(v.Target)),
			)
			if v.ReadOnly {
				vi = append(vi, item("read_only", ast.InternedTerm(true)))
			}
			vs[i] = b.term(ast.NewObject(vi...))
		}
		add("volumes", b.term(ast.NewArray(vs...)))
	}
	str("network", s.Network)
	ri := make([][2]*ast.Term, 0, 5)
	addInt := func(items *[][2]*ast.Term, k string, v int64) {
		if v != 0 {
			*items = append(*items, item(k, ast.InternedTerm(int(v))))
		}
	}
	addInt(&ri, "memory_mb", s.Resources.MemoryMB)
	if s.Resources.CPUs != 0 {
		ri = append(ri, item("cpus", floatTerm(s.Resources.CPUs)))
	}
	addInt(&ri, "pids", s.Resources.Pids)
	addInt(&ri, "tmpfs_mb", s.Resources.TmpfsMB)
	addInt(&ri, "nofile", s.Resources.Nofile)
	addInt(&ri, "workspace_mb", s.Resources.WorkspaceMB)
	add("resources", b.term(ast.NewObject(ri...)))
	addInt(&items, "timeout_seconds", int64(s.TimeoutSeconds))
	addInt(&items, "output_limit_bytes", s.OutputLimitBytes)
	str("pull_policy", string(s.PullPolicy))
	str("runtime", s.Runtime)
	str("session_id", s.SessionID)
	str("task_id", s.TaskID)
	str("callback_url", s.CallbackURL)
	if len(s.Egress) > 0 {
		add("egress", b.strings(s.Egress))
	}
	if l := s.EgressLimits; l != nil {
		li := make([][2]*ast.Term, 0, 2)
		addInt(&li, "connections", l.Connections)
		addInt(&li, "bytes", l.Bytes)
		addInt(&li, "bytes_per_second", l.BytesPerSecond)
		add("egress_limits", b.term(ast.NewObject(li...)))
	}
	if len(s.Secrets) > 0 {
		add("secrets", b.strings(s.Secrets))
	}
	if len(s.Labels) > 0 {
		add("labels", b.stringMap(s.Labels))
	}
	if len(s.Files) > 0 {
		fs := make([]*ast.Term, len(s.Files))
		for i, f := range s.Files {
			fi := make([][2]*ast.Term, 0, 4)
			fi = append(fi, item("path", b.str(f.Path)), item("content", b.str(f.Content)))
			if f.Encoding != "" {
				fi = append(fi, item("encoding", b.str(f.Encoding)))
			}
			if f.Mode != nil {
				fi = append(fi, item("mode", ast.InternedTerm(*f.Mode)))
			}
			fs[i] = b.term(ast.NewObject(fi...))
		}
		add("files", b.term(ast.NewArray(fs...)))
	}
	if len(s.Artifacts) > 0 {
		add("artifacts", b.strings(s.Artifacts))
	}
	addInt(&items, "artifact_limit_bytes", s.ArtifactLimitBytes)
	add("privileged", ast.InternedTerm(s.Privileged))
	if len(s.CapAdd) > 0 {
		add("cap_add", b.strings(s.CapAdd))
	}
	if len(s.Devices) > 0 {
		add("devices", b.strings(s.Devices))
	}
	if len(s.Sysctls) > 0 {
		add("sysctls", b.stringMap(s.Sysctls))
	}
	str("pid_mode", s.PIDMode)
	str("ipc_mode", s.IPCMode)
	str("uts_mode", s.UTSMode)
	str("userns_mode", s.UsernsMode)
	if len(s.SecurityOpt) > 0 {
		add("security_opt", b.strings(s.SecurityOpt))
	}
	if s.ReadOnlyRootfs != nil {
		add("read_only_rootfs", ast.InternedTerm(*s.ReadOnlyRootfs))
	}
	if len(s.Ports) > 0 {
		add("ports", b.strings(s.Ports))
	}
	if w := s.Workspace; w != nil {
		add("workspace", b.term(ast.NewObject(
			item("format", b.str(w.Format)),
			item("sha256", b.str(w.SHA256)),
			item("archive_bytes", ast.InternedTerm(int(w.ArchiveBytes))),
			item("entries", ast.InternedTerm(w.Entries)),
			item("unpacked_bytes", ast.InternedTerm(int(w.UnpackedBytes))),
		)))
	}
	if s.UID != nil {
		add("uid", ast.InternedTerm(int(*s.UID)))
	}
	if s.GID != nil {
		add("gid", ast.InternedTerm(int(*s.GID)))
	}
	if sec := s.Security; sec != nil {
		add("security", b.term(ast.NewObject(
			item("seccomp", b.str(sec.Seccomp)),
			item("apparmor", b.str(sec.AppArmor)),
			item("no_new_privileges", ast.InternedTerm(sec.NoNewPrivileges)),
			item("label", b.strings(sec.Label)),
			item("systempaths", b.str(sec.SystemPaths)),
		)))
	}
	return ast.NewObject(items...)
}

// floatTerm spells f as encoding/json does.
func floatTerm(f float64) *ast.Term {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return ast.NullTerm()
	}
	b, err := json.Marshal(f)
	if err != nil {
		return ast.NumberTerm(json.Number(strconv.FormatFloat(f, 'g', -1, 64)))
	}
	return ast.NumberTerm(json.Number(b))
}

// result is a decision as the policy returned it.
type result struct {
	allow      bool
	violations []sandgate.Violation
	warnings   []sandgate.Violation
	mutations  []sandgate.Mutation
	// approvals are the require_approval findings no approval covers.
	approvals []sandgate.Violation
}

var (
	keyAllow      = ast.StringTerm("allow")
	keyViolations = ast.StringTerm("violations")
	keyWarnings   = ast.StringTerm("warnings")
	keyMutations  = ast.StringTerm("mutations")
	keyApprovals  = ast.StringTerm("approvals")
	keyRule       = ast.StringTerm("rule")
	keyMessage    = ast.StringTerm("message")
	keyFix        = ast.StringTerm("fix")
	keyControls   = ast.StringTerm("controls")
	keySeverity   = ast.StringTerm("severity")
	keyAction     = ast.StringTerm("action")
	keyCount      = ast.StringTerm("count")
	keyOp         = ast.StringTerm("op")
	keyPath       = ast.StringTerm("path")
	keyValue      = ast.StringTerm("value")
)

// decodeResult reads the decision object. "allow" must be a boolean; the
// lists may be missing but not of another type. rules are the bundle's
// METADATA, which give each violation its controls and severity.
func decodeResult(v any, rules map[string]ruleMeta) (result, error) {
	var r result
	obj, ok := v.(ast.Object)
	if !ok {
		return r, fmt.Errorf("%s is %s, not an object", DecisionQuery, typeName(v))
	}
	allow, ok := getValue(obj, keyAllow).(ast.Boolean)
	if !ok {
		return r, fmt.Errorf(`"allow" must be a boolean`)
	}
	r.allow = bool(allow)
	var err error
	if r.violations, err = decodeViolations(obj, keyViolations, "deny", rules); err != nil {
		return r, err
	}
	if r.warnings, err = decodeViolations(obj, keyWarnings, "warn", rules); err != nil {
		return r, err
	}
	if r.approvals, err = decodeViolations(obj, keyApprovals, "require_approval", rules); err != nil {
		return r, err
	}
	muts, err := arrayOf(obj, keyMutations)
	if err != nil {
		return r, err
	}
	r.mutations = make([]sandgate.Mutation, 0, len(muts))
	for i, t := range muts {
		m, ok := t.Value.(ast.Object)
		if !ok {
			return r, fmt.Errorf("mutations[%d] is not an object", i)
		}
		op, _ := stringAt(m, keyOp)
		p, _ := stringAt(m, keyPath)
		rule, _ := stringAt(m, keyRule)
		val := getValue(m, keyValue)
		if val == nil {
			return r, fmt.Errorf("mutations[%d] has no value", i)
		}
		jv, err := ast.JSON(val)
		if err != nil {
			return r, fmt.Errorf("mutations[%d].value: %v", i, err)
		}
		r.mutations = append(r.mutations, sandgate.Mutation{Op: op, Path: p, Value: jv, Rule: rule})
	}
	return r, nil
}

// maxMessageBytes bounds a violation's message: a rule that quotes a
// request's value, or lists every element at fault, cannot make a decision
// (and the 403 body and audit event that carry it) grow with the request.
const maxMessageBytes = 2048

// maxMergedMessages is how many findings of one rule a merged message
// names.
const maxMergedMessages = 3

// decodeViolations reads the violations (or warnings) at key. A decision
// carries each rule once: findings of one rule (a bundle whose rule
// reports every element of a list on its own) are merged into one
// violation whose count is their sum and whose message names the first
// few. Count is at least 1.
//
// A violation's controls are those of its rule's METADATA followed by any
// the findings name themselves (a bundle may still write them), and its
// severity is its rule's METADATA's. A rule no METADATA describes (a
// bundle that assembles its decision without the finding set) keeps the
// controls its findings name, and the severity they give if it is one of
// Severities, or else UnratedSeverity.
func decodeViolations(obj ast.Object, key *ast.Term, action string, rules map[string]ruleMeta) ([]sandgate.Violation, error) {
	list, err := arrayOf(obj, key)
	if err != nil {
		return nil, err
	}
	out := make([]sandgate.Violation, 0, len(list))
	// merged counts the findings folded into out[i], for the rules that
	// have more than one; nil until one does.
	var merged map[int]int
	for i, t := range list {
		vo, ok := t.Value.(ast.Object)
		if !ok {
			return nil, fmt.Errorf("%s[%d] is not an object", key.Value.(ast.String), i)
		}
		v := sandgate.Violation{Action: action, Count: 1}
		v.Rule, _ = stringAt(vo, keyRule)
		if v.Rule == "" {
			return nil, fmt.Errorf("%s[%d] names no rule", key.Value.(ast.String), i)
		}
		v.Message, _ = stringAt(vo, keyMessage)
		if fix, ok := stringAt(vo, keyFix); ok {
			v.Fix = truncateMessage(fix)
		}
		if a, ok := stringAt(vo, keyAction); ok && action == "warn" && a == "deny" {
			return nil, fmt.Errorf("%s[%d] (%s) is a deny among the warnings", key.Value.(ast.String), i, v.Rule)
		}
		if n, ok := getValue(vo, keyCount).(ast.Number); ok {
			if c, ok := n.Int(); ok && c > 1 {
				v.Count = c
			}
		}
		if j := slices.IndexFunc(out, func(o sandgate.Violation) bool { return o.Rule == v.Rule }); j >= 0 {
			if merged == nil {
				merged = map[int]int{}
			}
			if merged[j] == 0 {
				merged[j] = 1
			}
			merged[j]++
			o := &out[j]
			o.Count += v.Count
			o.Controls = appendControls(o.Controls, getValue(vo, keyControls))
			if merged[j] <= maxMergedMessages {
				o.Message += "; " + v.Message
			}
			continue
		}
		own := getValue(vo, keyControls)
		if meta, ok := rules[v.Rule]; ok {
			v.Severity = meta.severity
			if v.Fix == "" {
				v.Fix = meta.fix
			}
			n := len(meta.controls)
			if a, ok := own.(*ast.Array); ok {
				n += a.Len()
			}
			// A copy: the decision is the caller's to keep and change.
			v.Controls = appendControls(append(make([]string, 0, n), meta.controls...), own)
		} else {
			v.Severity = UnratedSeverity
			if sev, ok := stringAt(vo, keySeverity); ok && slices.Contains(Severities, sev) {
				v.Severity = sev
			}
			v.Controls = appendControls([]string{}, own)
		}
		out = append(out, v)
	}
	for j, n := range merged {
		out[j].Message += fmt.Sprintf(" (%d findings of this rule in all)", n)
	}
	for j := range out {
		out[j].Message = truncateMessage(out[j].Message)
	}
	return out, nil
}

// appendControls appends to cs the strings of the array own that cs does
// not hold yet.
func appendControls(cs []string, own ast.Value) []string {
	a, ok := own.(*ast.Array)
	if !ok {
		return cs
	}
	for j := 0; j < a.Len(); j++ {
		if s, ok := a.Elem(j).Value.(ast.String); ok && !slices.Contains(cs, string(s)) {
			cs = append(cs, string(s))
		}
	}
	return cs
}

// truncateMessage cuts m to maxMessageBytes at a rune boundary, marking
// the cut.
func truncateMessage(m string) string {
	if len(m) <= maxMessageBytes {
		return m
	}
	cut := maxMessageBytes - len("…")
	for cut > 0 && !utf8.RuneStart(m[cut]) {
		cut--
	}
	return m[:cut] + "…"
}

func getValue(obj ast.Object, key *ast.Term) ast.Value {
	t := obj.Get(key)
	if t == nil {
		return nil
	}
	return t.Value
}

func stringAt(obj ast.Object, key *ast.Term) (string, bool) {
	s, ok := getValue(obj, key).(ast.String)
	return string(s), ok
}

// arrayOf returns the array or set at key; missing is empty.
func arrayOf(obj ast.Object, key *ast.Term) ([]*ast.Term, error) {
	switch v := getValue(obj, key).(type) {
	case nil:
		return nil, nil
	case *ast.Array:
		out := make([]*ast.Term, 0, v.Len())
		v.Foreach(func(t *ast.Term) { out = append(out, t) })
		return out, nil
	case ast.Set:
		return v.Slice(), nil
	default:
		return nil, fmt.Errorf("%q must be an array, not %s", key.Value.(ast.String), typeName(v))
	}
}

func typeName(v any) string {
	if v == nil {
		return "undefined"
	}
	if av, ok := v.(ast.Value); ok {
		return ast.ValueName(av)
	}
	return fmt.Sprintf("%T", v)
}

// applyMutations applies JSON Patch "replace" (or "add") operations to the
// spec's JSON document, decodes the result strictly and normalises it
// again, so that derived fields (uid, gid, security, mounts[].resolved)
// follow the fields they derive from. It returns the mutations that changed
// something.
func applyMutations(spec sandgate.Normalized, muts []sandgate.Mutation, d sandgate.Defaults) (sandgate.Normalized, []sandgate.Mutation, error) {
	raw, err := json.Marshal(spec)
	if err != nil {
		return spec, nil, err
	}
	var doc any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&doc); err != nil {
		return spec, nil, err
	}
	var changed []sandgate.Mutation
	for _, m := range muts {
		if m.Op != "replace" && m.Op != "add" {
			return spec, nil, fmt.Errorf("mutation %q of rule %s: only replace and add are supported", m.Op, m.Rule)
		}
		before, _ := json.Marshal(doc)
		if doc, err = setPointer(doc, m.Path, m.Value); err != nil {
			return spec, nil, fmt.Errorf("mutation of rule %s at %s: %w", m.Rule, m.Path, err)
		}
		after, _ := json.Marshal(doc)
		if !bytes.Equal(before, after) {
			changed = append(changed, m)
		}
	}
	if len(changed) == 0 {
		return spec, nil, nil
	}
	out, _ := json.Marshal(doc)
	var next sandgate.RunSpec
	if err := sandgate.DecodeStrict(bytes.NewReader(out), &next, sandgate.MaxSpecBytes); err != nil {
		return spec, nil, err
	}
	normalized, err := sandgate.Normalize(next, d)
	if err != nil {
		return spec, nil, err
	}
	return normalized, changed, nil
}

// setPointer sets the value at an RFC 6901 JSON pointer. Object members
// are created when missing; array elements must exist.
func setPointer(doc any, pointer string, value any) (any, error) {
	if pointer == "" {
		return value, nil
	}
	if !strings.HasPrefix(pointer, "/") {
		return nil, fmt.Errorf("path must start with /")
	}
	parts := strings.Split(pointer[1:], "/")
	for i := range parts {
		parts[i] = strings.ReplaceAll(strings.ReplaceAll(parts[i], "~1", "/"), "~0", "~")
	}
	var set func(node any, parts []string) (any, error)
	set = func(node any, parts []string) (any, error) {
		if len(parts) == 0 {
			return value, nil
		}
		switch n := node.(type) {
		case map[string]any:
			child := n[parts[0]]
			if child == nil && len(parts) > 1 {
				child = map[string]any{}
			}
			v, err := set(child, parts[1:])
			if err != nil {
				return nil, err
			}
			n[parts[0]] = v
			return n, nil
		case []any:
			idx, err := strconv.Atoi(parts[0])
			if err != nil || idx < 0 || idx >= len(n) {
				return nil, fmt.Errorf("no array element %q", parts[0])
			}
			v, err := set(n[idx], parts[1:])
			if err != nil {
				return nil, err
			}
			n[idx] = v
			return n, nil
		default:
			return nil, fmt.Errorf("%q is not inside an object or array", parts[0])
		}
	}
	return set(doc, parts)
}
