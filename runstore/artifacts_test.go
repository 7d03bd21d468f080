package runstore

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"math/rand"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/audittest"
)

// TestBlobs stores blobs of every size around the chunk size, reads them
// back whole and by ranges, and stores the same bytes once however often
// (and however concurrently) they are put.
func TestBlobs(t *testing.T) {
	s := testStore(t, audittest.NewMigratedDatabase(t), nil)
	ctx := context.Background()
	rng := rand.New(rand.NewSource(1))
	for _, size := range []int{0, 1, chunkSize - 1, chunkSize, chunkSize + 1, 3*chunkSize + 17} {
		data := make([]byte, size)
		rng.Read(data)
		want := sha256.Sum256(data)
		sum, n, err := s.PutBlob(ctx, bytes.NewReader(data))
		if err != nil {
			t.Fatalf("PutBlob(%d bytes): %v", size, err)
		}
		if sum != hex.EncodeToString(want[:]) || n != int64(size) {
			t.Fatalf("PutBlob(%d bytes) = %s, %d", size, sum, n)
		}
		var whole bytes.Buffer
		if err := s.WriteBlob(ctx, sum, 0, -1, &whole); err != nil || !bytes.Equal(whole.Bytes(), data) {
			t.Fatalf("WriteBlob(whole) of %d bytes: %v, equal=%v", size, err, bytes.Equal(whole.Bytes(), data))
		}
		for _, r := range [][2]int{{0, 1}, {size / 2, size / 3}, {chunkSize - 3, 7}, {size - 1, 1}, {0, size}} {
			off, cnt := r[0], r[1]
			if off < 0 || cnt < 0 || off+cnt > size {
				continue
			}
			var part bytes.Buffer
			if err := s.WriteBlob(ctx, sum, int64(off), int64(cnt), &part); err != nil || !bytes.Equal(part.Bytes(), data[off:off+cnt]) {
				t.Errorf("WriteBlob(%d, %d) of %d bytes: %v", off, cnt, size, err)
			}
		}
		if err := s.WriteBlob(ctx, sum, int64(size), 1, io.Discard); !isCode(err, sandgate.CodeInvalidRequest) {
			t.Errorf("WriteBlob past the end = %v, want INVALID-REQUEST", err)
		}
	}
	if err := s.WriteBlob(ctx, hex.EncodeToString(make([]byte, 32)), 0, -1, io.Discard); !isCode(err, sandgate.CodeNotFound) {
		t.Errorf("WriteBlob(unknown) = %v, want NOT-FOUND", err)
	}

	// The same bytes, put eight times at once, are one blob and one set of
	// chunks; no upload is left behind.
	data := bytes.Repeat([]byte("sandgate"), chunkSize/4)
	var wg sync.WaitGroup
	sums := make([]string, 8)
	for i := range sums {
		wg.Add(1)
		go func() {
			defer wg.Done()
			sum, _, err := s.PutBlob(ctx, bytes.NewReader(data))
			if err != nil {
				t.Errorf("PutBlob: %v", err)
			}
			sums[i] = sum
		}()
	}
	wg.Wait()
	var blobs, chunks, uploads int64
	s.db.Raw("SELECT count(*) FROM blobs WHERE sha256 = ?", sums[0]).Scan(&blobs)
	s.db.Raw("SELECT count(*) FROM blob_chunks WHERE sha256 = ?", sums[0]).Scan(&chunks)
	s.db.Raw("SELECT count(*) FROM blob_chunks WHERE sha256 LIKE 'upload:%'").Scan(&uploads)
	if blobs != 1 || chunks != 2 || uploads != 0 {
		t.Errorf("after 8 puts of one content: %d blobs, %d chunks, %d upload chunks; want 1, 2, 0", blobs, chunks, uploads)
	}
	for _, sum := range sums[1:] {
		if sum != sums[0] {
			t.Errorf("digests differ: %s, %s", sum, sums[0])
		}
	}
}

// TestRunArtifacts saves a run's files and its summary and reads them
// back; saving again changes nothing.
func TestRunArtifacts(t *testing.T) {
	s := testStore(t, audittest.NewMigratedDatabase(t), nil)
	ctx := context.Background()
	run := testRun("r-art", time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	if err := s.CreateRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	a, _, err := s.PutBlob(ctx, bytes.NewReader([]byte("a")))
	if err != nil {
		t.Fatal(err)
	}
	files := []sandgate.Artifact{
		{Path: "out/b.txt", Size: 1, SHA256: a, Mode: 0o644},
		{Path: "a.txt", Size: 1, SHA256: a, Mode: 0o755},
	}
	for range 2 {
		if err := s.SaveArtifacts(ctx, run.ID, files); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.RunArtifacts(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	want := []sandgate.Artifact{files[1], files[0]}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("RunArtifacts (-want +got):\n%s", diff)
	}
	if got, err := s.RunArtifacts(ctx, "none"); err != nil || len(got) != 0 {
		t.Errorf("RunArtifacts(none) = %v, %v", got, err)
	}
	run.Artifacts = &sandgate.ArtifactSummary{Count: 2, Bytes: 2, Truncated: true, SkippedCount: 1}
	if err := s.UpdateRun(ctx, run); err != nil {
		t.Fatal(err)
	}
	back, err := s.GetRun(ctx, run.ID)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(run.Artifacts, back.Artifacts); diff != "" {
		t.Errorf("summary (-want +got):\n%s", diff)
	}
	list, _, err := s.ListRuns(ctx, sandgate.RunFilter{})
	if err != nil || len(list) != 1 || list[0].Artifacts == nil || list[0].Artifacts.Count != 2 {
		t.Errorf("ListRuns = %+v, %v", list, err)
	}
}
