package e2e

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSessionCopySemantics: sandgate session cp lands a copy where cp -r
// and docker cp would: a directory into the workspace keeps its name (so
// the next line's cd repo works), a named destination is the copy (made
// with its parents, merged when there, never nested on a second copy),
// "/." copies contents, and copies out mirror copies in.
func TestSessionCopySemantics(t *testing.T) {
	s := startServer(t)
	local := t.TempDir()
	write := func(rel, body string) {
		t.Helper()
		p := filepath.Join(local, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("repo/a.txt", "a\n")
	write("repo/sub/b.txt", "b\n")
	write("src/main.txt", "main\n")
	write("notes.txt", "notes\n")
	if err := os.MkdirAll(filepath.Join(local, "repo", "empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	create := runCLI(t, s, nil, "session", "create")
	if create.code != 0 {
		t.Fatalf("session create: %d %s", create.code, create.stderr)
	}
	id := strings.TrimSpace(create.stdout)
	defer runCLI(t, s, nil, "session", "rm", id)
	in := func(src, dst string) {
		t.Helper()
		if got := runCLI(t, s, nil, "session", "cp", local+"/"+src, id+":"+dst); got.code != 0 {
			t.Fatalf("session cp %s %s: exit %d %s", src, dst, got.code, got.stderr)
		}
	}
	sh := func(script string) string {
		t.Helper()
		got := runCLI(t, s, nil, "session", "exec", id, "--", "sh", "-c", script)
		if got.code != 0 {
			t.Fatalf("%s: exit %d\n%s%s", script, got.code, got.stdout, got.stderr)
		}
		return got.stdout
	}

	in("repo", "") // sandgate session cp ./repo "$id":
	if got := sh("cd repo && cat a.txt sub/b.txt && test -d empty && echo ok"); got != "a\nb\nok\n" {
		t.Errorf("cp ./repo ID: then cd repo: %q", got)
	}
	in("src", "src") // sandgate session cp ./src "$id":src
	in("src", "src") // again: merged, not nested
	if got := sh("cat src/main.txt; test ! -e src/src && echo flat"); got != "main\nflat\n" {
		t.Errorf("cp ./src ID:src twice: %q", got)
	}
	in("src", "deep/er/app") // parents made
	in("src/.", "contents/") // contents only
	in("notes.txt", "docs/") // into a directory, made
	if got := sh("cat deep/er/app/main.txt contents/main.txt docs/notes.txt"); got != "main\nmain\nnotes\n" {
		t.Errorf("named, /. and file-into copies: %q", got)
	}

	out := t.TempDir()
	get := func(src, dst string) {
		t.Helper()
		if got := runCLI(t, s, nil, "session", "cp", id+":"+src, dst); got.code != 0 {
			t.Fatalf("session cp %s %s: exit %d %s", src, dst, got.code, got.stderr)
		}
	}
	get("repo", filepath.Join(out, "copy"))      // a new name: the contents
	get("repo", out)                             // an existing directory: under its name
	get("repo/a.txt", out)                       // a file into a directory
	get("src/main.txt", filepath.Join(out, "m")) // a file under a new name
	for rel, want := range map[string]string{"copy/a.txt": "a\n", "copy/sub/b.txt": "b\n", "repo/sub/b.txt": "b\n", "a.txt": "a\n", "m": "main\n"} {
		if b, err := os.ReadFile(filepath.Join(out, rel)); err != nil || string(b) != want {
			t.Errorf("%s = %q, %v; want %q", rel, b, err, want)
		}
	}
	entries, _ := os.ReadDir(out)
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ".sandgate-cp-") {
			t.Errorf("a temporary file was left behind: %s", e.Name())
		}
	}
}
