package images

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	recipefiles "github.com/sandgate/sandgate/deploy/images"
)

// TestRecipesEmbedded checks that every recipe shipped in the binary
// parses, and that the language images the default policy admits are there.
func TestRecipesEmbedded(t *testing.T) {
	recipes, err := LoadRecipes(recipefiles.Recipes)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, r := range recipes {
		got[r.Name] = r.Image
		if !strings.HasPrefix(r.Digest, "sha256:") || len(r.Checks) == 0 {
			t.Errorf("recipe %s: digest %q, %d checks", r.Name, r.Digest, len(r.Checks))
		}
	}
	want := map[string]string{"python": "sandgate/python:3", "node": "sandgate/node:18", "node-lts": "sandgate/node:20", "toolchain": "sandgate/toolchain:1"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("recipes (-want +got):\n%s", diff)
	}
	if _, err := FindRecipe(recipes, "cobol"); err == nil || !strings.Contains(err.Error(), "node, node-lts, python, toolchain") {
		t.Errorf("FindRecipe(cobol) = %v, want an error listing the recipes", err)
	}
}

func TestParseRecipeRefuses(t *testing.T) {
	good := "name: tool\nimage: sandgate/tool:1\nsuite: bookworm\npackages: [tool]\nsource_date_epoch: 1764201600\n"
	if _, err := ParseRecipe("tool.yaml", []byte(good)); err != nil {
		t.Fatalf("good recipe: %v", err)
	}
	tests := []struct {
		name, file, data, want string
	}{
		{"unknown field", "tool.yaml", good + "login_shell: bash\n", "unknown field"},
		{"file named otherwise", "other.yaml", good, "file is named for"},
		{"no tag", "tool.yaml", strings.Replace(good, "sandgate/tool:1", "sandgate/tool", 1), "name a tag"},
		{"digest", "tool.yaml", strings.Replace(good, "sandgate/tool:1", "sandgate/tool:1@sha256:"+strings.Repeat("a", 64), 1), "registry digest"},
		{"bad package", "tool.yaml", strings.Replace(good, "[tool]", "[\"tool; rm -rf /\"]", 1), "not a Debian package name"},
		{"no package", "tool.yaml", strings.Replace(good, "[tool]", "[]", 1), "at least one"},
		{"bad suite", "tool.yaml", strings.Replace(good, "bookworm", "../x", 1), "not a Debian suite"},
		{"no epoch", "tool.yaml", strings.Replace(good, "source_date_epoch: 1764201600\n", "", 1), "source_date_epoch"},
		{"PATH in env", "tool.yaml", good + "env: {PATH: /x}\n", "env"},
		{"absolute exclude", "tool.yaml", good + "exclude: [/usr]\n", "clean relative path"},
		{"escaping exclude", "tool.yaml", good + "exclude: [../etc]\n", "clean relative path"},
		{"empty check", "tool.yaml", good + "checks: [{name: x, command: []}]\n", "command is empty"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := ParseRecipe(tt.file, []byte(tt.data))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("ParseRecipe = %v, want an error with %q", err, tt.want)
			}
		})
	}
}

// TestRecipeDigestFollowsTheFile: a changed recipe is a different recipe.
func TestRecipeDigestFollowsTheFile(t *testing.T) {
	a := "name: tool\nimage: sandgate/tool:1\nsuite: bookworm\npackages: [tool]\nsource_date_epoch: 1764201600\n"
	ra, _ := ParseRecipe("tool.yaml", []byte(a))
	rb, _ := ParseRecipe("tool.yaml", []byte(a+"exclude: [usr/bin/x]\n"))
	if ra.Digest == "" || ra.Digest == rb.Digest {
		t.Errorf("digests %q and %q", ra.Digest, rb.Digest)
	}
}

// rootfsEntry is one entry of a synthetic mmdebstrap stream.
type rootfsEntry struct {
	name, body, link string
	typ              byte
	mode             int64
	mtime            int64
}

