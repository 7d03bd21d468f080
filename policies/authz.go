package policies

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/open-policy-agent/opa/v1/ast"
	"github.com/open-policy-agent/opa/v1/rego"

	"github.com/sandgate/sandgate"
)

// The queries of package sandgate.authz (authz.rego): who a sign-in is,
// and who may do what.
const (
	PrincipalQuery = "data.sandgate.authz.principal"
	AuthzQuery     = "data.sandgate.authz.decision"
)

// mappingQuery evaluates the principal rule and its reasons in one pass;
// a bundle without the package maps no one.
const mappingQuery = `out := {"principal": [p | p := data.sandgate.authz.principal], "unmapped": [m | some m in data.sandgate.authz.unmapped]}`

// The rules of the denials the engine itself makes when the bundle does
// not answer.
const (
	RuleAuthzUndefined = "authz.undefined"
	RuleAuthzError     = "authz.error"
)

var (
	_ sandgate.Authorizer = (*Engine)(nil)

	// teamPattern is what a team name may be: it names directories under
	// the mount roots and Docker volumes.
	teamPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,62}$`)
)

// maxNameBytes bounds a principal's name from a sign-in.
const maxNameBytes = 256

// authzQueries are a revision's prepared authz queries.
type authzQueries struct {
	mapping  rego.PreparedEvalQuery
	decision rego.PreparedEvalQuery
	// defined says the bundle has data.sandgate.authz.decision.
	defined bool
}

// prepareAuthz prepares the authz queries of a compiled bundle.
func prepareAuthz(ctx context.Context, compiler *ast.Compiler, opts ...func(*rego.Rego)) (authzQueries, error) {
	var q authzQueries
	var err error
	base := []func(*rego.Rego){rego.Compiler(compiler), rego.StrictBuiltinErrors(true)}
	if q.mapping, err = rego.New(append(append([]func(*rego.Rego){rego.Query(mappingQuery)}, base...), opts...)...).PrepareForEval(ctx); err != nil {
		return q, err
	}
	if q.decision, err = rego.New(append(append([]func(*rego.Rego){rego.Query(AuthzQuery)}, base...), opts...)...).PrepareForEval(ctx); err != nil {
		return q, err
	}
	q.defined = len(compiler.GetRulesExact(ast.MustParseRef(AuthzQuery))) > 0
	return q, nil
}

// MapPrincipal maps a verified sign-in to its principal through
// data.sandgate.authz.principal, and checks what the rule made: a name, a
// team that can name directories, known roles, a team for a submitter.
// An identity the rule does not map is FORBIDDEN with the reasons.
func (e *Engine) MapPrincipal(ctx context.Context, id sandgate.Identity) (sandgate.Principal, error) {
	p := e.current.Load()
	if p == nil {
		return sandgate.Principal{}, unmapped("no policy is loaded")
	}
	// The claims are a token's JSON: they go into the input as JSON.
	raw, err := json.Marshal(id)
	if err != nil {
		return sandgate.Principal{}, unmapped("the sign-in's claims cannot be read: " + err.Error())
	}
	input, err := ast.ValueFromReader(bytes.NewReader(raw))
	if err != nil {
		return sandgate.Principal{}, unmapped("the sign-in's claims cannot be read: " + err.Error())
	}
	rs, err := p.authz.mapping.Eval(ctx, rego.EvalParsedInput(input), rego.EvalTime(e.now()), evalNoMetrics)
	if err != nil {
		return sandgate.Principal{}, unmapped(PrincipalQuery + " failed: " + err.Error())
	}
	var out map[string]any
	if len(rs) > 0 && len(rs[0].Bindings) > 0 {
		out, _ = rs[0].Bindings["out"].(map[string]any)
	}
	var reasons []string
	for _, r := range asList(out["unmapped"]) {
		if s, ok := r.(string); ok {
			reasons = append(reasons, truncateMessage(s))
		}
	}
	found := asList(out["principal"])
	if len(found) == 0 {
		if len(reasons) == 0 {
			reasons = []string{PrincipalQuery + " maps no principal from this sign-in"}
		}
		return sandgate.Principal{}, unmapped(reasons...)
	}
	pr, err := readPrincipal(found[0])
	if err != nil {
		return sandgate.Principal{}, unmapped(PrincipalQuery + ": " + err.Error())
	}
	return pr, nil
}

func asList(v any) []any {
	l, _ := v.([]any)
	return l
}

// unmapped is the FORBIDDEN error of a sign-in that is no principal.
func unmapped(reasons ...string) error {
	return &sandgate.Error{Code: sandgate.CodeForbidden,
		Message: "signed in, but not as a principal of sandgate: " + strings.Join(reasons, "; "),
		Details: map[string]any{"rule": PrincipalQuery, "reasons": reasons}}
}

// readPrincipal checks the principal rule's value.
func readPrincipal(v any) (sandgate.Principal, error) {
	m, ok := v.(map[string]any)
	if !ok {
		return sandgate.Principal{}, fmt.Errorf("the principal is not an object")
	}
	name, _ := m["name"].(string)
	team, _ := m["team"].(string)
	if name == "" || len(name) > maxNameBytes || !utf8.ValidString(name) || strings.IndexFunc(name, unicode.IsControl) >= 0 {
		return sandgate.Principal{}, fmt.Errorf("the name %q is empty, longer than %d bytes, or holds control characters", shortName(name), maxNameBytes)
	}
	if team != "" && (!teamPattern.MatchString(team) || team == "." || team == "..") {
		return sandgate.Principal{}, fmt.Errorf("the team %q is not a team name (letters, digits, '.', '_', '-'; at most 63)", shortName(team))
	}
	pr := sandgate.Principal{Name: name, Team: team}
	for _, r := range asList(m["roles"]) {
		s, _ := r.(string)
		if !slices.Contains(sandgate.Roles, sandgate.Role(s)) {
			return sandgate.Principal{}, fmt.Errorf("the role %q is not one of %v", shortName(s), sandgate.Roles)
		}
		if !pr.Has(sandgate.Role(s)) {
			pr.Roles = append(pr.Roles, sandgate.Role(s))
		}
	}
	if len(pr.Roles) == 0 {
		return sandgate.Principal{}, fmt.Errorf("%s has no role", name)
	}
	if pr.Has(sandgate.RoleSubmitter) && team == "" {
		return sandgate.Principal{}, fmt.Errorf("%s is a submitter without a team", name)
	}
	return pr, nil
}

// Authorize decides r with data.sandgate.authz.decision. No policy, an
// undefined decision, an evaluation error or a malformed answer is a
// denial whose rule says which.
func (e *Engine) Authorize(ctx context.Context, r sandgate.AuthzRequest) sandgate.AuthzDecision {
	p := e.current.Load()
	if p == nil {
		return sandgate.AuthzDecision{Rule: RuleAuthzUndefined, Message: "no policy is loaded"}
	}
	roles := make([]any, len(r.Principal.Roles))
	for i, role := range r.Principal.Roles {
		roles[i] = string(role)
	}
	input := ast.NewObject(
		item("principal", ast.ObjectTerm(
			item("name", ast.StringTerm(r.Principal.Name)),
			item("team", ast.StringTerm(r.Principal.Team)),
			item("roles", ast.NewTerm(ast.MustInterfaceToValue(roles))),
		)),
		item("sign_in", ast.ObjectTerm(
			item("method", ast.StringTerm(r.SignIn.Method)),
			item("issuer", ast.StringTerm(r.SignIn.Issuer)),
		)),
		item("action", ast.StringTerm(string(r.Action))),
		item("object", ast.ObjectTerm(
			item("kind", ast.StringTerm(r.Object.Kind)),
			item("id", ast.StringTerm(r.Object.ID)),
			item("team", ast.StringTerm(r.Object.Team)),
			item("principal", ast.StringTerm(r.Object.Principal)),
		)),
	)
	rs, err := p.authz.decision.Eval(ctx, rego.EvalParsedInput(input), rego.EvalTime(e.now()), evalNoMetrics)
	if err != nil {
		return sandgate.AuthzDecision{Rule: RuleAuthzError, Message: truncateMessage("authorization failed: " + err.Error())}
	}
	if len(rs) == 0 || len(rs[0].Expressions) == 0 {
		msg := AuthzQuery + " is undefined for this request"
		if !p.authz.defined {
			msg = "the policy bundle has no " + AuthzQuery + " (authz.rego of the default bundle): every request is refused"
		}
		return sandgate.AuthzDecision{Rule: RuleAuthzUndefined, Message: msg}
	}
	out, _ := rs[0].Expressions[0].Value.(map[string]any)
	allow, okAllow := out["allow"].(bool)
	rule, okRule := out["rule"].(string)
	if !okAllow || !okRule || rule == "" {
		return sandgate.AuthzDecision{Rule: RuleAuthzError, Message: "the authorization decision is malformed: want {allow: bool, rule: string, …}"}
	}
	all, _ := out["all_teams"].(bool)
	msg, _ := out["message"].(string)
	return sandgate.AuthzDecision{Allow: allow, AllTeams: allow && all, Rule: rule, Message: truncateMessage(msg)}
}

// MaskSignIn are the fields of a sign-in (issuer, subject, email) the
// trail keeps as keyed hashes in the policy in force
// (data.sandgate.config.mask_sign_in).
func (e *Engine) MaskSignIn() []string {
	if p := e.current.Load(); p != nil {
		return p.approvals.maskSignIn
	}
	return nil
}

// ApprovalExpiry is how long an approval waits before it expires in the
// policy in force (data.sandgate.config.approvals.expires_after_seconds).
func (e *Engine) ApprovalExpiry() time.Duration {
	if p := e.current.Load(); p != nil {
		return p.approvals.expiry
	}
	return DefaultApprovalExpiry
}

// DefaultApprovalExpiry is an approval's life when the data sets none.
const DefaultApprovalExpiry = 24 * time.Hour

// approvalConfig is what the data says of sign-ins and approvals, read
// once per revision.
type approvalConfig struct {
	maskSignIn []string
	expiry     time.Duration
}

// approvalConfig reads mask_sign_in and approvals.expires_after_seconds,
// refusing a bundle whose values are malformed.
func (b *bundle) approvalConfig() (approvalConfig, error) {
	cfg := b.config()
	c := approvalConfig{expiry: DefaultApprovalExpiry}
	if err := dataField(cfg, "mask_sign_in", &c.maskSignIn); err != nil {
		return c, err
	}
	for _, f := range c.maskSignIn {
		if !slices.Contains(sandgate.SignInFields, f) {
			return c, fmt.Errorf("data.sandgate.config.mask_sign_in: %q is not one of %v", f, sandgate.SignInFields)
		}
	}
	var ap struct {
		ExpiresAfterSeconds *int64 `json:"expires_after_seconds"`
		// The rest is the rules' to read.
		ApproverOtherTeam            any `json:"approver_other_team"`
		SessionLifetimeBeyondDefault any `json:"session_lifetime_beyond_default"`
		Resources                    any `json:"resources"`
	}
	if err := dataField(cfg, "approvals", &ap); err != nil {
		return c, err
	}
	if s := ap.ExpiresAfterSeconds; s != nil {
		if *s < 60 || *s > 30*24*3600 {
			return c, fmt.Errorf("data.sandgate.config.approvals.expires_after_seconds: %d is not between 60 and 2592000 (30 days)", *s)
		}
		c.expiry = time.Duration(*s) * time.Second
	}
	return c, nil
}
