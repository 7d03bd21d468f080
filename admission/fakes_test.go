package admission

import (
	"context"
	"io"
	"testing"

	"github.com/sandgate/sandgate"
)

// The fakes of the gate's narrow interfaces: unit tests of the pipeline's
// own rules, without a policy engine, a database or a daemon.

type fakeAdmitter struct{}

func (fakeAdmitter) Decide(_ context.Context, in sandgate.AdmissionInput) (sandgate.Decision, error) {
	return sandgate.Decision{Allow: true, DecisionID: "d", PolicyRevision: "r", Spec: in.Request}, nil
}
func (fakeAdmitter) Defaults() sandgate.Defaults             { return sandgate.BuiltinDefaults }
func (fakeAdmitter) TeamLimits(string) sandgate.TeamLimits   { return sandgate.TeamLimits{} }
func (fakeAdmitter) Enforcement(string) sandgate.Enforcement { return sandgate.Enforcement{} }

type fakeRecorder struct{ events []sandgate.Event }

func (r *fakeRecorder) Emit(ev sandgate.Event)                           { r.events = append(r.events, ev) }
func (r *fakeRecorder) Queue(_ context.Context, ev sandgate.Event) error { r.Emit(ev); return nil }
func (r *fakeRecorder) Record(_ context.Context, evs ...sandgate.Event) error {
	r.events = append(r.events, evs...)
	return nil
}

type fakeRuns struct{ runs map[string]sandgate.Run }

func (s *fakeRuns) CreateRun(_ context.Context, r *sandgate.Run) error { s.runs[r.ID] = *r; return nil }
func (s *fakeRuns) UpdateRun(_ context.Context, r *sandgate.Run) error { s.runs[r.ID] = *r; return nil }
func (s *fakeRuns) GetRun(_ context.Context, id string) (*sandgate.Run, error) {
	r, ok := s.runs[id]
	if !ok {
		return nil, sandgate.Errorf(sandgate.CodeNotFound, "no run %s", id)
	}
	return &r, nil
}
func (s *fakeRuns) ListRuns(context.Context, sandgate.RunFilter) ([]sandgate.Run, string, error) {
	return nil, "", nil
}

type fakeSessions struct{}

func (fakeSessions) CreateSession(context.Context, *sandgate.Session) error { return nil }
func (fakeSessions) UpdateSession(context.Context, *sandgate.Session) error { return nil }
func (fakeSessions) GetSession(_ context.Context, id string) (*sandgate.Session, error) {
	return nil, sandgate.Errorf(sandgate.CodeNotFound, "no session %s", id)
}
func (fakeSessions) ListSessions(context.Context, sandgate.SessionFilter) ([]sandgate.Session, error) {
	return nil, nil
}

type fakeLive struct {
	runs     map[string]*sandgate.Run
	sessions map[string]*LiveSession
}

func (l *fakeLive) Run(id string) *sandgate.Run    { return l.runs[id] }
func (l *fakeLive) Session(id string) *LiveSession { return l.sessions[id] }
func (l *fakeLive) Start(Admitted)                 {}
func (l *fakeLive) Open(_ context.Context, a AdmittedSession) (*sandgate.Session, error) {
	return &a.Session, nil
}
func (l *fakeLive) Cancel(_ context.Context, r *sandgate.Run) (*sandgate.Run, error) { return r, nil }
func (l *fakeLive) End(_ context.Context, id string) (*sandgate.Session, error) {
	s := l.sessions[id].Session
	return &s, nil
}
func (l *fakeLive) PutFiles(context.Context, string, sandgate.FileUpload) (sandgate.FileDigest, error) {
	return sandgate.FileDigest{}, nil
}
func (l *fakeLive) GetFiles(context.Context, string, string, func(string) (io.Writer, error)) (sandgate.FileDigest, error) {
	return sandgate.FileDigest{}, nil
}

type fakeWorkspaces struct{}

func (fakeWorkspaces) CheckSpec(sandgate.RunSpec) error { return nil }
func (fakeWorkspaces) Archive(r io.Reader) (*Upload, error) {
	n, err := io.Copy(io.Discard, r)
	return &Upload{Size: n}, err
}
func (fakeWorkspaces) Files(r io.Reader, _, _ string, _ int64) (*Upload, error) {
	n, err := io.Copy(io.Discard, r)
	return &Upload{Size: n}, err
}

// testGate is a gate over the fakes; its sessions are the fake Live's.
func testGate(t *testing.T) *Gate {
	t.Helper()
	live := &fakeLive{runs: map[string]*sandgate.Run{}, sessions: map[string]*LiveSession{}}
	n := 0
	g, err := New(Config{Node: "n", Sessions: true}, Deps{
		Admitter: fakeAdmitter{}, Recorder: &fakeRecorder{}, Runs: &fakeRuns{runs: map[string]sandgate.Run{}},
		Sessions: fakeSessions{}, Live: live, Runner: live, Workspaces: fakeWorkspaces{},
		Masker: sandgate.NewMasker([]byte("test-mask-key-0123456789")),
		IDs: func() string {
			n++
			return "01900000-0000-7000-8000-1000000000" + string(rune('0'+n/10)) + string(rune('0'+n%10))
		},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func testCaller(name, team string) Caller {
	return Caller{Principal: sandgate.Principal{Name: name, Team: team, Roles: []sandgate.Role{sandgate.RoleSubmitter}}, SignIn: sandgate.SignInToken}
}