func rootfsTar(t *testing.T, entries []rootfsEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range entries {
		h := &tar.Header{Typeflag: e.typ, Name: e.name, Linkname: e.link, Mode: e.mode, Size: int64(len(e.body)),
			ModTime: time.Unix(e.mtime, 0), Uname: "root", Format: tar.FormatPAX}
		if e.typ != tar.TypeReg {
			h.Size = 0
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if e.typ == tar.TypeReg {
			tw.Write([]byte(e.body))
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestWriteLayer holds the filter to what the recipe images promise: no
// documentation but copyrights, no package manager, shell, device node
// or setuid bit, times clamped, the sandbox account added, and the same
// input giving the same bytes.
func TestWriteLayer(t *testing.T) {
	const epoch = 1764201600
	stream := rootfsTar(t, []rootfsEntry{
		{name: "./", typ: tar.TypeDir, mode: 0o755, mtime: epoch},
		{name: "./" + packagesFile, typ: tar.TypeReg, mode: 0o644, body: "python3\t3.11.2-1+b1\tamd64\tpython3-defaults\t3.11.2-1\nlibc6\t2.36-9\tamd64\tglibc\t2.36-9\n"},
		{name: "./bin/", typ: tar.TypeDir, mode: 0o755},
		{name: "./bin/sh", typ: tar.TypeSymlink, link: "dash"},
		{name: "./bin/tar", typ: tar.TypeReg, mode: 0o755, body: "tar"},
		{name: "./dev/", typ: tar.TypeDir, mode: 0o755},
		{name: "./dev/null", typ: tar.TypeChar, mode: 0o666},
		{name: "./etc/", typ: tar.TypeDir, mode: 0o755},
		{name: "./etc/passwd", typ: tar.TypeReg, mode: 0o644, body: "root:x:0:0::/:/bin/sh\nevil:x:10001:0::/:/bin/sh\n"},
		{name: "./etc/hostname", typ: tar.TypeReg, mode: 0o644, body: "buildhost\n"},
		{name: "./usr/", typ: tar.TypeDir, mode: 0o755},
		{name: "./usr/bin/", typ: tar.TypeDir, mode: 0o755},
		{name: "./usr/bin/dpkg", typ: tar.TypeReg, mode: 0o755, body: "dpkg"},
		{name: "./usr/bin/python3.11", typ: tar.TypeReg, mode: 0o4755, body: "python", mtime: epoch + 1000},
		{name: "./usr/bin/python3", typ: tar.TypeSymlink, mode: 0o777, link: "python3.11"},
		{name: "./usr/bin/pydoc3", typ: tar.TypeReg, mode: 0o755, body: "pydoc"},
		{name: "./usr/share/doc/python3/", typ: tar.TypeDir, mode: 0o755},
		{name: "./usr/share/doc/python3/copyright", typ: tar.TypeReg, mode: 0o644, body: "PSF"},
		{name: "./usr/share/doc/python3/changelog.gz", typ: tar.TypeReg, mode: 0o644, body: "log"},
		{name: "./usr/share/man/man1/python3.1.gz", typ: tar.TypeReg, mode: 0o644, body: "man"},
		{name: "./var/lib/dpkg/status", typ: tar.TypeReg, mode: 0o644, body: "Package: x"},
	})
	r := Recipe{Name: "python", Image: "sandgate/python:3", Suite: "bookworm", Exclude: []string{"usr/bin/pydoc3*"}, Digest: "sha256:x"}
	layer, err := writeLayer(bytes.NewReader(stream), r, epoch, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	wantPkgs := []sandgate.Package{
		{Name: "libc6", Version: "2.36-9", Architecture: "amd64", Source: "glibc", SourceVersion: "2.36-9"},
		{Name: "python3", Version: "3.11.2-1+b1", Architecture: "amd64", Source: "python3-defaults", SourceVersion: "3.11.2-1"},
	}
	if diff := cmp.Diff(wantPkgs, layer.packages); diff != "" {
		t.Errorf("packages (-want +got):\n%s", diff)
	}
	data, err := os.ReadFile(layer.file)
	if err != nil {
		t.Fatal(err)
	}
	if sum := sha256.Sum256(data); layer.diffID.Encoded() != hex.EncodeToString(sum[:]) || layer.size != int64(len(data)) {
		t.Errorf("diffID %s, size %d; the file has %x, %d bytes", layer.diffID, layer.size, sum, len(data))
	}
	got := map[string]string{}
	tr := tar.NewReader(bytes.NewReader(data))
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		if h.ModTime.Unix() > epoch {
			t.Errorf("%s: mtime %v after SOURCE_DATE_EPOCH", h.Name, h.ModTime)
		}
		desc := string(h.Typeflag) + " " + strings.TrimLeft(h.FileInfo().Mode().String(), "-") + " " + strconv.Itoa(h.Uid)
		if h.Typeflag == tar.TypeSymlink {
			desc += " -> " + h.Linkname
		}
		if h.Name == "etc/passwd" || h.Name == "etc/group" || h.Name == "usr/bin/python3.11" || h.Name == "var/lib/dpkg/status" {
			desc += " " + string(body)
		}
		got[h.Name] = desc
	}
	want := map[string]string{
		"bin/":                            "5 drwxr-xr-x 0",
		"etc/":                            "5 drwxr-xr-x 0",
		"dev/":                            "5 drwxr-xr-x 0",
		"usr/":                            "5 drwxr-xr-x 0",
		"usr/bin/":                        "5 drwxr-xr-x 0",
		"usr/bin/python3.11":              "0 rwxr-xr-x 0 python",
		"usr/bin/python3":                 "2 Lrwxrwxrwx 0 -> python3.11",
		"usr/share/doc/python3/":          "5 drwxr-xr-x 0",
		"usr/share/doc/python3/copyright": "0 rw-r--r-- 0",
		"etc/passwd":                      "0 rw-r--r-- 0 root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:10001:10001:sandgate sandbox:/workspace:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		"etc/group":                       "0 rw-r--r-- 0 root:x:0:\nsandbox:x:10001:\nnogroup:x:65534:\n",
		"etc/sandgate-release":            "0 rw-r--r-- 0",
		"tmp/":                            "5 dtrwxrwxrwx 0",
		"cache/":                          "5 dtrwxrwxrwx 0",
		"workspace/":                      "5 drwxr-xr-x 10001",
		"var/lib/dpkg/":                   "5 drwxr-xr-x 0",
		// The stream's own status file is dropped; the list's is written.
		"var/lib/dpkg/status": "0 rw-r--r-- 0 Package: libc6\nStatus: install ok installed\nArchitecture: amd64\nSource: glibc\nVersion: 2.36-9\n\n" +
			"Package: python3\nStatus: install ok installed\nArchitecture: amd64\nSource: python3-defaults (3.11.2-1)\nVersion: 3.11.2-1+b1\n",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("layer (-want +got):\n%s", diff)
	}

	again, err := writeLayer(bytes.NewReader(stream), r, epoch, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if again.diffID != layer.diffID {
		t.Errorf("the same stream gave layers %s and %s", layer.diffID, again.diffID)
	}
}

// TestExcluded checks the path matcher: a directory takes what is below
// it, globs stay within a segment, the keep list wins.
func TestExcluded(t *testing.T) {
	tests := []struct {
		name string
		want bool
	}{
		{"usr/share/man", true},
		{"usr/share/man/man1/x.1.gz", true},
		{"usr/share/manual", false},
		{"usr/share/doc/x/changelog.gz", true},
		{"usr/share/doc/x/copyright", false},
		{"usr/share/doc/x", false},
		{"usr/bin/dpkg-query", true},
		{"usr/bin/python3", false},
		{"bin/sh", true},
		{"var/log/apt/history.log", true},
		{"var/log", false},
		{"dev/null", true},
		{"dev", false},
	}
	for _, tt := range tests {
		if got := excluded(tt.name, recipeExclude(Recipe{})); got != tt.want {
			t.Errorf("excluded(%q) = %t, want %t", tt.name, got, tt.want)
		}
	}
	// shell: true keeps the shells and nothing else of what is dropped.
	withShell := recipeExclude(Recipe{Shell: true, Exclude: []string{"usr/bin/acorn"}})
	for name, want := range map[string]bool{"bin/sh": false, "usr/bin/dash": false, "usr/bin/dpkg": true, "usr/bin/acorn": true, "bin/tar": true} {
		if got := excluded(name, withShell); got != want {
			t.Errorf("shell: true: excluded(%q) = %t, want %t", name, got, want)
		}
	}
}
