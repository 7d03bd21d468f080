package images

import (
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
)

// TestParsePackages holds the hook's lines to what a package list may
// hold: five printable fields without spaces, bounded, sorted, the source
// defaulted to the package's own name and version.
func TestParsePackages(t *testing.T) {
	good := "zlib1g\t1:1.2.13\tamd64\tzlib\t1:1.2.13\nbase-files\t12.4\tamd64\t\t\nzlib1g\t1:1.2.13\tamd64\tzlib\t1:1.2.13\n"
	got, err := parsePackages([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	want := []sandgate.Package{
		{Name: "base-files", Version: "12.4", Architecture: "amd64", Source: "base-files", SourceVersion: "12.4"},
		{Name: "zlib1g", Version: "1:1.2.13", Architecture: "amd64", Source: "zlib", SourceVersion: "1:1.2.13"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("packages (-want +got):\n%s", diff)
	}
	for name, in := range map[string]string{
		"four fields":       "a\t1\tamd64\ta\n",
		"a space":           "a b\t1\tamd64\ta\t1\n",
		"a control char":    "a\t1\x1b[31m\tamd64\ta\t1\n",
		"no version":        "a\t\tamd64\ta\t1\n",
		"a field too long":  "a\t" + strings.Repeat("1", maxPackageField+1) + "\tamd64\ta\t1\n",
		"too many packages": manyPackages(maxPackages + 1),
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := parsePackages([]byte(in)); err == nil {
				t.Errorf("%q accepted", in[:min(len(in), 60)])
			}
		})
	}
}

func manyPackages(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString("p-" + strconv.Itoa(i) + "\t1\tamd64\tp\t1\n")
	}
	return b.String()
}

// TestSandboxPackageLabels: a busybox from a Debian package gives the
// sandbox image its list; one of no package says so plainly, with why.
func TestSandboxPackageLabels(t *testing.T) {
	pkg := sandgate.Package{Name: "busybox-static", Version: "1:1.37.0-6+b9", Architecture: "amd64", Source: "busybox", SourceVersion: "1:1.37.0-6"}
	got, err := sandboxPackageLabels(busybox{packages: []sandgate.Package{pkg}})
	if err != nil {
		t.Fatal(err)
	}
	want := `[{"name":"busybox-static","version":"1:1.37.0-6+b9","architecture":"amd64","source":"busybox","source_version":"1:1.37.0-6"}]`
	if diff := cmp.Diff(map[string]string{LabelPackages: want}, got); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
	got, err = sandboxPackageLabels(busybox{noPackages: "named with --busybox"})
	if err != nil || got[LabelNoPackages] != "named with --busybox" || got[LabelPackages] != "" {
		t.Errorf("labels of a busybox of no package: %v, %v", got, err)
	}
}
