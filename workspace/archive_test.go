package workspace

import (
	"archive/tar"
	"archive/zip"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash/crc32"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
)

// formats are the three archive builders every hostile case is tried with.
var formats = []struct {
	name  string
	build func(testing.TB, ...ent) []byte
}{
	{"tar", tarOf},
	{"tar.gz", func(t testing.TB, e ...ent) []byte { return gzipOf(t, tarOf(t, e...)) }},
	{"zip", zipOf},
}

// TestInspectRefusesHostileEntries builds each hostile archive as tar,
// tar.gz and zip (where the format can carry it) and expects Inspect and
// Unpack to refuse it naming the entry, with nothing written.
func TestInspectRefusesHostileEntries(t *testing.T) {
	deep := strings.Repeat("d/", 64) + "f"
	cases := []struct {
		name string
		ents []ent
		lim  Limits
		want string
		only string // a format that alone can carry the case
		skip string // a format that cannot
	}{
		{name: "absolute", ents: []ent{{name: "/etc/passwd", body: "x"}}, want: `entry "/etc/passwd": path is absolute`},
		{name: "dotdot", ents: []ent{{name: "../x", body: "x"}}, want: `entry "../x": path escapes the workspace`},
		{name: "dotdot after cleaning", ents: []ent{{name: "a/../../x", body: "x"}}, want: `entry "a/../../x": path escapes the workspace`},
		{name: "dotdot dir", ents: []ent{{name: "../", typ: tar.TypeDir}}, want: "path escapes the workspace"},
		{name: "empty name", ents: []ent{{name: "", body: "x"}}, want: "path is empty", skip: "tar"},
		{name: "NUL in name", ents: []ent{{name: "a\x00b", body: "x"}}, want: "NUL or control character", only: "zip"},
		{name: "newline in name", ents: []ent{{name: "a\nb", body: "x"}}, want: "NUL or control character"},
		{name: "invalid UTF-8", ents: []ent{{name: "a\xffb", body: "x"}}, want: "not valid UTF-8"},
		{name: "backslash", ents: []ent{{name: `..\..\evil`, body: "x"}}, want: "backslash"},
		{name: "drive letter", ents: []ent{{name: "C:/Windows/x", body: "x"}}, want: "drive letter"},
		{name: "drive relative", ents: []ent{{name: "c:x", body: "x"}}, want: "drive letter"},
		{name: "name over 4096 bytes", ents: []ent{{name: strings.Repeat("a/", 2100) + "f", body: "x"}}, want: "longer than 4096 bytes"},
		{name: "component over 255 bytes", ents: []ent{{name: strings.Repeat("a", 256), body: "x"}}, want: "longer than 255 bytes"},
		{name: "deeper than 64", ents: []ent{{name: deep, body: "x"}}, want: "deeper than 64"},
		{name: "symlink", ents: []ent{{name: "link", typ: tar.TypeSymlink, link: "/etc/passwd"}}, want: `entry "link": symbolic links are refused`},
		{name: "symlink inside", ents: []ent{{name: "link", typ: tar.TypeSymlink, link: "a"}}, want: "symbolic links are refused"},
		{name: "hard link", ents: []ent{{name: "f", body: "x"}, {name: "link", typ: tar.TypeLink, link: "f"}}, want: `entry "link": hard links are refused`, only: "tar"},
		{name: "char device", ents: []ent{{name: "null", typ: tar.TypeChar}}, want: "device nodes are refused"},
		{name: "block device", ents: []ent{{name: "sda", typ: tar.TypeBlock}}, want: "device nodes are refused"},
		{name: "fifo", ents: []ent{{name: "pipe", typ: tar.TypeFifo}}, want: `entry "pipe": FIFOs are refused`},
		{name: "socket", ents: []ent{{name: "sock", typ: 's'}}, want: "sockets are refused", only: "zip"},
		{name: "setuid", ents: []ent{{name: "su", mode: 0o4755, body: "x"}}, want: `entry "su": setuid, setgid and sticky bits are refused`},
		{name: "setgid", ents: []ent{{name: "sg", mode: 0o2755, body: "x"}}, want: "setuid, setgid and sticky"},
		{name: "sticky dir", ents: []ent{{name: "tmp/", typ: tar.TypeDir, mode: 0o1777}}, want: "setuid, setgid and sticky"},
		{name: "duplicate file", ents: []ent{{name: "a", body: "1"}, {name: "a", body: "2"}}, want: `entry "a": the path appears more than once`},
		{name: "duplicate after cleaning", ents: []ent{{name: "a", body: "1"}, {name: "./x/../a", body: "2"}}, want: "appears more than once"},
		{name: "file then dir", ents: []ent{{name: "a", body: "1"}, {name: "a/", typ: tar.TypeDir}}, want: "appears more than once"},
		{name: "dir then file", ents: []ent{{name: "a/", typ: tar.TypeDir}, {name: "a", body: "1"}}, want: "appears more than once"},
		{name: "file as parent", ents: []ent{{name: "a", body: "1"}, {name: "a/b", body: "2"}}, want: `entry "a/b": its parent "a" is a file in the archive`},
		{name: "parent then file", ents: []ent{{name: "a/b/c", body: "1"}, {name: "a/b", body: "2"}}, want: `entry "a/b": the path is a file here but a directory of an earlier entry`},
		{name: "file as workspace", ents: []ent{{name: "./", typ: tar.TypeDir}, {name: ".", body: "x"}}, want: "appears more than once"},
		{name: "too many entries", ents: []ent{{name: "a", body: "1"}, {name: "b", body: "2"}, {name: "c/", typ: tar.TypeDir}, {name: "d", body: "4"}}, lim: Limits{MaxEntries: 3}, want: "more than 3 entries"},
		{name: "file over the byte limit", ents: []ent{{name: "big", body: strings.Repeat("x", 11)}}, lim: Limits{MaxBytes: 10}, want: `entry "big": the file is larger than the workspace limit of 10 bytes`},
		{name: "files over the byte limit", ents: []ent{{name: "a", body: "123456"}, {name: "b", body: "123456"}}, lim: Limits{MaxBytes: 10}, want: `entry "b": the archive unpacks to more than 10 bytes`},
	}
	for _, f := range formats {
		for _, c := range cases {
			carried := c.only == "" || strings.HasPrefix(f.name, c.only)
			if !carried || c.skip == f.name {
				continue
			}
			t.Run(f.name+"/"+c.name, func(t *testing.T) {
				b := f.build(t, c.ents...)
				_, err := Inspect(bytes.NewReader(b), int64(len(b)), c.lim)
				wantRefused(t, err, c.want)
				dst, dir := openRoot(t)
				_, err = Unpack(t.Context(), bytes.NewReader(b), int64(len(b)), dst, Owner{-1, -1}, c.lim)
				wantRefused(t, err, c.want)
				if got := listTree(t, dir); len(got) != 0 {
					t.Errorf("Unpack left %q behind", got)
				}
			})
		}
	}
}

