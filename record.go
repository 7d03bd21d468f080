package sandgate

import (
	"encoding/json"
	"slices"
)

// DecisionRecordVersion marks the payloads written in the shape of
// DecisionRecord; a payload without it was written before, and replays
// only approximately.
const DecisionRecordVersion = 2

// DecisionRecord is what the trail keeps of every decision, in one shape
// whatever the operation (run, review, session, exec): the operation, the
// principal with its roles and how it signed in, and exactly the policy
// input the engine evaluated, its request's secrets as keyed hashes. A
// replay rebuilds the input from it and evaluates that.
type DecisionRecord struct {
	// Input is the policy input as the engine received it.
	Input AdmissionInput
	// SignIn is how the principal authenticated, as the trail keeps it.
	SignIn SignIn
	// Via is the surface the request came through when it was not the
	// HTTP API itself ("mcp"), and Client the client it named (an MCP
	// client's name and version from initialize); both as the caller
	// said, under the principal its token proved.
	Via    string
	Client *ClientInfo
}

// ClientInfo names the program a caller says it is.
type ClientInfo struct {
	Name    string `json:"name"`
	Version string `json:"version"`
}

// Payload is the record as the trail keeps it (the payload of
// run.requested, and part of admission.reviewed's), the request's
// secrets and the decision's mask paths hashed by m.
func (r DecisionRecord) Payload(m Masker, mask []string) map[string]any {
	in := r.Input
	roles := make([]any, len(in.Principal.Roles))
	for i, role := range in.Principal.Roles {
		roles[i] = string(role)
	}
	roots := make([]any, len(in.Settings.MountRoots))
	for i, root := range in.Settings.MountRoots {
		roots[i] = root
	}
	settings := map[string]any{"air_gapped": in.Settings.AirGapped, "mount_roots": roots}
	if len(in.Settings.HostGroups) > 0 {
		groups := make([]any, len(in.Settings.HostGroups))
		for i, g := range in.Settings.HostGroups {
			groups[i] = map[string]any{"gid": g.GID, "owns": g.Owns}
		}
		settings["host_groups"] = groups
	}
	p := map[string]any{
		"record":      DecisionRecordVersion,
		"api_version": in.APIVersion,
		"operation":   string(in.Operation),
		"principal":   map[string]any{"name": in.Principal.Name, "team": in.Principal.Team, "roles": roles, "sign_in": r.SignIn.Doc("")},
		"spec":        m.Spec(in.Request.RunSpec, mask),
		"settings":    settings,
	}
	if s := in.Session; s != nil {
		p["session"] = map[string]any{"id": s.ID, "idle_timeout_seconds": s.IdleTimeoutSeconds, "max_lifetime_seconds": s.MaxLifetimeSeconds}
	}
	if a := in.Approval; a != nil {
		p["approval"] = approvalDoc(*a)
	}
	if in.Port != nil {
		p["port"] = map[string]any{"number": in.Port.Number}
	}
	if r.Via != "" {
		p["via"] = r.Via
	}
	if c := r.Client; c != nil {
		p["client"] = map[string]any{"name": c.Name, "version": c.Version}
	}
	if len(in.Secrets) > 0 {
		secrets := make(map[string]any, len(in.Secrets))
		for name, st := range in.Secrets {
			secrets[name] = map[string]any{"version": st.Version}
		}
		p["secrets"] = secrets
	}
	return p
}

// approvalDoc is input.approval as the record keeps it.
func approvalDoc(a ApprovalInput) map[string]any {
	roles := make([]any, len(a.Approver.Roles))
	for i, role := range a.Approver.Roles {
		roles[i] = string(role)
	}
	rules := make([]any, len(a.Rules))
	for i, r := range a.Rules {
		rules[i] = r
	}
	return map[string]any{
		"id":       a.ID,
		"approver": map[string]any{"name": a.Approver.Name, "team": a.Approver.Team, "roles": roles},
		"rules":    rules,
		"comment":  a.Comment,
	}
}

