package policies_test

import (
	"context"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/policies"
)

// TestRulesDescribed: every rule of the default bundle has a title, a
// description, a severity of the scheme and at least one control, read
// from its METADATA.
func TestRulesDescribed(t *testing.T) {
	rules, err := policies.Rules(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	byRule := map[string]policies.RuleInfo{}
	for _, r := range rules {
		byRule[r.Rule] = r
		if r.Title == "" || r.Description == "" || r.File == "" || r.Row == 0 {
			t.Errorf("%s: incomplete %+v", r.Rule, r)
		}
		switch r.Kind {
		case policies.KindFinding:
			if !slices.Contains(policies.Severities, r.Severity) || len(r.Controls) == 0 {
				t.Errorf("%s: severity %q, controls %v", r.Rule, r.Severity, r.Controls)
			}
		case policies.KindMutation:
			if r.Severity != "" {
				t.Errorf("mutation %s has severity %q", r.Rule, r.Severity)
			}
		default:
			t.Errorf("%s: kind %q", r.Rule, r.Kind)
		}
	}
	want := map[string]policies.RuleInfo{
		"no_privileged": {Rule: "no_privileged", Kind: policies.KindFinding, Severity: "critical", Controls: []string{"CIS-5.5", "PSS-baseline"}, File: "privileged.rego",
			Fix: `drop "privileged": true; ask for the one capability you need in cap_add if the allowlist has it`},
		// Two definitions, described once.
		"non_root_user": {Rule: "non_root_user", Kind: policies.KindFinding, Severity: "high", Controls: []string{"PSS-restricted"}, File: "user.rego",
			Fix: `run as a numeric non-root user, such as "user": "10001:10001" (the default)`},
		// One definition for seven rules, each described by custom.rule.
		"pids_limit":         {Rule: "pids_limit", Kind: policies.KindFinding, Severity: "medium", Controls: []string{"CIS-5.29"}, File: "resources.rego"},
		"output_limit":       {Rule: "output_limit", Kind: policies.KindFinding, Severity: "medium", Controls: []string{"CIS-5.11"}, File: "resources.rego"},
		"air_gapped_network": {Rule: "air_gapped_network", Kind: policies.KindMutation, Controls: []string{}, File: "network.rego"},
	}
	for id, w := range want {
		got := byRule[id]
		got.Title, got.Description, got.Row = "", "", 0
		if diff := cmp.Diff(w, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", id, diff)
		}
	}
	if len(rules) < 45 {
		t.Errorf("%d rules described, want every rule of the bundle", len(rules))
	}
}

// TestDocsRuleTableMatchesAnnotations holds docs/policies.md's table of
// rules to the bundle's METADATA: every rule once, with its severity and
// controls, so that the page cannot drift from what decisions say.
func TestDocsRuleTableMatchesAnnotations(t *testing.T) {
	rules, err := policies.Rules(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	doc, err := os.ReadFile("../docs/policies.md")
	if err != nil {
		t.Fatal(err)
	}
	text := string(doc)
	start := strings.Index(text, "### Rules and controls")
	if start < 0 {
		t.Fatal(`docs/policies.md has no "### Rules and controls" section`)
	}
	text = text[start:]
	if end := strings.Index(text[1:], "\n#"); end >= 0 {
		text = text[:end+1]
	}
	type row struct {
		Severity string
		Controls string
	}
	got := map[string]row{}
	name := regexp.MustCompile("`([a-z_.]+)`")
	for _, line := range strings.Split(text, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) != 7 || strings.HasPrefix(strings.TrimSpace(cells[1]), "rule") || strings.HasPrefix(strings.TrimSpace(cells[1]), "---") {
			continue
		}
		for _, m := range name.FindAllStringSubmatch(cells[1], -1) {
			if _, dup := got[m[1]]; dup {
				t.Errorf("rule %s has two rows", m[1])
			}
			got[m[1]] = row{strings.TrimSpace(cells[4]), strings.TrimSpace(cells[5])}
		}
	}
	want := map[string]row{}
	for _, r := range rules {
		w := row{Severity: r.Severity, Controls: strings.Join(r.Controls, ", ")}
		if w.Severity == "" {
			w.Severity = "—"
		}
		if w.Controls == "" {
			w.Controls = "—"
		}
		want[r.Rule] = w
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("docs/policies.md's rule table differs from the bundle's METADATA (-METADATA +docs):\n%s", diff)
	}
}

// TestViolationsCarryMetadata: a violation's controls and severity are
// its rule's METADATA's, deny or warn, in every path the decision takes.
func TestViolationsCarryMetadata(t *testing.T) {
	meta := func(rule, severity string, controls ...string) sandgate.Violation {
		return sandgate.Violation{Rule: rule, Severity: severity, Controls: append([]string{}, controls...)}
	}
	strip := func(vs []sandgate.Violation) []sandgate.Violation {
		out := []sandgate.Violation{}
		for _, v := range vs {
			out = append(out, sandgate.Violation{Rule: v.Rule, Severity: v.Severity, Controls: v.Controls})
		}
		slices.SortFunc(out, func(a, b sandgate.Violation) int { return strings.Compare(a.Rule, b.Rule) })
		return out
	}
	big := baseSpec()
	big.Privileged = true
	big.Resources.Pids = 1 << 20
	big.Resources.MemoryMB = 1 << 20
	big.ReadOnlyRootfs = boolPtr(false)

	t.Run("denies", func(t *testing.T) {
		d := decide(t, newEngine(t, policies.Options{}), big)
		want := []sandgate.Violation{
			meta("memory_limit", "medium", "CIS-5.11"),
			meta("no_privileged", "critical", "CIS-5.5", "PSS-baseline"),
			meta("pids_limit", "medium", "CIS-5.29"),
			meta("read_only_rootfs", "medium", "CIS-5.13"),
		}
		if diff := cmp.Diff(want, strip(d.Violations)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
	t.Run("warns", func(t *testing.T) {
		dir := copyBundle(t)
		editData(t, dir, `"actions": {}`, `"actions": {"read_only_rootfs": "warn"}`)
		d := decide(t, newEngine(t, policies.Options{Dir: dir}), big)
		want := []sandgate.Violation{
			meta("memory_limit", "medium", "CIS-5.11"),
			meta("no_privileged", "critical", "CIS-5.5", "PSS-baseline"),
			meta("pids_limit", "medium", "CIS-5.29"),
		}
		if diff := cmp.Diff(want, strip(d.Violations)); diff != "" {
			t.Errorf("violations (-want +got):\n%s", diff)
		}
		if diff := cmp.Diff([]sandgate.Violation{meta("read_only_rootfs", "medium", "CIS-5.13")}, strip(d.Warnings)); diff != "" {
			t.Errorf("warnings (-want +got):\n%s", diff)
		}
	})
	t.Run("a decision's controls are its own", func(t *testing.T) {
		e := newEngine(t, policies.Options{})
		for _, v := range decide(t, e, big).Violations {
			v.Controls[0] = "changed"
		}
		for _, v := range decide(t, e, big).Violations {
			if v.Controls[0] == "changed" {
				t.Errorf("changing one decision's controls changed the next: %+v", v)
			}
		}
	})
	t.Run("fail closed", func(t *testing.T) {
		var e policies.Engine
		d, _ := e.Decide(context.Background(), sandgate.AdmissionInput{Request: sandgate.Normalized{RunSpec: baseSpec()}})
		if diff := cmp.Diff([]sandgate.Violation{meta(policies.RuleNoPolicy, policies.UnratedSeverity)}, strip(d.Violations)); diff != "" {
			t.Errorf("(-want +got):\n%s", diff)
		}
	})
}

// describedFinding is a finding rule of a small bundle, with the
// annotation block above it.
func describedFinding(block, head string) string {
	return block + "finding contains " + head + ` if input.request.privileged == true
`
}

// smallBundle is a bundle whose decision is its findings, with rules.
func smallBundle(rules ...string) string {
	return `package sandgate.admission

decision := {"allow": count(finding) == 0, "violations": [f | some f in finding]}

` + strings.Join(rules, "\n")
}

const privilegedBlock = `# METADATA
# title: Privileged mode
# description: No privileged containers.
# custom:
#   severity: critical
#   controls: [CIS-5.5, PSS-baseline]
`

// TestAnnotationsOfCustomBundles: controls a finding names itself are
// added to its METADATA's; a rule reported from an expression is
// described by custom.rule; a decision made without the finding set keeps
// what it says.
func TestAnnotationsOfCustomBundles(t *testing.T) {
	privileged := baseSpec()
	privileged.Privileged = true
	tests := []struct {
		name string
		rego string
		want []sandgate.Violation
	}{
		{"controls merged", smallBundle(describedFinding(privilegedBlock,
			`{"rule": "priv", "message": "m", "controls": ["PSS-baseline", "ORG-7"], "action": "deny"}`)),
			[]sandgate.Violation{{Rule: "priv", Severity: "critical", Controls: []string{"CIS-5.5", "PSS-baseline", "ORG-7"}}}},
		{"rules from an expression", smallBundle(`# METADATA
# title: A
# description: a.
# custom:
#   rule: a
#   severity: low
#   controls: [X-1]

# METADATA
# title: B
# description: b.
# custom:
#   rule: b
#   severity: high
#   controls: [X-2]
finding contains {"rule": r, "message": "m", "action": "deny"} if {
	input.request.privileged == true
	some r in ["a", "b"]
}
`), []sandgate.Violation{{Rule: "a", Severity: "low", Controls: []string{"X-1"}}, {Rule: "b", Severity: "high", Controls: []string{"X-2"}}}},
		{"no finding set", `package sandgate.admission

decision := {"allow": false, "violations": [
	{"rule": "r1", "message": "m", "controls": ["C-1"]},
	{"rule": "r2", "message": "m", "severity": "low"},
	{"rule": "r3", "message": "m", "severity": "extreme"},
]}
`, []sandgate.Violation{
			{Rule: "r1", Severity: policies.UnratedSeverity, Controls: []string{"C-1"}},
			{Rule: "r2", Severity: "low", Controls: []string{}},
			{Rule: "r3", Severity: policies.UnratedSeverity, Controls: []string{}},
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "policy.rego", tt.rego)
			d := decide(t, newEngine(t, policies.Options{Dir: dir}), privileged)
			var got []sandgate.Violation
			for _, v := range d.Violations {
				got = append(got, sandgate.Violation{Rule: v.Rule, Severity: v.Severity, Controls: v.Controls})
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
		})
	}
}

// TestRuleWithoutAnnotationsRefused: a rule whose METADATA is missing,
// incomplete or ambiguous is refused at load like a compile error, with
// where and what, so that no violation goes out without its controls
// and severity; the policy in force keeps answering.
func TestRuleWithoutAnnotationsRefused(t *testing.T) {
	head := `{"rule": "priv", "message": "m", "action": "deny"}`
	tests := []struct {
		name  string
		rego  string
		wants []string
	}{
		{"no METADATA", smallBundle(describedFinding("", head)),
			[]string{`policy.rego:5:`, `rule "priv" has no METADATA block (title, description, custom.severity and custom.controls)`}},
		{"a mutation without METADATA", smallBundle(describedFinding(privilegedBlock, head),
			`mutation contains {"op": "replace", "path": "/network", "value": "none", "rule": "m"} if input.request.privileged == true
`), []string{`rule "m" has no METADATA block (title, description) above`}},
		{"no severity", smallBundle(describedFinding(strings.Replace(privilegedBlock, "#   severity: critical\n", "", 1), head)),
			[]string{`policy.rego:5: rule "priv": METADATA has no custom.severity (critical, high, medium, low)`}},
		{"unknown severity", smallBundle(describedFinding(strings.Replace(privilegedBlock, "critical", "severe", 1), head)),
			[]string{`custom.severity severe is not one of critical, high, medium, low`}},
		{"no controls", smallBundle(describedFinding(strings.Replace(privilegedBlock, "#   controls: [CIS-5.5, PSS-baseline]\n", "", 1), head)),
			[]string{`METADATA has no custom.controls`}},
		{"controls not a list", smallBundle(describedFinding(strings.Replace(privilegedBlock, "[CIS-5.5, PSS-baseline]", "CIS-5.5", 1), head)),
			[]string{`custom.controls must be a list of control ids, not CIS-5.5`}},
		{"no title or description", smallBundle(describedFinding(
			strings.Replace(strings.Replace(privilegedBlock, "# title: Privileged mode\n", "", 1), "# description: No privileged containers.\n", "", 1), head)),
			[]string{`METADATA has no title`, `METADATA has no description`}},
		{"described twice", smallBundle(describedFinding(privilegedBlock, head), describedFinding(privilegedBlock, head)),
			[]string{`policy.rego:13: rule "priv" is described twice (also at policy.rego:5)`}},
		{"custom.rule names another rule", smallBundle(describedFinding(strings.Replace(privilegedBlock, "# custom:\n", "# custom:\n#   rule: other\n", 1), head)),
			[]string{`the METADATA names rule "other", but its finding reports "priv"`}},
		{"rule from an expression, undescribed", smallBundle(`finding contains {"rule": r, "message": "m"} if {
	some r in ["a"]
}
`), []string{`a finding that takes its rule from an expression needs a METADATA block naming each rule it reports (custom.rule)`}},
		{"rule from an expression without custom.rule", smallBundle(privilegedBlock + `finding contains {"rule": r, "message": "m"} if {
	some r in ["a"]
}
`), []string{`the METADATA of a finding that takes its rule from an expression names its rule as custom.rule`}},
		{"malformed METADATA", smallBundle(describedFinding("# METADATA\n# title: [\n", head)),
			[]string{`policy.rego:6: rego_parse_error: yaml`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			writeFile(t, dir, "policy.rego", tt.rego)
			for what, err := range map[string]error{
				"New":   func() error { _, err := policies.New(context.Background(), policies.Options{Dir: dir}); return err }(),
				"Check": func() error { _, err := policies.Check(context.Background(), dir); return err }(),
				"Rules": func() error { _, err := policies.Rules(context.Background(), dir); return err }(),
			} {
				errs, ok := policies.IsPolicyInvalid(err)
				if !ok {
					t.Fatalf("%s: %v, want POLICY-INVALID", what, err)
				}
				for _, w := range tt.wants {
					if !strings.Contains(strings.Join(errs, "\n"), w) {
						t.Errorf("%s: errors %q do not say %q", what, errs, w)
					}
				}
			}
		})
	}

	t.Run("reload keeps the policy in force", func(t *testing.T) {
		dir := copyBundle(t)
		e := newEngine(t, policies.Options{Dir: dir})
		rev := e.Status().Revision
		rootfs := readFile(t, dir, "rootfs.rego")
		i := strings.Index(rootfs, "# METADATA")
		j := strings.Index(rootfs, "finding contains")
		writeFile(t, dir, "rootfs.rego", rootfs[:i]+rootfs[j:])
		_, err := e.Reload(context.Background())
		if errs, ok := policies.IsPolicyInvalid(err); !ok || !strings.Contains(strings.Join(errs, "\n"), `rule "read_only_rootfs" has no METADATA block`) {
			t.Fatalf("Reload = %v", err)
		}
		if st := e.Status(); st.Revision != rev || st.LastError == "" {
			t.Errorf("status after refusal %+v", st)
		}
	})
}

// TestStatusDescribesRules: the policy in force's status lists each rule
// of the bundle with its METADATA, its module and line, and how many of
// the bundle's tests name it; no_privileged is tested, and every rule
// Rules describes is there.
func TestStatusDescribesRules(t *testing.T) {
	st := newEngine(t, policies.Options{}).Status()
	want, err := policies.Rules(context.Background(), "")
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Rules) != len(want) {
		t.Fatalf("status has %d rules, the bundle %d", len(st.Rules), len(want))
	}
	tested := 0
	for i, r := range st.Rules {
		w := want[i]
		if r.Rule != w.Rule || r.Severity != w.Severity || r.Module != w.File || r.Line != w.Row || !slices.Equal(r.Controls, w.Controls) {
			t.Errorf("status rule %+v, the bundle's %+v", r, w)
		}
		if r.Tests > 0 {
			tested++
		}
		if r.Rule == "no_privileged" && (r.Tests == 0 || !slices.Contains(r.Controls, "CIS-5.5")) {
			t.Errorf("no_privileged: %+v, want tests and CIS-5.5", r)
		}
	}
	if tested < len(st.Rules)/2 {
		t.Errorf("only %d of %d rules are named by a test", tested, len(st.Rules))
	}
}
