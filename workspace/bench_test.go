package workspace

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/sandgate/sandgate"
)

// benchTree is 10 MB in 100 files of 100,000 bytes in 10 directories,
// half random (incompressible) and half text.
func benchTree() []ent {
	rng := rand.New(rand.NewPCG(1, 2))
	var ents []ent
	for i := range 100 {
		b := make([]byte, 100_000)
		if i%2 == 0 {
			for j := range b {
				b[j] = byte(rng.Uint32())
			}
		} else {
			for j := range b {
				b[j] = "abcdefgh \n"[rng.IntN(10)]
			}
		}
		ents = append(ents, ent{name: fmt.Sprintf("d%d/f%d", i%10, i), body: string(b)})
	}
	return ents
}

// BenchmarkUnpack10MB measures Unpack of a 10 MB tree (check pass and
// write pass) from each format into a fresh directory.
func BenchmarkUnpack10MB(b *testing.B) {
	ents := benchTree()
	for _, f := range formats {
		b.Run(f.name, func(b *testing.B) {
			archive := f.build(b, ents...)
			parent := b.TempDir()
			b.SetBytes(10_000_000)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				dir := filepath.Join(parent, fmt.Sprint(i))
				os.Mkdir(dir, 0o755)
				dst, _ := os.OpenRoot(dir)
				if _, err := Unpack(b.Context(), bytes.NewReader(archive), int64(len(archive)), dst, Owner{-1, -1}, Limits{}); err != nil {
					b.Fatal(err)
				}
				dst.Close()
				b.StopTimer()
				os.RemoveAll(dir)
				b.StartTimer()
			}
		})
	}
}

// BenchmarkCollect10MB measures Collect of the same tree with a put that
// hashes, as a content-addressed store would.
func BenchmarkCollect10MB(b *testing.B) {
	src, _ := openRoot(b)
	archive := tarOf(b, benchTree()...)
	if _, err := Unpack(b.Context(), bytes.NewReader(archive), int64(len(archive)), src, Owner{-1, -1}, Limits{}); err != nil {
		b.Fatal(err)
	}
	put := func(a sandgate.Artifact, r io.Reader) (string, error) {
		h := sha256.New()
		_, err := io.Copy(h, r)
		return hex.EncodeToString(h.Sum(nil)), err
	}
	b.SetBytes(10_000_000)
	b.ReportAllocs()
	for b.Loop() {
		c, err := Collect(b.Context(), src, []string{"**"}, 20<<20, put)
		if err != nil || len(c.Files) != 100 {
			b.Fatal(len(c.Files), err)
		}
	}
}
