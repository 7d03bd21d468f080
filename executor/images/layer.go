package images

import (
	"archive/tar"
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"path"
	"strings"
	"time"

	digest "github.com/opencontainers/go-digest"

	"github.com/sandgate/sandgate"
)

// builtLayer is the filtered root filesystem, on disk.
type builtLayer struct {
	file     string
	size     int64
	diffID   digest.Digest
	packages []sandgate.Package
}

// recipeBaseExclude are the paths no recipe image keeps: documentation
// (but each package's copyright), the package manager, its state and
// configuration, archivers it brings, shells, and the files mmdebstrap
// copies from the host or that the runtime provides.
var recipeBaseExclude = []string{
	"usr/share/doc/*/*",
	"usr/share/man", "usr/share/info", "usr/share/locale", "usr/share/lintian", "usr/share/bug",
	"usr/share/menu", "usr/share/bash-completion", "usr/share/zsh",
	"var/lib/dpkg", "var/lib/apt", "var/cache/apt", "var/cache/debconf", "var/cache/ldconfig", "var/log/*",
	"etc/apt", "etc/dpkg", "etc/cron.daily", "etc/logrotate.d", "etc/alternatives",
	"usr/share/dpkg", "usr/lib/dpkg", "usr/share/debconf",
	"usr/bin/dpkg*", "usr/sbin/dpkg*", "usr/bin/update-alternatives", "usr/sbin/update-alternatives",
	"sbin/start-stop-daemon", "usr/sbin/start-stop-daemon",
	"usr/bin/apt*", "usr/lib/apt",
	"bin/tar", "usr/bin/tar", "usr/sbin/rmt*", "usr/sbin/tarcat", "etc/rmt",
	"etc/hostname", "etc/hosts", "etc/resolv.conf", "etc/fstab", "etc/passwd", "etc/group", "etc/shadow", "etc/gshadow",
	"dev/*", "tmp", "cache", "workspace", packagesFile,
}

// recipeShells are the shells no recipe image keeps unless its recipe
// says shell: true (recipeExclude).
var recipeShells = []string{"bin/sh", "bin/dash", "bin/bash", "bin/rbash", "usr/bin/sh", "usr/bin/dash", "usr/bin/bash", "usr/bin/rbash"}

// recipeExclude are the paths r's image leaves out: the base ones, the
// shells unless r keeps one, and r's own.
func recipeExclude(r Recipe) []string {
	patterns := append([]string{}, recipeBaseExclude...)
	if !r.Shell {
		patterns = append(patterns, recipeShells...)
	}
	return append(patterns, r.Exclude...)
}

// recipeKeep are paths kept although an exclusion matches them.
var recipeKeep = []string{"usr/share/doc/*/copyright"}

// excluded reports whether name (clean, relative) or a directory above
// it matches one of patterns, and no keep pattern matches name.
func excluded(name string, patterns []string) bool {
	for _, k := range recipeKeep {
		if ok, _ := path.Match(k, name); ok {
			return false
		}
	}
	for p := name; p != "." && p != "/" && p != ""; p = path.Dir(p) {
		for _, x := range patterns {
			if ok, _ := path.Match(x, p); ok {
				return true
			}
		}
	}
	return false
}

// writeLayer copies the tar stream of a root filesystem into dir/layer.tar
// without the excluded paths, in a canonical form, and adds the sandbox
// account, /tmp, /cache, /workspace and /etc/sandgate-release.
func writeLayer(in io.Reader, r Recipe, epoch int64, dir string) (builtLayer, error) {
	f, err := os.Create(path.Join(dir, "layer.tar"))
	if err != nil {
		return builtLayer{}, err
	}
	defer f.Close()
	h := sha256.New()
	bw := bufio.NewWriterSize(io.MultiWriter(f, h), 1<<20)
	tw := tar.NewWriter(bw)
	mtime := time.Unix(epoch, 0).UTC()
	patterns := recipeExclude(r)
	var packages []sandgate.Package
	seenEtc := false
	tr := tar.NewReader(in)
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return builtLayer{}, fmt.Errorf("read root filesystem: %w", err)
		}
		name := strings.TrimPrefix(path.Clean("/"+hdr.Name), "/")
		if name == "" {
			continue
		}
		if name == packagesFile {
			data, err := io.ReadAll(io.LimitReader(tr, maxPackages*5*maxPackageField))
			if err != nil {
				return builtLayer{}, err
			}
			if packages, err = parsePackages(data); err != nil {
				return builtLayer{}, fmt.Errorf("mmdebstrap's extract hook: %w", err)
			}
			continue
		}
		if excluded(name, patterns) {
			continue
		}
		out, err := layerHeader(hdr, name, mtime, patterns)
		if err != nil {
			return builtLayer{}, err
		}
		if out == nil {
			continue // device nodes, FIFOs: the runtime makes /dev
		}
		if out.Typeflag == tar.TypeDir && name == "etc" {
			seenEtc = true
		}
		if err := tw.WriteHeader(out); err != nil {
			return builtLayer{}, err
		}
		if out.Typeflag == tar.TypeReg {
			if _, err := io.Copy(tw, tr); err != nil {
				return builtLayer{}, fmt.Errorf("copy %s: %w", name, err)
			}
		}
	}
	if len(packages) == 0 {
		return builtLayer{}, fmt.Errorf("mmdebstrap's extract hook listed no packages")
	}
	if err := addAccounts(tw, r, packages, mtime, seenEtc); err != nil {
		return builtLayer{}, err
	}
	if err := tw.Close(); err != nil {
		return builtLayer{}, err
	}
	if err := bw.Flush(); err != nil {
		return builtLayer{}, err
	}
	st, err := f.Stat()
	if err != nil {
		return builtLayer{}, err
	}
	if err := f.Close(); err != nil {
		return builtLayer{}, err
	}
	return builtLayer{file: f.Name(), size: st.Size(), diffID: digestOf(h), packages: packages}, nil
}

