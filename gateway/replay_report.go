package gateway

import (
	"cmp"
	"slices"
	"strings"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// The report of a replay: the decisions that would change, grouped by
// the rules that changed them, and what the records' masked values hide.

// hasMasked reports whether v holds a masked value.
func hasMasked(v any) bool {
	switch x := v.(type) {
	case string:
		return strings.HasPrefix(x, sandgate.MaskPrefix)
	case map[string]any:
		for _, e := range x {
			if hasMasked(e) {
				return true
			}
		}
	case []any:
		for _, e := range x {
			if hasMasked(e) {
				return true
			}
		}
	}
	return false
}

// unmasked is a copy of v with every masked value replaced by "".
func unmasked(v any) any {
	switch x := v.(type) {
	case string:
		if strings.HasPrefix(x, sandgate.MaskPrefix) {
			return ""
		}
		return x
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = unmasked(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = unmasked(e)
		}
		return out
	}
	return v
}

// recordedVerdict reads a recorded decision: allowed or not, and its
// denying rules.
func recordedVerdict(rec sandgate.AuditRecord) (bool, []string) {
	allow, ok := rec.Payload["allow"].(bool)
	if !ok {
		allow = rec.Type == sandgate.EventAdmissionAllowed || rec.Outcome == "allowed"
	}
	rules := []string{}
	list, _ := rec.Payload["violations"].([]any)
	for _, v := range list {
		m, _ := v.(map[string]any)
		rule, _ := m["rule"].(string)
		if action, _ := m["action"].(string); rule == "" || action == "warn" {
			continue
		}
		if !slices.Contains(rules, rule) {
			rules = append(rules, rule)
		}
	}
	slices.Sort(rules)
	return allow, rules
}

// denyRules are the rules of the violations that deny, sorted, once each.
func denyRules(vs []sandgate.Violation) []string {
	rules := []string{}
	for _, v := range vs {
		if v.Action != "warn" && !slices.Contains(rules, v.Rule) {
			rules = append(rules, v.Rule)
		}
	}
	slices.Sort(rules)
	return rules
}

// without is a less b.
func without(a, b []string) []string {
	out := []string{}
	for _, x := range a {
		if !slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// changeSet gathers the decisions of one kind of change by rule.
type changeSet struct {
	count  int
	groups map[[2]string]*api.ReplayRuleGroup
}

// add counts a decision under each rule it added and removed, keeping the
// first examples of each.
func (c *changeSet) add(ex api.ReplayExample, added, removed []string, examples int) {
	c.count++
	if c.groups == nil {
		c.groups = map[[2]string]*api.ReplayRuleGroup{}
	}
	put := func(rule, change string) {
		k := [2]string{rule, change}
		g := c.groups[k]
		if g == nil {
			g = &api.ReplayRuleGroup{Rule: rule, Change: change, Examples: []api.ReplayExample{}}
			c.groups[k] = g
		}
		g.Count++
		if len(g.Examples) < examples {
			g.Examples = append(g.Examples, ex)
		}
	}
	for _, rule := range added {
		put(rule, api.ReplayRuleAdded)
	}
	for _, rule := range removed {
		put(rule, api.ReplayRuleRemoved)
	}
}

// view is the change set as the report shows it: the most frequent rule
// first.
func (c *changeSet) view() api.ReplayChanges {
	out := api.ReplayChanges{Count: c.count, Rules: make([]api.ReplayRuleGroup, 0, len(c.groups))}
	for _, g := range c.groups {
		out.Rules = append(out.Rules, *g)
	}
	slices.SortFunc(out.Rules, func(a, b api.ReplayRuleGroup) int {
		return cmp.Or(b.Count-a.Count, cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Change, b.Change))
	})
	return out
}

// report is the replay's report as it stands.
func (r *replayer) report() api.ReplayReport {
	rep := r.rep
	rep.NewlyDenied = r.changes[newlyDenied].view()
	rep.NewlyAllowed = r.changes[newlyAllowed].view()
	rep.Changed = r.changes[changedRules].view()
	return rep
}
