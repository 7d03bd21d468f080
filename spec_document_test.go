package sandgate

import (
	"bytes"
	"encoding/json"
	"math/rand"
	"reflect"
	"testing"
	"testing/quick"
)

// TestRunSpecDocument holds RunSpec.Document to the spec's JSON encoding:
// for random specs (every field, set or empty), the document encodes to
// the same bytes as the spec decoded from its own JSON does, and the two
// documents are equal where the text is valid UTF-8.
func TestRunSpecDocument(t *testing.T) {
	check := func(s RunSpec) bool {
		raw, err := json.Marshal(s)
		if err != nil {
			t.Logf("spec does not encode: %v", err)
			return true
		}
		dec := json.NewDecoder(bytes.NewReader(raw))
		dec.UseNumber()
		var want map[string]any
		if err := dec.Decode(&want); err != nil {
			t.Fatal(err)
		}
		doc := s.Document()
		got, err := json.Marshal(doc)
		if err != nil {
			t.Fatal(err)
		}
		wantJSON, _ := json.Marshal(want)
		if !bytes.Equal(got, wantJSON) {
			t.Errorf("Document encodes to\n%s\nthe spec's JSON, decoded and encoded, is\n%s", got, wantJSON)
			return false
		}
		if bytes.Equal(raw, bytes.ToValidUTF8(raw, nil)) && !bytes.Contains(raw, []byte(`\ufffd`)) && !reflect.DeepEqual(doc, want) {
			t.Errorf("Document is\n%#v\nthe spec's JSON decodes to\n%#v", doc, want)
			return false
		}
		return true
	}
	cfg := &quick.Config{MaxCount: 3000, Rand: rand.New(rand.NewSource(1)), Values: func(v []reflect.Value, r *rand.Rand) {
		v[0] = reflect.ValueOf(randomSpec(r))
	}}
	if err := quick.Check(check, cfg); err != nil {
		t.Fatal(err)
	}
	// The all-empty and all-set specs, explicitly.
	check(RunSpec{})
	check(fullSpec())
}

// randomSpec is a random RunSpec where each field is, at random, left
// empty or set by testing/quick (strings of random runes, NaN-free numbers).
func randomSpec(r *rand.Rand) RunSpec {
	full := reflect.ValueOf(fullSpec())
	var s RunSpec
	v := reflect.ValueOf(&s).Elem()
	for i := range v.NumField() {
		switch r.Intn(3) {
		case 0: // empty
		case 1: // the full spec's value
			v.Field(i).Set(full.Field(i))
		default:
			x, ok := quick.Value(v.Field(i).Type(), r)
			if ok {
				v.Field(i).Set(x)
			}
		}
	}
	return s
}

// fullSpec sets every field, nested ones included, so a field Document
// forgets shows up.
func fullSpec() RunSpec {
	t, uid, gid, mode := true, int64(0), int64(10001), 0o755
	return RunSpec{
		Image: "sandgate/sandbox:latest", Command: []string{"sh", "-c", "echo <&> \u2028"}, Stdin: "in",
		Env: map[string]string{"A": "1", "B": ""}, Workdir: "/w", User: "0:0",
		Mounts: []Mount{
			{Source: "/srv/a", Target: "/a", ReadOnly: true, Propagation: "rprivate", Resolved: "/srv/a"},
			{Source: "b", Target: "/b"},
		},
		Volumes:        []Volume{{Name: "cache", Target: "/c", ReadOnly: true}, {Name: "v", Target: "/v"}},
		Network:        "none",
		Resources:      Resources{MemoryMB: 512, CPUs: 1.5, Pids: 256, TmpfsMB: 64, Nofile: 1024, WorkspaceMB: 256},
		TimeoutSeconds: 300, OutputLimitBytes: 1 << 40, PullPolicy: PullNever, SessionID: "s", TaskID: "t",
		Labels: map[string]string{"ticket": "ENG-1"}, Privileged: true, CapAdd: []string{"NET_BIND_SERVICE"},
		Devices: []string{"/dev/fuse"}, Sysctls: map[string]string{"net.ipv4.tcp_syncookies": "1"},
		PIDMode: "host", IPCMode: "host", UTSMode: "host", UsernsMode: "host",
		SecurityOpt: []string{"seccomp=unconfined"}, ReadOnlyRootfs: &t, Ports: []string{"80:80"},
		Files:     []File{{Path: "a/b.txt", Content: "hi", Encoding: "utf8", Mode: &mode}, {Path: "c", Content: "aGk="}},
		Artifacts: []string{"out/**", "report.json"}, ArtifactLimitBytes: 1 << 30,
		Workspace: &WorkspaceArchive{Format: "tar.gz", SHA256: "ab", ArchiveBytes: 10, Entries: 2, UnpackedBytes: 20},
		UID:       &uid, GID: &gid,
		CallbackURL: "https://hooks.example.com/sandgate?x=<&>",
		Egress:      []string{"*.npmjs.org:443"}, EgressLimits: &EgressLimits{Connections: 7},
		Secrets:  []string{"demo", "npm-token"},
		Security: &SecurityOptions{Seccomp: "unconfined", AppArmor: "x", NoNewPrivileges: true, Label: []string{"disable"}, SystemPaths: "unconfined"},
	}
}