// TestInspectRefusesBadArchives covers what is wrong with the archive as
// a whole rather than with one entry.
func TestInspectRefusesBadArchives(t *testing.T) {
	good := tarOf(t, ent{name: "a.txt", body: strings.Repeat("hello ", 200)})
	goodGz := gzipOf(t, good)
	goodZip := zipOf(t, ent{name: "a.txt", body: strings.Repeat("hello ", 200)})
	cases := []struct {
		name string
		b    []byte
		lim  Limits
		want string
	}{
		{"empty", nil, Limits{}, "the archive is empty"},
		{"text", []byte("just some text, not an archive at all"), Limits{}, "unsupported archive format: send tar, tar.gz or zip"},
		{"bzip2", []byte("BZh91AY&SY....."), Limits{}, "unsupported archive format (bzip2)"},
		{"xz", []byte("\xfd7zXZ\x00\x00\x04"), Limits{}, "(xz)"},
		{"v7 tar without ustar magic", v7Tar(good), Limits{}, "unsupported archive format"},
		{"gzip of text", gzipOf(t, []byte(strings.Repeat("not a tar ", 100))), Limits{}, "the gzip stream does not hold a tar archive"},
		{"tar with garbage after its end", append(bytes.Clone(good), []byte("GARBAGE")...), Limits{}, "data after its end"},
		{"tar.gz with garbage inside after the tar", gzipOf(t, append(bytes.Clone(good), []byte("GARBAGE")...)), Limits{}, "data after its end"},
		{"tar.gz with garbage after the gzip stream", append(bytes.Clone(goodGz), []byte("GARBAGE")...), Limits{}, "the archive is corrupt"},
		{"tar.gz truncated", goodGz[:len(goodGz)-10], Limits{}, "the archive is corrupt"},
		{"tar.gz bad checksum", flip(goodGz, len(goodGz)-6), Limits{}, "the archive is corrupt"},
		{"tar.gz bad deflate data", flip(goodGz, 20), Limits{}, "the archive is corrupt"},
		{"tar truncated in content", good[:700], Limits{}, `the archive is corrupt at entry "a.txt": it ends too early`},
		{"tar header size larger than content", lieTarSize(good, 1<<20), Limits{}, "the archive is corrupt"},
		{"tar header size smaller than content", lieTarSize(good, 5), Limits{}, "the archive is corrupt"},
		{"tar header size over the limit", lieTarSize(good, 1<<40), Limits{MaxBytes: 1 << 20}, "larger than the workspace limit"},
		{"zip with garbage after its end", append(bytes.Clone(goodZip), []byte("GARBAGE")...), Limits{}, "data after its end"},
		{"zip truncated", goodZip[:len(goodZip)-30], Limits{}, "the archive is corrupt"},
		{"zip bad checksum", zipBadCRC(t), Limits{}, "checksum mismatch"},
		{"zip size lies small", zipRaw(t, "a.txt", zip.Store, 0, 5, []byte(strings.Repeat("x", 100))), Limits{}, "the archive is corrupt"},
		{"zip size lies large", zipRaw(t, "a.txt", zip.Store, 0, 1<<40, []byte("x")), Limits{MaxBytes: 1 << 20}, "larger than the workspace limit"},
		{"zip encrypted", zipRaw(t, "secret.txt", zip.Deflate, 0x1, 3, []byte("xyz")), Limits{}, `entry "secret.txt": encrypted entries are refused`},
		{"zip bzip2 method", zipRaw(t, "a.bz2", 12, 0, 3, []byte("xyz")), Limits{}, "compression method 12 is not supported"},
		{"zip lzma method", zipRaw(t, "a.lz", 14, 0, 3, []byte("xyz")), Limits{}, "compression method 14 is not supported"},
		{"zip directory claims too many entries", zipManyRecords(goodZip, 65000), Limits{MaxEntries: 100}, "more than 100 entries"},
		{"tar directory with content", tarDirWithContent(t), Limits{}, "a directory entry has content"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Inspect(bytes.NewReader(c.b), int64(len(c.b)), c.lim)
			wantRefused(t, err, c.want)
			dst, dir := openRoot(t)
			_, err = Unpack(t.Context(), bytes.NewReader(c.b), int64(len(c.b)), dst, Owner{-1, -1}, c.lim)
			wantRefused(t, err, c.want)
			if got := listTree(t, dir); len(got) != 0 {
				t.Errorf("Unpack left %q behind", got)
			}
		})
	}
}

