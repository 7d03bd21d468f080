package sandgate_test

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
)

// TestDecisionRecordRoundTrip: a decision's record, as the trail returns
// it (through JSON, numbers as json.Number), reads back as the input the
// engine evaluated, its secrets as keyed hashes; a payload of the shape
// before does not read as a record.
func TestDecisionRecordRoundTrip(t *testing.T) {
	m := sandgate.NewMasker(maskKey)
	in := sandgate.AdmissionInput{
		APIVersion: sandgate.APIVersion, Operation: sandgate.OperationExec,
		Principal: sandgate.Principal{Name: "alice", Team: "payments", Roles: []sandgate.Role{sandgate.RoleSubmitter}},
		Request: sandgate.Normalized{RunSpec: sandgate.RunSpec{Image: "img", Command: []string{"sh", "-c", "make"},
			Env: map[string]string{"TOKEN": "s3cret"}, Resources: sandgate.Resources{MemoryMB: 512, CPUs: 0.5},
			Secrets: []string{"demo", "gone"}}},
		Settings: sandgate.Settings{AirGapped: true, MountRoots: []string{"/srv/work"},
			HostGroups: []sandgate.HostGroup{{GID: 105, Owns: "the Docker socket /var/run/docker.sock"}}},
		Session: &sandgate.SessionInput{ID: "s-1", IdleTimeoutSeconds: 300, MaxLifetimeSeconds: 3600},
		Secrets: map[string]sandgate.SecretState{"demo": {Version: 3}},
	}
	payload := sandgate.DecisionRecord{Input: in, SignIn: sandgate.SignInToken}.Payload(m, nil)
	raw, err := json.Marshal(payload)
	if err != nil {
		t.Fatal(err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var back map[string]any
	if err := dec.Decode(&back); err != nil {
		t.Fatal(err)
	}
	rec, ok := sandgate.ReadDecisionRecord(back)
	if !ok {
		t.Fatalf("the record does not read back: %s", raw)
	}
	want := in
	want.Request.Env = map[string]string{"TOKEN": h("s3cret")}
	if diff := cmp.Diff(want, rec.Input); diff != "" || rec.SignIn != sandgate.SignInToken {
		t.Errorf("record (-want +got):\n%s sign-in %q", diff, rec.SignIn)
	}
	for _, old := range []map[string]any{
		{"spec": map[string]any{"command": []any{"ls"}}},
		{"spec": map[string]any{"command": []any{"ls"}}, "principal_roles": []any{"submitter"}, "settings": map[string]any{"air_gapped": false}},
		{"record": 2, "operation": "run", "principal": "alice"},
	} {
		if _, ok := sandgate.ReadDecisionRecord(old); ok {
			t.Errorf("%v reads as a record", old)
		}
	}
}
