package sandgatetest_test

import (
	"archive/tar"
	"bytes"
	"io"
	"slices"
	"testing"
	"time"

	"github.com/sandgate/sandgate/sandgatetest"
)

func TestMedianAndPercentile(t *testing.T) {
	ms := func(ns ...int) []time.Duration {
		var ds []time.Duration
		for _, n := range ns {
			ds = append(ds, time.Duration(n)*time.Millisecond)
		}
		return ds
	}
	tests := []struct {
		name     string
		ds       []time.Duration
		median   time.Duration
		p90, p50 time.Duration
	}{
		{"odd", ms(5, 1, 3), 3 * time.Millisecond, 5 * time.Millisecond, 3 * time.Millisecond},
		{"even", ms(4, 1, 3, 2), 2500 * time.Microsecond, 4 * time.Millisecond, 2 * time.Millisecond},
		{"one", ms(7), 7 * time.Millisecond, 7 * time.Millisecond, 7 * time.Millisecond},
		{"none", nil, 0, 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			before := slices.Clone(tt.ds)
			if got := sandgatetest.Median(tt.ds); got != tt.median {
				t.Errorf("Median = %v, want %v", got, tt.median)
			}
			if got := sandgatetest.Percentile(tt.ds, 90); got != tt.p90 {
				t.Errorf("Percentile 90 = %v, want %v", got, tt.p90)
			}
			if got := sandgatetest.Percentile(tt.ds, 50); got != tt.p50 {
				t.Errorf("Percentile 50 = %v, want %v", got, tt.p50)
			}
			if !slices.Equal(before, tt.ds) {
				t.Errorf("the samples were reordered: %v, were %v", tt.ds, before)
			}
		})
	}
}

func TestTar(t *testing.T) {
	b := sandgatetest.Tar(t,
		sandgatetest.TarEntry{Name: "src/", Type: tar.TypeDir},
		sandgatetest.TarEntry{Name: "src/a.txt", Body: "hello"},
		sandgatetest.TarEntry{Name: "link", Type: tar.TypeSymlink, Link: "src/a.txt"})
	tr := tar.NewReader(bytes.NewReader(b))
	type got struct {
		name string
		typ  byte
		mode int64
		body string
		link string
	}
	var all []got
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(tr)
		if !h.ModTime.Equal(sandgatetest.TarEpoch) {
			t.Errorf("%s: mtime %v", h.Name, h.ModTime)
		}
		all = append(all, got{h.Name, h.Typeflag, h.Mode, string(body), h.Linkname})
	}
	want := []got{{"src/", tar.TypeDir, 0o755, "", ""}, {"src/a.txt", tar.TypeReg, 0o644, "hello", ""}, {"link", tar.TypeSymlink, 0o644, "", "src/a.txt"}}
	if !slices.Equal(all, want) {
		t.Errorf("entries %+v, want %+v", all, want)
	}
}

func TestRandomHexAndFreePort(t *testing.T) {
	a, b := sandgatetest.RandomHex(t, 4), sandgatetest.RandomHex(t, 4)
	if len(a) != 8 || a == b {
		t.Errorf("RandomHex: %q, %q", a, b)
	}
	if p := sandgatetest.FreePort(t); p <= 0 || p > 65535 {
		t.Errorf("FreePort = %d", p)
	}
}

func TestWaitFor(t *testing.T) {
	n := 0
	sandgatetest.WaitFor(t, "the third poll", time.Minute, func() bool { n++; return n == 3 })
	if n != 3 {
		t.Errorf("polled %d times, want 3", n)
	}
}

func TestScaleSizes(t *testing.T) {
	short, full := []int{10}, []int{10, 100}
	tests := []struct {
		name, scale, override string
		want                  []int
	}{
		{"default is short", "", "", short},
		{"full", "full", "", full},
		{"override wins", "full", "7, 70,x", []int{7, 70}},
		{"bad override ignored", "", "x", short},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(sandgatetest.ScaleEnv, tc.scale)
			t.Setenv("SANDGATE_TEST_SIZES", tc.override)
			if got := sandgatetest.ScaleSizes("SANDGATE_TEST_SIZES", short, full); !slices.Equal(got, tc.want) {
				t.Errorf("ScaleSizes = %v, want %v", got, tc.want)
			}
		})
	}
}
