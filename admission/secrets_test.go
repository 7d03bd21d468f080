package admission

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
)

// fakeSecrets answers which secrets are stored.
type fakeSecrets struct {
	stored map[string]sandgate.SecretState
	asked  [][]string
}

func (f *fakeSecrets) States(_ context.Context, names []string) (map[string]sandgate.SecretState, error) {
	f.asked = append(f.asked, names)
	out := map[string]sandgate.SecretState{}
	for _, n := range names {
		if st, ok := f.stored[n]; ok {
			out[n] = st
		}
	}
	return out, nil
}

const secretSpec = `{"command": ["true"], "network": "egress", "egress": ["api.example.test:443"], "secrets": ["demo", "gone"]}`

// TestSecretsInTheInput: a run's input says which of the secrets it names
// are stored, with their versions, and the record of its decision keeps
// that (a replay decides the same); a review's input too. A gateway
// without secrets refuses a request that names any, naming the field;
// one that names none never asks.
func TestSecretsInTheInput(t *testing.T) {
	g := testGate(t)
	rec := g.d.Recorder.(*fakeRecorder)
	if _, err := g.Admit(context.Background(), testCaller("alice", "a"), Run{Body: Body{R: strings.NewReader(secretSpec)}}); !isField(err, "secrets") {
		t.Fatalf("without secrets configured: %v", err)
	}
	fs := &fakeSecrets{stored: map[string]sandgate.SecretState{"demo": {Version: 4}}}
	g.d.Secrets = fs
	ans, err := g.Admit(context.Background(), testCaller("alice", "a"), Run{Body: Body{R: strings.NewReader(secretSpec)}})
	if err != nil {
		t.Fatal(err)
	}
	if ans.Run == nil || strings.Join(ans.Run.Spec.Secrets, ",") != "demo,gone" {
		t.Fatalf("run %+v", ans.Run)
	}
	var requested *sandgate.Event
	for i, ev := range rec.events {
		if ev.Type == sandgate.EventRunRequested {
			requested = &rec.events[i]
		}
	}
	if requested == nil {
		t.Fatal("no run.requested")
	}
	back, ok := sandgate.ReadDecisionRecord(requested.Payload)
	if !ok {
		t.Fatal("the record does not read back")
	}
	if diff := cmp.Diff(map[string]sandgate.SecretState{"demo": {Version: 4}}, back.Input.Secrets); diff != "" {
		t.Errorf("input.secrets (-want +got):\n%s", diff)
	}
	if _, err := g.Admit(context.Background(), testCaller("alice", "a"), Review{Body: Body{R: strings.NewReader(secretSpec)}}); err != nil {
		t.Fatal(err)
	}
	if len(fs.asked) != 2 {
		t.Errorf("asked %v", fs.asked)
	}
	if _, err := g.Admit(context.Background(), testCaller("alice", "a"), Run{Body: Body{R: strings.NewReader(`{"command": ["true"]}`)}}); err != nil {
		t.Fatal(err)
	}
	if len(fs.asked) != 2 {
		t.Errorf("a run without secrets asked for them: %v", fs.asked)
	}
	// A replay decides the recorded input as it was.
	d, err := g.Reevaluate(context.Background(), back, fakeAdmitter{})
	if err != nil || !d.Allow {
		t.Fatalf("replay: %+v %v", d, err)
	}
	for _, bad := range []string{`"secrets": ["Demo"]`, `"secrets": ["demo", "demo"]`, `"secrets": ["` + strings.Repeat("a", 65) + `"]`} {
		body := `{"command": ["true"], "network": "egress", "egress": ["api.example.test:443"], ` + bad + `}`
		if _, err := g.Admit(context.Background(), testCaller("alice", "a"), Run{Body: Body{R: strings.NewReader(body)}}); !isField(err, "secrets[") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}

// isField reports whether err is INVALID-REQUEST on a field beginning
// with prefix.
func isField(err error, prefix string) bool {
	var se *sandgate.Error
	return errors.As(err, &se) && se.Code == sandgate.CodeInvalidRequest && strings.HasPrefix(se.Field, prefix)
}
