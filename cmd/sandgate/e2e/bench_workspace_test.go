package e2e

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"io"
	"math/rand"
	"slices"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/client"
)

// BenchmarkWorkspaceRoundTrip measures what a 10 MB workspace in and a
// 10 MB artifact out add to a run, end to end through a real `sandgate
// serve` process: the same command submitted with ?wait, alternately
// without and with them (the artifact is a copy of the workspace's file,
// so both directions move 10 MB of incompressible bytes), plus the
// artifact's download. It reports the medians of each, their difference
// and ratio, and the gateway's peak RSS while the workspace runs went on.
func BenchmarkWorkspaceRoundTrip(b *testing.B) {
	p := startProcess(b, processEnv(b))
	data := make([]byte, 10<<20)
	rand.New(rand.NewSource(1)).Read(data)
	var arch bytes.Buffer
	gz := gzip.NewWriter(&arch)
	tw := tar.NewWriter(gz)
	tw.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: "in.bin", Size: int64(len(data)), Mode: 0o644})
	tw.Write(data)
	tw.Close()
	gz.Close()
	archive := arch.Bytes()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()

	plain := sandgate.RunSpec{Command: []string{"sh", "-c", "true"}}
	withWS := sandgate.RunSpec{Command: []string{"sh", "-c", "cp in.bin out.bin"}, Artifacts: []string{"out.bin"}}
	const rounds = 15
	var bare, ws, dl []time.Duration
	idle, err := processRSS(p.Pid())
	if err != nil {
		b.Fatal(err)
	}
	peak := sampleRSS(p.Pid())
	for i := range rounds + 1 {
		t0 := time.Now()
		if _, err := p.Client.Submit(ctx, plain, client.SubmitOptions{Wait: time.Minute}); err != nil {
			b.Fatal(err)
		}
		t1 := time.Now()
		run, err := p.Client.Submit(ctx, withWS, client.SubmitOptions{Wait: time.Minute, Workspace: bytes.NewReader(archive)})
		if err != nil {
			b.Fatal(err)
		}
		t2 := time.Now()
		if run.Artifacts == nil || run.Artifacts.Bytes != int64(len(data)) {
			b.Fatalf("artifacts %+v", run.Artifacts)
		}
		if _, err := p.Client.Artifact(ctx, run.ID, "out.bin", io.Discard); err != nil {
			b.Fatal(err)
		}
		t3 := time.Now()
		if i == 0 {
			continue // warm-up
		}
		bare, ws, dl = append(bare, t1.Sub(t0)), append(ws, t2.Sub(t1)), append(dl, t3.Sub(t2))
	}
	rss := peak.end()
	med := func(d []time.Duration) time.Duration {
		s := slices.Clone(d)
		slices.Sort(s)
		return s[len(s)/2]
	}
	mb, mw, md := med(bare), med(ws), med(dl)
	b.Logf("%d rounds: run without %v, with a 10 MB workspace in and a 10 MB artifact out %v (+%v, %.2fx), artifact download %v; gateway RSS %.0f MiB idle, %.0f MiB at the peak",
		rounds, mb.Round(time.Millisecond), mw.Round(time.Millisecond), (mw - mb).Round(time.Millisecond), float64(mw)/float64(mb), md.Round(time.Millisecond), float64(idle)/1024, rss)
	b.ReportMetric(float64(mb.Milliseconds()), "bare-p50-ms")
	b.ReportMetric(float64(mw.Milliseconds()), "workspace-p50-ms")
	b.ReportMetric(float64((mw - mb).Milliseconds()), "added-p50-ms")
	b.ReportMetric(float64(mw)/float64(mb), "ratio")
	b.ReportMetric(float64(md.Milliseconds()), "download-p50-ms")
	b.ReportMetric(float64(idle)/1024, "idle-rss-MiB")
	b.ReportMetric(rss, "peak-rss-MiB")
}
