package gateway

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
)

// TestRedactorSecretsFastPath checks that the spec a Redactor-backed
// gateway puts in the trail when only env and stdin are masked (a RunSpec
// with those values hashed) encodes to exactly the document RedactSpec
// makes, and that other masks still go through RedactSpec.
func TestRedactorSecretsFastPath(t *testing.T) {
	rec := auditRedactor{m: masker{key: []byte("audit-store-key-0123")}}
	sec := redactorSecrets{r: rec}
	ro := true
	uid := int64(10001)
	full := sandgate.RunSpec{
		Image: "sandgate/sandbox:latest", Command: []string{"sh", "-c", "echo $TOKEN"},
		Stdin: "secret input", Env: map[string]string{"TOKEN": "s3cr3t", "EMPTY": "", "CI": "true"},
		Workdir: "/workspace", User: "10001:10001",
		Mounts:         []sandgate.Mount{{Source: "/srv/a", Target: "/w", ReadOnly: true, Resolved: "/srv/a"}},
		Resources:      sandgate.Resources{MemoryMB: 512, CPUs: 0.5, Pids: 256, TmpfsMB: 64, Nofile: 1024},
		TimeoutSeconds: 300, OutputLimitBytes: 1 << 40, PullPolicy: sandgate.PullNever,
		SessionID: "s", TaskID: "t", Labels: map[string]string{"ticket": "ENG-1"},
		ReadOnlyRootfs: &ro, UID: &uid, GID: &uid,
		Security: &sandgate.SecurityOptions{Seccomp: "default", NoNewPrivileges: true},
	}
	tests := []struct {
		name string
		spec sandgate.RunSpec
		mask []string
	}{
		{"env and stdin", full, []string{"env", "stdin"}},
		{"no mask", full, nil},
		{"env only", full, []string{"env"}},
		{"no secrets", sandgate.RunSpec{Command: []string{"true"}}, []string{"env", "stdin"}},
		{"stdin only", sandgate.RunSpec{Command: []string{"cat"}, Stdin: "x"}, []string{"env", "stdin"}},
		{"env only in spec", sandgate.RunSpec{Command: []string{"env"}, Env: map[string]string{"A": "1"}}, []string{"env", "stdin"}},
		{"other paths", full, []string{"env", "stdin", "labels.ticket", "command.2"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			want := generic(rec.RedactSpec(tc.spec, append(append([]string{}, tc.mask...), "stdin")))
			got := generic(sec.spec(tc.spec, tc.mask))
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("trail document (-RedactSpec +fast path):\n%s", diff)
			}
		})
	}
	// The caller's spec keeps its secrets.
	if full.Env["TOKEN"] != "s3cr3t" || full.Stdin != "secret input" {
		t.Errorf("the spec passed in was changed: %v %q", full.Env, full.Stdin)
	}
}

// auditRedactor redacts as the audit store does: env always, then each
// mask path, never hashing a value that is a hash already, so a path named
// twice is hashed once.
type auditRedactor struct{ m masker }

func (r auditRedactor) Redact(doc map[string]any, mask []string) map[string]any {
	for _, p := range append([]string{"env"}, mask...) {
		r.at(doc, strings.Split(p, "."))
	}
	return doc
}

func (r auditRedactor) RedactSpec(spec sandgate.RunSpec, mask []string) map[string]any {
	return r.Redact(generic(spec).(map[string]any), mask)
}

func (r auditRedactor) at(doc map[string]any, path []string) {
	v, ok := doc[path[0]]
	switch {
	case !ok:
	case len(path) == 1:
		doc[path[0]] = r.leaves(v)
	default:
		if child, ok := v.(map[string]any); ok {
			r.at(child, path[1:])
		}
	}
}

func (r auditRedactor) leaves(v any) any {
	switch x := v.(type) {
	case string:
		if strings.HasPrefix(x, maskPrefix) {
			return x
		}
		return r.m.hash(x)
	case map[string]any:
		for k, e := range x {
			x[k] = r.leaves(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = r.leaves(e)
		}
		return x
	}
	return r.m.all(v)
}
