package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/client"
)

// processRSS reads VmRSS (KiB) of a process.
func processRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			return strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		}
	}
	return 0, fmt.Errorf("no VmRSS for pid %d", pid)
}

// rssPeak samples a process's RSS every 10 ms until stopped and keeps the
// peak.
type rssPeak struct {
	peak atomic.Int64
	stop chan struct{}
	done chan struct{}
}

func sampleRSS(pid int) *rssPeak {
	p := &rssPeak{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			if v, err := processRSS(pid); err == nil && v > p.peak.Load() {
				p.peak.Store(v)
			}
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
		}
	}()
	return p
}

// end stops sampling and returns the peak in MiB.
func (p *rssPeak) end() float64 {
	close(p.stop)
	<-p.done
	return float64(p.peak.Load()) / 1024
}

// outputKinds are what a hostile run may print: control bytes, NULs,
// invalid UTF-8 and plain text.
var outputKinds = []struct{ name, command string }{
	{"ctrl-01", "head -c %d /dev/zero | tr '\\0' '\\1'"},
	{"nul", "head -c %d /dev/zero"},
	{"invalid-utf8", "head -c %d /dev/zero | tr '\\0' '\\377'"},
	{"text", "yes 'the quick brown fox jumps over the lazy dog <&>' | head -c %d"},
}

// BenchmarkOutputMemory measures the gateway's resident memory (a real
// `sandgate serve` process) while 16 runs each print the largest output
// the default policy admits (output_limit_bytes 16 MiB): four each of
// \x01 bytes, NULs, invalid UTF-8 and plain text; then while all 16 are
// read back at once (GET /v1/runs/{id}) and listed with their output.
// SANDGATE_BENCH_BINARY runs it against another build, and
// SANDGATE_BENCH_OUTPUT_BYTES sets the size.
func BenchmarkOutputMemory(b *testing.B) {
	size := int64(16 << 20)
	if v := os.Getenv("SANDGATE_BENCH_OUTPUT_BYTES"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			b.Fatal(err)
		}
		size = n
	}
	env := processEnv(b)
	env["SANDGATE_MAX_CONCURRENT"] = "16"
	env["SANDGATE_TEAM_SHARE"] = "100"
	p := startProcess(b, env)
	idle, err := processRSS(p.Pid())
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()

	runs := sampleRSS(p.Pid())
	var wg sync.WaitGroup
	ids := make([]string, 16)
	start := time.Now()
	for i := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k := outputKinds[i%len(outputKinds)]
			v, err := p.Client.Submit(ctx, sandgate.RunSpec{
				Command:          []string{"sh", "-c", fmt.Sprintf(k.command, size)},
				OutputLimitBytes: size,
			}, client.SubmitOptions{Wait: 5 * time.Minute})
			if err != nil {
				b.Errorf("%s: %v", k.name, err)
				return
			}
			if v.Stdout.Bytes != size {
				b.Errorf("%s: %d bytes of output, want %d", k.name, v.Stdout.Bytes, size)
			}
			ids[i] = v.ID
		}()
	}
	wg.Wait()
	runPeak := runs.end()
	runTime := time.Since(start)

	reads := sampleRSS(p.Pid())
	for _, id := range ids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.DefaultClient.Do(authed(b, p.URL+"/v1/runs/"+id, p.Token))
			if err != nil {
				b.Error(err)
				return
			}
			n, _ := drain(resp)
			if resp.StatusCode != http.StatusOK || n < size {
				b.Errorf("GET %s: %d, %d bytes", id, resp.StatusCode, n)
			}
		}()
	}
	for _, path := range []string{"/v1/runs?limit=100", "/v1/runs?limit=100&include=output"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.DefaultClient.Do(authed(b, p.URL+path, p.Token))
			if err != nil {
				b.Error(err)
				return
			}
			n, _ := drain(resp)
			b.Logf("GET %s: %d, %d bytes", path, resp.StatusCode, n)
		}()
	}
	wg.Wait()
	readPeak := reads.end()
	b.Logf("16 runs of %d bytes each (%s) in %v: idle %.0f MiB, peak while running %.0f MiB, peak while read back %.0f MiB",
		size, "4 each of \\x01, NUL, invalid UTF-8, text", runTime.Round(time.Millisecond), float64(idle)/1024, runPeak, readPeak)
	b.ReportMetric(float64(idle)/1024, "idle-rss-MiB")
	b.ReportMetric(runPeak, "run-peak-rss-MiB")
	b.ReportMetric(readPeak, "read-peak-rss-MiB")
}

func authed(tb testing.TB, url, token string) *http.Request {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	return req
}

// drain reads a response to its end and returns its length.
func drain(resp *http.Response) (int64, error) {
	defer resp.Body.Close()
	var n int64
	buf := make([]byte, 64<<10)
	for {
		m, err := resp.Body.Read(buf)
		n += int64(m)
		if err != nil {
			return n, nil
		}
	}
}