func flip(b []byte, i int) []byte {
	b = bytes.Clone(b)
	b[i] ^= 0x55
	return b
}

// v7Tar blanks the ustar magic of every header, as a pre-POSIX tar has.
func v7Tar(b []byte) []byte {
	b = bytes.Clone(b)
	for off := 0; off+512 <= len(b); off += 512 {
		if string(b[off+257:off+262]) == "ustar" {
			copy(b[off+257:off+265], make([]byte, 8))
		}
	}
	return b
}

// lieTarSize rewrites the size field of the tar's first regular header
// and fixes its checksum: a header that lies about its content.
func lieTarSize(b []byte, size int64) []byte {
	b = bytes.Clone(b)
	for off := 0; off+512 <= len(b); off += 512 {
		h := b[off : off+512]
		if h[156] != tar.TypeReg || string(h[257:262]) != "ustar" {
			continue
		}
		field := h[124:136]
		clear(field)
		if size < 1<<33 {
			copy(field, []byte(strconv.FormatInt(size, 8)))
		} else { // base-256 for sizes octal cannot hold
			field[0] = 0x80
			binary.BigEndian.PutUint64(field[4:], uint64(size))
		}
		copy(h[148:156], []byte("        "))
		var sum int64
		for _, c := range h {
			sum += int64(c)
		}
		copy(h[148:156], []byte(strconv.FormatInt(sum, 8)+"\x00 "))
		return b
	}
	panic("no regular header")
}

