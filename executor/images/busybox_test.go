package images

import (
	"archive/tar"
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestWgetSurvivesTimeout: a busybox whose wget dies of a signal on -T
// (as Debian's 1.35 does, writing -T through a NULL pointer) is refused,
// naming why; one whose wget says it cannot connect is taken.
func TestWgetSurvivesTimeout(t *testing.T) {
	dir := t.TempDir()
	script := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tc := range []struct {
		name, body, want string
	}{
		{"segfaults", `echo "Connecting to 127.0.0.1:1"; kill -SEGV $$`, "segmentation fault"},
		{"aborts", `kill -ABRT $$`, "FEATURE_WGET_TIMEOUT"},
		{"cannot connect", `echo "wget: can't connect to remote host (127.0.0.1): Connection refused" >&2; exit 1`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := wgetSurvivesTimeout(context.Background(), script(tc.name, tc.body))
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("wgetSurvivesTimeout = %v, want the busybox taken", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("wgetSurvivesTimeout = %v, want it refused with %q", err, tc.want)
			}
		})
	}
}

// TestExtractBusybox takes the binary out of a package's file stream,
// wherever the /usr merge put it, and nothing else.
func TestExtractBusybox(t *testing.T) {
	for _, name := range []string{"./usr/bin/busybox", "bin/busybox"} {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, f := range []struct{ name, body string }{
			{"./usr/share/doc/busybox-static/copyright", "c"}, {name, "ELF…"},
			{"./" + packagesFile, "busybox-static\t1:1.37.0-6+b3\tamd64\tbusybox\t1:1.37.0-6\n"},
		} {
			if err := tw.WriteHeader(&tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: 0o755, Size: int64(len(f.body))}); err != nil {
				t.Fatal(err)
			}
			tw.Write([]byte(f.body))
		}
		tw.Close()
		dir := t.TempDir()
		path, pkgs, err := extractBusybox(&buf, dir)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if len(pkgs) != 1 || pkgs[0].Name != "busybox-static" || pkgs[0].Source != "busybox" || pkgs[0].Version != "1:1.37.0-6+b3" {
			t.Errorf("%s: packages %+v", name, pkgs)
		}
		if b, _ := os.ReadFile(path); string(b) != "ELF…" {
			t.Errorf("%s: extracted %q", name, b)
		}
	}
	if _, _, err := extractBusybox(bytes.NewReader(nil), t.TempDir()); err == nil {
		t.Error("an empty stream gave a busybox")
	}
}