// ReadDecisionRecord reads back a record that Payload wrote and the trail
// returned (numbers as json.Number or float64). ok is false for a payload
// written before records had this shape, or one that does not parse.
func ReadDecisionRecord(payload map[string]any) (DecisionRecord, bool) {
	var doc struct {
		Record     int       `json:"record"`
		APIVersion string    `json:"api_version"`
		Operation  Operation `json:"operation"`
		Principal  *struct {
			Name   string          `json:"name"`
			Team   string          `json:"team"`
			Roles  []Role          `json:"roles"`
			SignIn json.RawMessage `json:"sign_in"`
		} `json:"principal"`
		Spec     *RunSpec               `json:"spec"`
		Settings *Settings              `json:"settings"`
		Session  *SessionInput          `json:"session"`
		Approval *ApprovalInput         `json:"approval"`
		Port     *PortInput             `json:"port"`
		Via      string                 `json:"via"`
		Client   *ClientInfo            `json:"client"`
		Secrets  map[string]SecretState `json:"secrets"`
	}
	raw, err := json.Marshal(payload)
	if err != nil || json.Unmarshal(raw, &doc) != nil {
		return DecisionRecord{}, false
	}
	if doc.Record != DecisionRecordVersion || doc.Operation == "" || doc.Principal == nil || doc.Spec == nil || doc.Settings == nil {
		return DecisionRecord{}, false
	}
	p := Principal{Name: doc.Principal.Name, Team: doc.Principal.Team, Roles: slices.Clone(doc.Principal.Roles)}
	if p.Roles == nil {
		p.Roles = []Role{}
	}
	st := *doc.Settings
	if st.MountRoots == nil {
		st.MountRoots = []string{}
	}
	return DecisionRecord{
		Input: AdmissionInput{APIVersion: doc.APIVersion, Operation: doc.Operation, Principal: p,
			Request: Normalized{RunSpec: *doc.Spec}, Settings: st, Session: doc.Session, Approval: doc.Approval, Port: doc.Port, Secrets: doc.Secrets},
		SignIn: readSignIn(doc.Principal.SignIn), Via: doc.Via, Client: doc.Client,
	}, true
}

// readSignIn reads a record's sign_in: an object, or the method alone as
// records before sign-in methods had more to say wrote it.
func readSignIn(raw json.RawMessage) SignIn {
	var method string
	if json.Unmarshal(raw, &method) == nil {
		return SignIn{Method: method}
	}
	var s SignIn
	_ = json.Unmarshal(raw, &s)
	return s
}

// DecisionPayload is a decision as the trail records it (the payload of
// admission.allowed and admission.denied, and part of
// admission.reviewed's): the verdict, the violations and warnings, and
// the mutations with their secrets hashed by m. It is built of maps and
// slices only, so that the trail encodes it as it is, in canonical key
// order. withSpec adds the admitted spec, masked.
func DecisionPayload(m Masker, d Decision, withSpec bool) map[string]any {
	p := map[string]any{
		"allow":      d.Allow,
		"violations": violationDocs(d.Violations),
		"warnings":   violationDocs(d.Warnings),
		"mutations":  m.Mutations(d.Mutations, d.Mask),
	}
	if withSpec {
		p["spec"] = m.Spec(d.Spec.RunSpec, d.Mask)
	}
	if len(d.Approvals) > 0 {
		p["approvals"] = violationDocs(d.Approvals)
	}
	return p
}

// violationDocs is vs as the JSON documents the API shows, never null.
func violationDocs(vs []Violation) []map[string]any {
	out := make([]map[string]any, len(vs))
	for i, v := range vs {
		out[i] = map[string]any{"rule": v.Rule, "message": v.Message, "controls": v.Controls, "severity": v.Severity, "action": v.Action, "count": v.Count}
		if v.Fix != "" {
			out[i]["fix"] = v.Fix
		}
	}
	return out
}
