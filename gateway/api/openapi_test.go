package api_test

import (
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/gateway/api/apitest"
)

// TestOpenAPIDocument loads the document with kin-openapi and validates
// it as OpenAPI 3.1.
func TestOpenAPIDocument(t *testing.T) {
	doc, err := apitest.Document()
	if err != nil {
		t.Fatal(err)
	}
	if doc.OpenAPI != "3.1.0" || !doc.IsOpenAPI31OrLater() {
		t.Errorf("openapi = %q, want 3.1.0", doc.OpenAPI)
	}
	var raw map[string]any
	if err := json.Unmarshal(api.OpenAPI(), &raw); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			if op.OperationID == "" || op.Summary == "" || op.Description == "" {
				t.Errorf("%s %s: operationId, summary and description are required", method, path)
			}
			if op.Responses.Value("500") == nil {
				t.Errorf("%s %s: no 500 answer", method, path)
			}
		}
	}
}

// TestOpenAPIErrorCodes holds the document's error codes and their
// statuses to api.Codes and api.StatusOf, and api.Codes to every code
// the root package declares.
func TestOpenAPIErrorCodes(t *testing.T) {
	doc, err := apitest.Document()
	if err != nil {
		t.Fatal(err)
	}
	s := doc.Components.Schemas["ErrorCode"].Value
	var enum []string
	for _, v := range s.Enum {
		enum = append(enum, v.(string))
	}
	var codes []string
	for _, c := range api.Codes {
		codes = append(codes, string(c))
	}
	sort.Strings(enum)
	sort.Strings(codes)
	if diff := cmp.Diff(codes, enum); diff != "" {
		t.Errorf("ErrorCode enum (-api.Codes +document):\n%s", diff)
	}
	status, _ := s.Extensions["x-sandgate-status"].(map[string]any)
	for _, c := range api.Codes {
		got, _ := status[string(c)].(float64)
		if int(got) != api.StatusOf(c) {
			t.Errorf("x-sandgate-status[%s] = %v, want %d", c, status[string(c)], api.StatusOf(c))
		}
	}
	if declared := declaredCodes(t); !slices.Equal(declared, codes) {
		t.Errorf("api.Codes (-root package +api.Codes):\n%s", cmp.Diff(declared, codes))
	}
	// Each error answer of an operation admits only codes of its status.
	for path, item := range doc.Paths.Map() {
		for method, op := range item.Operations() {
			for st, r := range op.Responses.Map() {
				n, err := strconv.Atoi(st)
				if err != nil || n < 400 {
					continue
				}
				for _, c := range responseCodes(t, r.Value) {
					if api.StatusOf(sandgate.ErrorCode(c)) != n {
						t.Errorf("%s %s: answer %d admits %s, a code of %d", method, path, n, c, api.StatusOf(sandgate.ErrorCode(c)))
					}
				}
			}
		}
	}
}

// responseCodes returns the codes an error answer's schema admits.
func responseCodes(t *testing.T, r *openapi3.Response) []string {
	t.Helper()
	mt := r.Content.Get("application/json")
	if mt == nil {
		t.Errorf("error answer %q without application/json", *r.Description)
		return nil
	}
	for _, part := range mt.Schema.Value.AllOf {
		if part.Ref != "" {
			continue
		}
		e := part.Value.Properties["error"]
		if e == nil || e.Value.Properties["code"] == nil {
			continue
		}
		var codes []string
		for _, v := range e.Value.Properties["code"].Value.Enum {
			codes = append(codes, v.(string))
		}
		return codes
	}
	t.Errorf("error answer %q does not say its codes", *r.Description)
	return nil
}

// declaredCodes parses the root package for its ErrorCode constants.
func declaredCodes(t *testing.T) []string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "../../error.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	var codes []string
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.CONST {
			continue
		}
		for _, spec := range g.Specs {
			vs := spec.(*ast.ValueSpec)
			if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "ErrorCode" {
				continue
			}
			for _, v := range vs.Values {
				if lit, ok := v.(*ast.BasicLit); ok {
					s, _ := strconv.Unquote(lit.Value)
					codes = append(codes, s)
				}
			}
		}
	}
	sort.Strings(codes)
	return codes
}

