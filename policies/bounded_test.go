package policies_test

import (
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/policies"
)

// TestDecisionBoundedWhateverTheRequest: 95,000 cap_add values once made a
// 15 MB audit event and a 21 MB 403 body, one violation per value. A
// decision carries each rule once, with the count of elements at fault,
// and stays small however large the request.
func TestDecisionBoundedWhateverTheRequest(t *testing.T) {
	e := newEngine(t, policies.Options{})
	const caps, devices, ports, sysctls, labels = 95000, 5000, 5000, 2000, 1000
	s := baseSpec()
	for i := range caps {
		s.CapAdd = append(s.CapAdd, "SYS_ADMIN_"+strconv.Itoa(i))
	}
	for i := range devices {
		s.Devices = append(s.Devices, "/dev/d"+strconv.Itoa(i))
	}
	for i := range ports {
		s.Ports = append(s.Ports, strconv.Itoa(i))
	}
	s.Sysctls = map[string]string{}
	for i := range sysctls {
		s.Sysctls["kernel.x"+strconv.Itoa(i)] = "1"
	}
	for range labels {
		s.SecurityOpt = append(s.SecurityOpt, "label=disable")
	}
	d := decide(t, e, s)
	if d.Allow {
		t.Fatal("admitted")
	}
	got := map[string]int{}
	for _, v := range d.Violations {
		if _, dup := got[v.Rule]; dup {
			t.Errorf("rule %s is reported more than once", v.Rule)
		}
		got[v.Rule] = v.Count
	}
	want := map[string]int{"capabilities": caps, "no_devices": devices, "no_published_ports": ports, "sysctls": sysctls, "selinux_disabled": labels}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("rules and counts (-want +got):\n%s", diff)
	}
	body, err := json.Marshal(d.Violations)
	if err != nil {
		t.Fatal(err)
	}
	if len(body) > 4096 {
		t.Errorf("violations encode to %d bytes, want at most 4096:\n%s", len(body), body)
	}
}

// TestEngineMergesFindingsOfOneRule: a bundle whose rule still reports
// every element on its own is held to one violation per rule by the
// engine, with the count and the first few messages; a message that
// quotes a huge value is cut.
func TestEngineMergesFindingsOfOneRule(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "policy.rego", `package sandgate.admission

decision := {"allow": false, "violations": violations, "warnings": [{"rule": "w", "message": "warned", "action": "warn"}, {"rule": "w", "message": "again", "action": "warn"}]}

violations contains {"rule": "cap", "message": sprintf("capability %s is not allowed", [c]), "controls": ["CIS-5.4"], "action": "deny"} if {
	some c in input.request.cap_add
}

violations contains {"rule": "image", "message": sprintf("image %s", [input.request.image]), "controls": [], "action": "deny", "count": 7}
`)
	e := newEngine(t, policies.Options{Dir: dir})
	s := baseSpec()
	for i := range 10000 {
		s.CapAdd = append(s.CapAdd, "C"+strconv.Itoa(10000+i))
	}
	s.Image = "sandgate/" + strings.Repeat("é", 10000)
	d := decide(t, e, s)
	if len(d.Violations) != 2 || len(d.Warnings) != 1 {
		t.Fatalf("violations %d, warnings %d, want 2 and 1", len(d.Violations), len(d.Warnings))
	}
	byRule := map[string]sandgate.Violation{}
	for _, v := range d.Violations {
		byRule[v.Rule] = v
	}
	caps, image := byRule["cap"], byRule["image"]
	if caps.Rule != "cap" || caps.Count != 10000 ||
		caps.Message != "capability C10000 is not allowed; capability C10001 is not allowed; capability C10002 is not allowed (10000 findings of this rule in all)" {
		t.Errorf("merged violation %+v", caps)
	}
	if diff := cmp.Diff([]string{"CIS-5.4"}, caps.Controls); diff != "" {
		t.Errorf("controls (-want +got):\n%s", diff)
	}
	if image.Count != 7 || len(image.Message) > 2048 || !utf8.ValidString(image.Message) || !strings.HasSuffix(image.Message, "…") {
		t.Errorf("image violation: count %d, message of %d bytes (valid UTF-8 %v) ending %q",
			image.Count, len(image.Message), utf8.ValidString(image.Message), image.Message[len(image.Message)-8:])
	}
	if w := d.Warnings[0]; w.Count != 2 || w.Message != "warned; again (2 findings of this rule in all)" {
		t.Errorf("merged warning %+v", w)
	}
}

// TestEveryViolationCounts: a rule about the request as a whole counts 1.
func TestEveryViolationCounts(t *testing.T) {
	e := newEngine(t, policies.Options{})
	s := baseSpec()
	s.Privileged, s.CapAdd = true, []string{"SYS_ADMIN", "NET_ADMIN"}
	d := decide(t, e, s)
	got := map[string]int{}
	for _, v := range d.Violations {
		got[v.Rule] = v.Count
	}
	if diff := cmp.Diff(map[string]int{"no_privileged": 1, "capabilities": 2}, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	var zero policies.Engine
	if d, _ := zero.Decide(t.Context(), sandgate.AdmissionInput{Request: sandgate.Normalized{RunSpec: baseSpec()}}); len(d.Violations) != 1 || d.Violations[0].Count != 1 {
		t.Errorf("fail-closed violation %+v, want count 1", d.Violations)
	}
}