func tarDirWithContent(t testing.TB) []byte {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	tw.WriteHeader(&tar.Header{Name: "d/", Typeflag: tar.TypeDir, Mode: 0o755, Size: 3})
	tw.Write([]byte("abc"))
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// zipRaw writes one entry with the given method, flags and claimed size
// around raw data, without compressing it.
func zipRaw(t testing.TB, name string, method uint16, flags uint16, claimed uint64, data []byte) []byte {
	t.Helper()
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	fh := &zip.FileHeader{Name: name, Method: method, Flags: flags, CRC32: crc32.ChecksumIEEE(data),
		CompressedSize64: uint64(len(data)), UncompressedSize64: claimed}
	w, err := zw.CreateRaw(fh)
	if err != nil {
		t.Fatal(err)
	}
	w.Write(data)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func zipBadCRC(t testing.TB) []byte {
	data := []byte(strings.Repeat("checksum ", 50))
	var buf bytes.Buffer
	zw := zip.NewWriter(&buf)
	w, _ := zw.CreateRaw(&zip.FileHeader{Name: "a.txt", Method: zip.Store, CRC32: crc32.ChecksumIEEE(data) ^ 1,
		CompressedSize64: uint64(len(data)), UncompressedSize64: uint64(len(data))})
	w.Write(data)
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// zipManyRecords makes the end of central directory claim n records.
func zipManyRecords(b []byte, n uint16) []byte {
	b = bytes.Clone(b)
	at := bytes.LastIndex(b, []byte("PK\x05\x06"))
	binary.LittleEndian.PutUint16(b[at+8:], n)
	binary.LittleEndian.PutUint16(b[at+10:], n)
	return b
}

// TestInspectGzipBomb streams a tar.gz holding 1 GiB of zeros (1024 files
// of 1 MiB, each header honest) to a file, and expects the byte cap to
// refuse it after reading just past the cap, with memory bounded: no
// more than a few MiB allocated however much was decompressed.
func TestInspectGzipBomb(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a 1 GiB gzip stream")
	}
	path := filepath.Join(t.TempDir(), "bomb.tar.gz")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	zw, _ := gzip.NewWriterLevel(f, gzip.BestSpeed)
	tw := tar.NewWriter(zw)
	zeros := make([]byte, 1<<20)
	for i := range 1024 {
		tw.WriteHeader(&tar.Header{Name: "zero" + strconv.Itoa(i), Mode: 0o644, Size: int64(len(zeros)), Typeflag: tar.TypeReg})
		tw.Write(zeros)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	fi, _ := f.Stat()
	t.Logf("1 GiB of zeros in %d bytes of tar.gz", fi.Size())

	for _, c := range []struct {
		name string
		lim  Limits
		want string
	}{
		{"bytes", Limits{MaxBytes: 64 << 20}, `entry "zero64": the archive unpacks to more than 67108864 bytes`},
		{"entries", Limits{MaxEntries: 100, MaxBytes: 2 << 30}, `entry "zero100": the archive has more than 100 entries`},
	} {
		t.Run(c.name, func(t *testing.T) {
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := Inspect(f, fi.Size(), c.lim)
			runtime.ReadMemStats(&after)
			wantRefused(t, err, c.want)
			if alloc := after.TotalAlloc - before.TotalAlloc; alloc > 8<<20 {
				t.Errorf("Inspect allocated %d bytes for a bomb; want memory bounded by its buffers", alloc)
			}
		})
	}
}

// TestInspectZeroPaddingBomb: a tar whose end is followed, inside the
// gzip stream, by endless zero padding is stopped by the stream bound.
func TestInspectZeroPaddingBomb(t *testing.T) {
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	zw.Write(tarOf(t, ent{name: "a", body: "x"}))
	zeros := make([]byte, 1<<20)
	for range 200 {
		zw.Write(zeros)
	}
	zw.Close()
	_, err := Inspect(bytes.NewReader(buf.Bytes()), int64(buf.Len()), Limits{MaxEntries: 10, MaxBytes: 1 << 20})
	wantRefused(t, err, "stream is larger than its limits allow")
}

// TestInspectManifest checks the manifest of the same tree in each format.
func TestInspectManifest(t *testing.T) {
	ents := []ent{
		{name: "./", typ: tar.TypeDir},
		{name: "src/", typ: tar.TypeDir},
		{name: "src/main.py", body: "print('hi')\n"},
		{name: "run.sh", mode: 0o755, body: "#!/bin/sh\n"},
		{name: "empty", body: ""},
	}
	for _, f := range formats {
		t.Run(f.name, func(t *testing.T) {
			b := f.build(t, ents...)
			m, err := Inspect(bytes.NewReader(b), int64(len(b)), Limits{})
			if err != nil {
				t.Fatal(err)
			}
			sum := sha256.Sum256(b)
			want := Manifest{Format: f.name, SHA256: hex.EncodeToString(sum[:]), ArchiveBytes: int64(len(b)),
				Entries: 5, Files: 3, Dirs: 1, UnpackedBytes: 22}
			if m != want {
				t.Errorf("manifest = %+v; want %+v", m, want)
			}
		})
	}
}

// TestInspectPaddedTar accepts the zero padding tar(1) writes.
func TestInspectPaddedTar(t *testing.T) {
	b := tarOf(t, ent{name: "a", body: "x"})
	b = append(b, make([]byte, 10240-len(b)%10240)...)
	if _, err := Inspect(bytes.NewReader(b), int64(len(b)), Limits{}); err != nil {
		t.Fatal(err)
	}
	var empty [10240]byte
	m, err := Inspect(bytes.NewReader(empty[:]), int64(len(empty)), Limits{})
	if err != nil || m.Entries != 0 {
		t.Fatalf("empty tar: %+v, %v", m, err)
	}
}

func TestCheckRelPath(t *testing.T) {
	for _, c := range []struct{ in, want, err string }{
		{"a", "a", ""},
		{"./a/b/", "a/b", ""},
		{"a//b/../c", "a/c", ""},
		{"", "", "path is empty"},
		{".", "", "path names the workspace itself"},
		{"a/..", "", "path names the workspace itself"},
		{"..", "", "escapes"},
		{"/a", "", "absolute"},
		{"a\x00", "", "NUL"},
		{`a\b`, "", "backslash"},
		{"Z:a", "", "drive letter"},
	} {
		t.Run(c.in, func(t *testing.T) {
			got, err := CheckRelPath("files[0].path", c.in)
			if c.err != "" {
				wantCode(t, err, "SANDGATE-INVALID-REQUEST", "files[0].path", c.err)
				return
			}
			if err != nil || got != c.want {
				t.Fatalf("CheckRelPath(%q) = %q, %v; want %q", c.in, got, err, c.want)
			}
		})
	}
}

func TestCheckPattern(t *testing.T) {
	for _, c := range []struct{ in, err string }{
		{"out/*.txt", ""}, {"**/*.log", ""}, {"dist", ""}, {"./out/", ""}, {".", ""}, {"{a,b}/*", ""},
		{"", "empty"}, {"/etc/*", "absolute"}, {"../x", `".."`}, {"a/../../b", `".."`}, {"a/[", "not a valid glob"},
		{"a\x00", "control"}, {strings.Repeat("a", 2000), "longer"},
	} {
		t.Run(c.in, func(t *testing.T) {
			err := CheckPattern("artifacts[0]", c.in)
			if c.err == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			wantCode(t, err, "SANDGATE-INVALID-REQUEST", "artifacts[0]", c.err)
		})
	}
}