// TestOpenAPIEnums holds the document's enumerations to the root
// package's.
func TestOpenAPIEnums(t *testing.T) {
	doc, err := apitest.Document()
	if err != nil {
		t.Fatal(err)
	}
	enum := func(name string) []string {
		var out []string
		for _, v := range doc.Components.Schemas[name].Value.Enum {
			out = append(out, v.(string))
		}
		return out
	}
	strs := func(vs ...any) []string {
		var out []string
		for _, v := range vs {
			out = append(out, reflect.ValueOf(v).String())
		}
		return out
	}
	var types []any
	for _, e := range sandgate.EventTypes {
		types = append(types, e)
	}
	tests := []struct {
		schema string
		want   []string
	}{
		{"EventType", strs(types...)},
		{"State", strs(sandgate.StatePending, sandgate.StateCreating, sandgate.StateRunning, sandgate.StateFinished)},
		{"Outcome", strs(sandgate.OutcomeSucceeded, sandgate.OutcomeFailed, sandgate.OutcomeOOMKilled, sandgate.OutcomeTimedOut,
			sandgate.OutcomeCancelled, sandgate.OutcomeError, sandgate.OutcomeLost)},
		{"Role", strs(sandgate.RoleSubmitter, sandgate.RoleSecurity, sandgate.RoleAuditor, sandgate.RoleAdmin)},
		{"SessionState", strs(sandgate.SessionOpen, sandgate.SessionEnded)},
		{"SessionEndReason", strs(sandgate.SessionDeleted, sandgate.SessionIdle, sandgate.SessionLifetime, sandgate.SessionOOM,
			sandgate.SessionExited, sandgate.SessionLost, sandgate.SessionError, sandgate.SessionShutdown)},
	}
	for _, tc := range tests {
		t.Run(tc.schema, func(t *testing.T) {
			if diff := cmp.Diff(tc.want, enum(tc.schema)); diff != "" {
				t.Errorf("enum (-Go +document):\n%s", diff)
			}
		})
	}
}

