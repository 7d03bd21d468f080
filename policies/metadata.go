package policies

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/open-policy-agent/opa/v1/ast"

	"github.com/sandgate/sandgate"
)

// Severities are the values a finding's METADATA may give as
// custom.severity, most severe first.
var Severities = []string{"critical", "high", "medium", "low"}

// UnratedSeverity is the severity of a violation whose rule no METADATA
// describes: the engine's own fail-closed denies, and the rules of a
// bundle that assembles its decision without the finding set. Nothing is
// known to be safe about such a request, so it is triaged as high.
const UnratedSeverity = "high"

// The kinds of rule a bundle's annotations describe.
const (
	KindFinding  = "finding"
	KindMutation = "mutation"
)

// admissionPath is the package whose finding and mutation sets the
// decision assembles.
var admissionPath = ast.MustParseRef("data.sandgate.admission")

// RuleInfo describes one rule of a bundle, as its METADATA annotation
// does: a rule is an id such as no_privileged that findings (or
// mutations) name, however many Rego definitions report it.
type RuleInfo struct {
	Rule string `json:"rule"`
	// Kind is KindFinding or KindMutation.
	Kind        string `json:"kind"`
	Title       string `json:"title"`
	Description string `json:"description"`
	// Severity is one of Severities; empty for a mutation.
	Severity string `json:"severity,omitempty"`
	// Controls are the CIS and PSS controls the rule enforces.
	Controls []string `json:"controls"`
	// Fix is what the rule suggests doing instead (custom.fix), for the
	// violations that name no fix of their own.
	Fix string `json:"fix,omitempty"`
	// File and Row locate the rule's METADATA block.
	File string `json:"file"`
	Row  int    `json:"row"`
}

// ruleMeta is what the engine adds to each violation of a rule.
type ruleMeta struct {
	controls []string
	severity string
	fix      string
}

// ruleMetas indexes the findings of infos by rule.
func ruleMetas(infos []RuleInfo) map[string]ruleMeta {
	m := make(map[string]ruleMeta, len(infos))
	for _, r := range infos {
		if r.Kind == KindFinding {
			m[r.Rule] = ruleMeta{controls: slices.Clip(r.Controls), severity: r.Severity, fix: r.Fix}
		}
	}
	return m
}