func digestOf(h hash.Hash) digest.Digest {
	return digest.NewDigestFromEncoded(digest.SHA256, hex.EncodeToString(h.Sum(nil)))
}

// layerHeader is the canonical header of a root filesystem's entry name
// in the layer: times clamped to mtime, setuid and setgid cleared, only
// extended attributes kept of the PAX records; nil for an entry the
// layer leaves out.
func layerHeader(hdr *tar.Header, name string, mtime time.Time, patterns []string) (*tar.Header, error) {
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeDir, tar.TypeSymlink, tar.TypeLink:
	default:
		return nil, nil
	}
	out := &tar.Header{
		Typeflag: hdr.Typeflag, Name: name, Mode: hdr.Mode &^ 0o6000,
		Uid: hdr.Uid, Gid: hdr.Gid, Size: hdr.Size, ModTime: hdr.ModTime.UTC().Truncate(time.Second),
		Format: tar.FormatPAX,
	}
	if out.ModTime.After(mtime) {
		out.ModTime = mtime
	}
	switch hdr.Typeflag {
	case tar.TypeDir:
		out.Name += "/"
	case tar.TypeSymlink:
		out.Linkname = hdr.Linkname
	case tar.TypeLink:
		target := strings.TrimPrefix(path.Clean("/"+hdr.Linkname), "/")
		if excluded(target, patterns) {
			// The link's target is gone: keep the content under this name.
			return nil, fmt.Errorf("hard link %s names %s, which is excluded: exclude both or neither", name, target)
		}
		out.Linkname, out.Size = target, 0
	}
	for k, v := range hdr.PAXRecords {
		if strings.HasPrefix(k, "SCHILY.xattr.") {
			if out.PAXRecords == nil {
				out.PAXRecords = map[string]string{}
			}
			out.PAXRecords[k] = v
		}
	}
	return out, nil
}

// addAccounts adds what every recipe image has besides its packages: the
// sandbox account alone in its own group, /etc/sandgate-release, dpkg's
// status file listing the packages (packages.go), /tmp, /cache and
// /workspace (and /etc, when no package made it).
func addAccounts(tw *tar.Writer, r Recipe, packages []sandgate.Package, mtime time.Time, seenEtc bool) error {
	passwd := fmt.Sprintf("root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:%d:%d:sandgate sandbox:/workspace:/usr/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n", SandboxUID, SandboxUID)
	group := fmt.Sprintf("root:x:0:\nsandbox:x:%d:\nnogroup:x:65534:\n", SandboxUID)
	release := fmt.Sprintf("recipe=%s\nrecipe_sha256=%s\nimage=%s\nsuite=%s\npackages=%s\n", r.Name, r.Digest, r.Image, r.Suite, strings.Join(packageVersions(packages), " "))
	add := func(h *tar.Header, body string) error {
		h.ModTime, h.Format, h.Size = mtime, tar.FormatPAX, int64(len(body))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		_, err := io.WriteString(tw, body)
		return err
	}
	var added []*tar.Header
	if !seenEtc {
		added = append(added, &tar.Header{Typeflag: tar.TypeDir, Name: "etc/", Mode: 0o755})
	}
	bodies := map[string]string{"etc/passwd": passwd, "etc/group": group, "etc/sandgate-release": release, "var/lib/dpkg/status": dpkgStatus(packages)}
	added = append(added,
		&tar.Header{Typeflag: tar.TypeReg, Name: "etc/passwd", Mode: 0o644},
		&tar.Header{Typeflag: tar.TypeReg, Name: "etc/group", Mode: 0o644},
		&tar.Header{Typeflag: tar.TypeReg, Name: "etc/sandgate-release", Mode: 0o644},
		&tar.Header{Typeflag: tar.TypeDir, Name: "var/lib/dpkg/", Mode: 0o755},
		&tar.Header{Typeflag: tar.TypeReg, Name: "var/lib/dpkg/status", Mode: 0o644},
		&tar.Header{Typeflag: tar.TypeDir, Name: "tmp/", Mode: 0o1777},
		// A cache volume takes the mode of the directory it is first
		// mounted on: /cache is for every user, like /tmp.
		&tar.Header{Typeflag: tar.TypeDir, Name: "cache/", Mode: 0o1777},
		&tar.Header{Typeflag: tar.TypeDir, Name: "workspace/", Mode: 0o755, Uid: SandboxUID, Gid: SandboxUID},
	)
	for _, hd := range added {
		if err := add(hd, bodies[hd.Name]); err != nil {
			return err
		}
	}
	return nil
}