// TestOpenAPISchemasMatchWireTypes holds each schema of the document to
// the Go type the server encodes: the same properties, and for answers,
// every property the type always writes required.
func TestOpenAPISchemasMatchWireTypes(t *testing.T) {
	doc, err := apitest.Document()
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		schema string
		typ    any
		// request: a body the server reads, which requires what it needs.
		request bool
		// skip are the Go fields the schema leaves out on purpose.
		skip []string
	}{
		{schema: "Run", typ: api.RunView{}},
		{schema: "Usage", typ: sandgate.Usage{}},
		{schema: "EgressSummary", typ: sandgate.EgressSummary{}},
		{schema: "EgressDestinationSummary", typ: sandgate.EgressDestinationSummary{}},
		{schema: "EgressLimits", typ: sandgate.EgressLimits{}},
		{schema: "Output", typ: api.OutputView{}},
		{schema: "RunList", typ: api.RunList{}},
		{schema: "Decision", typ: api.DecisionView{}},
		{schema: "ChunkData", typ: api.ChunkData{}},
		{schema: "StateData", typ: api.StateData{}},
		{schema: "ExitData", typ: api.ExitData{}},
		{schema: "StreamTotals", typ: api.StreamTotals{}},
		{schema: "Config", typ: api.ConfigView{}},
		{schema: "BuiltImage", typ: sandgate.BuiltImage{}},
		{schema: "Principal", typ: api.PrincipalView{}},
		{schema: "Limits", typ: api.Limits{}},
		{schema: "Defaults", typ: sandgate.Defaults{}},
		{schema: "AuditEventList", typ: api.AuditEventList{}},
		{schema: "AuditRecord", typ: sandgate.AuditRecord{}},
		{schema: "VerifyReport", typ: api.VerifyReport{}},
		{schema: "VerifyReport.problems[]", typ: sandgate.VerifyProblem{}},
		{schema: "VerifyReport.anchors[]", typ: sandgate.VerifyAnchor{}},
		{schema: "Checkpoint.endorsements[]", typ: sandgate.KeyEndorsement{}},
		{schema: "Checkpoint", typ: api.CheckpointView{}},
		{schema: "InclusionProof", typ: api.InclusionProofView{}},
		{schema: "ConsistencyProof", typ: api.ConsistencyProofView{}},
		{schema: "CosignatureRequest", typ: api.CosignatureRequest{}, request: true},
		{schema: "PolicyStatus", typ: api.PolicyStatus{}},
		{schema: "PolicyStatus.modules[]", typ: sandgate.PolicyModule{}},
		{schema: "VolumeList", typ: api.VolumeList{}},
		{schema: "SecretPut", typ: api.SecretPut{}, request: true},
		{schema: "SecretInfo", typ: sandgate.SecretInfo{}},
		{schema: "SecretList", typ: api.SecretList{}},
		{schema: "CacheVolume", typ: sandgate.CacheVolume{}},
		{schema: "SandboxList", typ: api.SandboxList{}},
		{schema: "Sandbox", typ: sandgate.Sandbox{}},
		{schema: "CleanupResult", typ: api.CleanupResult{}},
		{schema: "Health", typ: api.Health{}},
		{schema: "Readiness", typ: api.Readiness{}},
		{schema: "ReadyCheck", typ: api.ReadyCheck{}},
		{schema: "Error", typ: api.ErrorBody{}},
		{schema: "ErrorDetail", typ: api.ErrorDetail{}},
		{schema: "ErrorInfo", typ: sandgate.ErrorInfo{}},
		{schema: "Violation", typ: sandgate.Violation{}},
		{schema: "Mutation", typ: sandgate.Mutation{}},
		{schema: "NormalizedRunSpec", typ: sandgate.RunSpec{}},
		{schema: "NormalizedRunSpec.mounts[]", typ: sandgate.Mount{}},
		{schema: "NormalizedRunSpec.volumes[]", typ: sandgate.Volume{}},
		{schema: "Resources", typ: sandgate.Resources{}},
		{schema: "SecurityOptions", typ: sandgate.SecurityOptions{}},
		{schema: "RunSpec", typ: sandgate.RunSpec{}, request: true, skip: []string{"uid", "gid", "security", "workspace"}},
		{schema: "RunSpec.mounts[]", typ: sandgate.Mount{}, request: true, skip: []string{"resolved"}},
		{schema: "RunSpec.volumes[]", typ: sandgate.Volume{}, request: true},
		{schema: "ReplayRequest", typ: api.ReplayRequest{}, request: true},
		{schema: "ReplayReport", typ: api.ReplayReport{}},
		{schema: "ReplayFilter", typ: api.ReplayFilter{}},
		{schema: "ReplayChanges", typ: api.ReplayChanges{}},
		{schema: "ReplayRuleGroup", typ: api.ReplayRuleGroup{}},
		{schema: "ReplayExample", typ: api.ReplayExample{}},
		{schema: "ReplayDrift", typ: api.ReplayDrift{}},
		{schema: "Session", typ: api.SessionView{}},
		{schema: "SessionLimits", typ: sandgate.SessionLimits{}},
		{schema: "SessionList", typ: api.SessionList{}},
		{schema: "FileResult", typ: api.FileResult{}},
		{schema: "SessionRequest", typ: api.SessionRequest{}, request: true, skip: []string{"uid", "gid", "security", "workspace"}},
		{schema: "ExecRequest", typ: api.ExecRequest{}, request: true},
		{schema: "NodeList", typ: api.NodeList{}},
		{schema: "Node", typ: api.NodeView{}},
	}
	for _, tc := range tests {
		t.Run(tc.schema, func(t *testing.T) {
			s := schemaAt(t, doc, tc.schema)
			props, always := jsonFields(reflect.TypeOf(tc.typ))
			props = slices.DeleteFunc(props, func(p string) bool { return slices.Contains(tc.skip, p) })
			if diff := cmp.Diff(props, apitest.Keys(s.Properties)); diff != "" {
				t.Errorf("properties (-Go +document):\n%s", diff)
			}
			if s.AdditionalProperties.Has == nil || *s.AdditionalProperties.Has {
				t.Errorf("additionalProperties is not false")
			}
			if tc.request {
				return
			}
			required := slices.Clone(s.Required)
			sort.Strings(required)
			if diff := cmp.Diff(always, required); diff != "" {
				t.Errorf("required (-always written +document):\n%s", diff)
			}
		})
	}
}

// schemaAt finds "Name", "Name.prop" or "Name.prop[]" (the items of an
// array property) among the components.
func schemaAt(t *testing.T, doc *openapi3.T, path string) *openapi3.Schema {
	t.Helper()
	parts := strings.Split(path, ".")
	ref := doc.Components.Schemas[parts[0]]
	if ref == nil {
		t.Fatalf("no schema %s", parts[0])
	}
	s := ref.Value
	for _, p := range parts[1:] {
		name, items := strings.CutSuffix(p, "[]")
		prop := s.Properties[name]
		if prop == nil {
			t.Fatalf("%s: no property %s", path, name)
		}
		s = prop.Value
		if len(s.AnyOf) > 0 {
			s = s.AnyOf[0].Value
		}
		if items {
			s = s.Items.Value
		}
	}
	return s
}

// jsonFields returns the JSON names of t's fields (embedded structs
// inlined) and those encoding/json always writes (no omitempty), sorted.
func jsonFields(t reflect.Type) (all, always []string) {
	for f := range t.Fields() {
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			a, w := jsonFields(f.Type)
			all, always = append(all, a...), append(always, w...)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		all = append(all, name)
		if !strings.Contains(opts, "omitempty") {
			always = append(always, name)
		}
	}
	sort.Strings(all)
	sort.Strings(always)
	return all, always
}