// ruleInfos reads the METADATA of every finding and mutation of
// data.sandgate.admission in c's modules, sorted by rule. Each rule must
// be described exactly once, by a rule-scoped METADATA block above one of
// its definitions, with a title and a description, and for a finding
// custom.severity and custom.controls. A definition that names its rule
// with a string ("rule": "no_privileged") is described by the block above
// it or above another definition of that rule; one that takes its rule
// from an expression (a table of rules) carries one block per rule it
// reports, each naming its rule as custom.rule. A bundle that breaks this
// is refused, so that no rule reaches a decision without its controls
// and severity.
func ruleInfos(c *ast.Compiler) ([]RuleInfo, error) {
	type seen struct {
		info      RuleInfo
		described bool
		first     *ast.Location
	}
	rules := map[string]*seen{}
	var errs []string
	// rule notes a definition (or a block) of rule id and returns its
	// record, or nil when id is already a rule of the other kind.
	rule := func(id, kind string, loc *ast.Location) *seen {
		s := rules[id]
		if s == nil {
			s = &seen{info: RuleInfo{Rule: id, Kind: kind}, first: loc}
			rules[id] = s
		}
		if s.info.Kind != kind {
			errs = append(errs, fmt.Sprintf("%s: rule %q is both a finding and a mutation (%s)", loc, id, s.first))
			return nil
		}
		return s
	}
	as := c.GetAnnotationSet()
	files := make([]string, 0, len(c.Modules))
	for name := range c.Modules {
		files = append(files, name)
	}
	sort.Strings(files)
	for _, name := range files {
		m := c.Modules[name]
		if !m.Package.Path.Equal(admissionPath) {
			continue
		}
		for _, r := range m.Rules {
			kind := ruleKind(r)
			if kind == "" {
				continue
			}
			var annots []*ast.Annotations
			for _, a := range as.GetRuleScope(r) {
				if a.Scope == "rule" {
					annots = append(annots, a)
				}
			}
			id, literal := ruleID(r)
			switch {
			case literal:
				if rule(id, kind, r.Location) == nil {
					continue
				}
			case len(annots) == 0:
				errs = append(errs, fmt.Sprintf(`%s: a %s that takes its rule from an expression needs a METADATA block naming each rule it reports (custom.rule); or name its rule with a string ("rule": "…")`, r.Location, kind))
				continue
			}
			for _, a := range annots {
				named, _ := a.Custom["rule"].(string)
				switch {
				case literal && named != "" && named != id:
					errs = append(errs, fmt.Sprintf("%s: the METADATA names rule %q, but its %s reports %q", a.Location, named, kind, id))
					continue
				case !literal && named == "":
					errs = append(errs, fmt.Sprintf("%s: the METADATA of a %s that takes its rule from an expression names its rule as custom.rule", a.Location, kind))
					continue
				case !literal:
					id = named
				}
				s := rule(id, kind, a.Location)
				if s == nil {
					continue
				}
				if s.described {
					errs = append(errs, fmt.Sprintf("%s: rule %q is described twice (also at %s:%d); keep one METADATA block for it", a.Location, id, s.info.File, s.info.Row))
					continue
				}
				info, problems := readAnnotation(id, kind, a)
				for _, p := range problems {
					errs = append(errs, fmt.Sprintf("%s: rule %q: %s", a.Location, id, p))
				}
				info.File, info.Row = a.Location.File, a.Location.Row
				s.info, s.described = info, true
			}
		}
	}
	ids := make([]string, 0, len(rules))
	for id := range rules {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	out := make([]RuleInfo, 0, len(ids))
	for _, id := range ids {
		s := rules[id]
		if !s.described {
			what := "title, description"
			if s.info.Kind == KindFinding {
				what += ", custom.severity and custom.controls"
			}
			errs = append(errs, fmt.Sprintf("%s: rule %q has no METADATA block (%s) above any of its definitions", s.first, id, what))
			continue
		}
		out = append(out, s.info)
	}
	if len(errs) > 0 {
		return nil, &loadError{errs}
	}
	return out, nil
}

// ruleKind is KindFinding or KindMutation for a definition of the finding
// or mutation set, and "" for any other rule.
func ruleKind(r *ast.Rule) string {
	ref := r.Head.Ref()
	if len(ref) != 1 || r.Head.RuleKind() != ast.MultiValue {
		return ""
	}
	switch v, _ := ref[0].Value.(ast.Var); v {
	case "finding":
		return KindFinding
	case "mutation":
		return KindMutation
	}
	return ""
}

// ruleID is the string a definition's object gives as "rule".
func ruleID(r *ast.Rule) (string, bool) {
	if r.Head.Key == nil {
		return "", false
	}
	obj, ok := r.Head.Key.Value.(ast.Object)
	if !ok {
		return "", false
	}
	id, ok := getValue(obj, keyRule).(ast.String)
	return string(id), ok && id != ""
}

// readAnnotation reads a rule's METADATA and lists what is missing or
// malformed.
func readAnnotation(id, kind string, a *ast.Annotations) (RuleInfo, []string) {
	info := RuleInfo{
		Rule:        id,
		Kind:        kind,
		Title:       strings.TrimSpace(a.Title),
		Description: strings.TrimSpace(a.Description),
		Controls:    []string{},
	}
	var problems []string
	if info.Title == "" {
		problems = append(problems, "METADATA has no title")
	}
	if info.Description == "" {
		problems = append(problems, "METADATA has no description")
	}
	if kind == KindMutation {
		// A mutation denies nothing: it has no severity, and controls
		// only if it says so.
		if _, ok := a.Custom["controls"]; !ok {
			return info, problems
		}
	} else {
		switch sev, _ := a.Custom["severity"].(string); {
		case slices.Contains(Severities, sev):
			info.Severity = sev
		case sev == "" && a.Custom["severity"] == nil:
			problems = append(problems, fmt.Sprintf("METADATA has no custom.severity (%s)", strings.Join(Severities, ", ")))
		default:
			problems = append(problems, fmt.Sprintf("custom.severity %v is not one of %s", a.Custom["severity"], strings.Join(Severities, ", ")))
		}
	}
	if fix, ok := a.Custom["fix"]; ok {
		if s, isString := fix.(string); isString && strings.TrimSpace(s) != "" {
			info.Fix = s
		} else {
			problems = append(problems, fmt.Sprintf("custom.fix must be a sentence, not %v", fix))
		}
	}
	raw, ok := a.Custom["controls"]
	list, isList := raw.([]any)
	switch {
	case !ok:
		problems = append(problems, "METADATA has no custom.controls (a list, [] when the rule enforces none)")
	case !isList:
		problems = append(problems, fmt.Sprintf("custom.controls must be a list of control ids, not %v", raw))
	default:
		for _, c := range list {
			s, ok := c.(string)
			if !ok || strings.TrimSpace(s) == "" {
				problems = append(problems, fmt.Sprintf("custom.controls must be a list of control ids, not %v", raw))
				break
			}
			if !slices.Contains(info.Controls, s) {
				info.Controls = append(info.Controls, s)
			}
		}
	}
	return info, problems
}

// describeRules is infos as the policy's status shows them, each with the
// number of the bundle's test_ rules that name it.
func (b *bundle) describeRules(infos []RuleInfo) []sandgate.PolicyRule {
	tests := make(map[string]int, len(infos))
	for _, r := range infos {
		tests[r.Rule] = 0
	}
	for _, m := range b.tests {
		for _, r := range m.Rules {
			if !strings.HasPrefix(string(r.Head.Name), "test_") {
				continue
			}
			named := map[string]bool{}
			ast.WalkTerms(r, func(t *ast.Term) bool {
				if s, ok := t.Value.(ast.String); ok {
					if _, known := tests[string(s)]; known {
						named[string(s)] = true
					}
				}
				return false
			})
			for id := range named {
				tests[id]++
			}
		}
	}
	out := make([]sandgate.PolicyRule, len(infos))
	for i, r := range infos {
		out[i] = sandgate.PolicyRule{Rule: r.Rule, Kind: r.Kind, Title: r.Title, Severity: r.Severity,
			Controls: slices.Clip(r.Controls), Module: r.File, Line: r.Row, Tests: tests[r.Rule]}
	}
	return out
}
