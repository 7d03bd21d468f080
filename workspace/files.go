package workspace

import (
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io/fs"
	"os"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/sandgate/sandgate"
)

// File is one inline file of a run spec's "files".
type File struct {
	// Path is relative to the workdir, under CheckRelPath's rules.
	Path string `json:"path"`
	// Content is the file's content, as Encoding says.
	Content string `json:"content"`
	// Encoding is "utf8" (the default when empty) or "base64" (standard
	// alphabet, padded).
	Encoding string `json:"encoding,omitempty"`
	// Mode is the permission bits, 0 to 0777 (default 0644); the file gets
	// 0755 when any execute bit is set, else 0644.
	Mode *int `json:"mode,omitempty"`
}

// DecodeFile checks files[index] and returns its content and the mode it
// is written with. Errors are INVALID-REQUEST naming files[i].path,
// files[i].encoding, files[i].content or files[i].mode.
func DecodeFile(f File, index int) ([]byte, os.FileMode, error) {
	return decodeFile(f, index, -1)
}

// decodeFile is DecodeFile refusing content over budget bytes (when
// budget >= 0) before decoding it.
func decodeFile(f File, i int, budget int64) ([]byte, os.FileMode, error) {
	if _, err := CheckRelPath(fmt.Sprintf("files[%d].path", i), f.Path); err != nil {
		return nil, 0, err
	}
	perm := fs.FileMode(0o644)
	if f.Mode != nil {
		if *f.Mode < 0 || *f.Mode > 0o777 {
			return nil, 0, sandgate.FieldError(fmt.Sprintf("files[%d].mode", i),
				"mode must be between 0 and 0777 (octal; 511 in JSON): setuid, setgid and sticky bits are refused")
		}
		perm = fs.FileMode(*f.Mode)
	}
	contentField := fmt.Sprintf("files[%d].content", i)
	var data []byte
	switch f.Encoding {
	case "", "utf8":
		if budget >= 0 && int64(len(f.Content)) > budget {
			return nil, 0, sandgate.FieldError(contentField, "the files hold more than the workspace limit")
		}
		if !utf8.ValidString(f.Content) {
			return nil, 0, sandgate.FieldError(contentField, "content is not valid UTF-8: send it with encoding base64")
		}
		data = []byte(f.Content)
	case "base64":
		if budget >= 0 && int64(base64.StdEncoding.DecodedLen(len(f.Content))) > budget+2 {
			return nil, 0, sandgate.FieldError(contentField, "the files hold more than the workspace limit")
		}
		var err error
		data, err = base64.StdEncoding.DecodeString(f.Content)
		if err != nil {
			return nil, 0, sandgate.FieldError(contentField, "content is not valid base64 (standard alphabet, padded)")
		}
		if budget >= 0 && int64(len(data)) > budget {
			return nil, 0, sandgate.FieldError(contentField, "the files hold more than the workspace limit")
		}
	default:
		return nil, 0, sandgate.FieldError(fmt.Sprintf("files[%d].encoding", i), "encoding must be utf8 or base64")
	}
	return data, fileMode(perm), nil
}

// WriteFiles writes inline files under dst, owned by owner. It is
// WriteFilesWith without Replace.
func WriteFiles(dst *os.Root, files []File, owner Owner, lim Limits) (Manifest, error) {
	return WriteFilesWith(dst, files, Options{Owner: owner, Limits: lim})
}

// WriteFilesWith checks every file (paths as CheckRelPath, no duplicates,
// no file as another's parent, at most lim.MaxEntries files and
// lim.MaxBytes bytes) before writing any, then writes them as UnpackWith
// writes an archive's files, making parent directories as needed, and
// removes what it made on any error. The manifest's Format is "files".
func WriteFilesWith(dst *os.Root, files []File, opt Options) (Manifest, error) {
	lim := opt.Limits.withDefaults()
	if len(files) > lim.MaxEntries {
		return Manifest{}, sandgate.FieldError("files", "more than %d files", lim.MaxEntries)
	}
	m := Manifest{Format: FormatFiles}
	entries := make([]*entry, len(files))
	data := make([][]byte, len(files))
	seen := newPathSet()
	for i, f := range files {
		b, mode, err := decodeFile(f, i, lim.MaxBytes-m.UnpackedBytes)
		if err != nil {
			return Manifest{}, err
		}
		fieldName := fmt.Sprintf("files[%d].path", i)
		p, _ := cleanRel(f.Path)
		if msg := seen.add(p, false); msg != "" {
			return Manifest{}, sandgate.FieldError(fieldName, "%s", msg)
		}
		data[i] = b
		entries[i] = &entry{field: fieldName, raw: f.Path, path: p, size: int64(len(b)), perm: mode}
		m.UnpackedBytes += int64(len(b))
		m.Entries++
		m.Files++
	}
	m.SHA256 = listingHash(entries, data)

	w := newWriter(dst, opt)
	defer w.close()
	err := func() error {
		for i, e := range entries {
			out, err := w.file(e)
			if err != nil {
				return err
			}
			if _, err := out.Write(data[i]); err != nil {
				return fsError(e.field, e.raw, err)
			}
			if err := w.fileDone(e); err != nil {
				return err
			}
		}
		return w.commit()
	}()
	if err != nil {
		return Manifest{}, w.abort(err)
	}
	return m, nil
}

// listingHash is the SHA-256 of "<sha256 of content> <octal mode> <path>\n"
// per file in path order: what sha256sum would print, plus the mode.
func listingHash(entries []*entry, data [][]byte) string {
	order := make([]int, len(entries))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return strings.Compare(entries[a].path, entries[b].path) })
	h := sha256.New()
	for _, i := range order {
		fmt.Fprintf(h, "%x %04o %s\n", sha256.Sum256(data[i]), uint32(entries[i].perm), entries[i].path)
	}
	return hex.EncodeToString(h.Sum(nil))
}
