package e2e

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/sinks/sinkstest"
)

// TestE2ESinkToRsyslog: serve with SANDGATE_SINKS_FILE streams the trail
// to Debian's rsyslog as OCSF in RFC 5424 messages. With rsyslog killed,
// reviews are still answered and audited, /readyz stays ready but warns,
// and the lag is a metric; when rsyslog returns it gets every event it
// missed, in order.
func TestE2ESinkToRsyslog(t *testing.T) {
	r := sinkstest.Start(t, nil)
	file := filepath.Join(t.TempDir(), "sinks.yaml")
	conf := fmt.Sprintf(`poll_interval: 50ms
sinks:
  - name: siem
    type: syslog
    lag_warning: 1s
    timeout: 2s
    syslog: {address: %q}
`, r.Addr())
	if err := os.WriteFile(file, []byte(conf), 0o600); err != nil {
		t.Fatal(err)
	}
	s := startServer(t, withEnv("SANDGATE_SINKS_FILE", file))
	review := func(i int) {
		t.Helper()
		status, _, body := s.do(t, http.MethodPost, "/v1/admission/review", fmt.Sprintf(`{"command": ["echo", "%d"]}`, i))
		if status != http.StatusOK {
			t.Fatalf("review %d: %d %s", i, status, body)
		}
	}
	reviewed := func() []string {
		t.Helper()
		var ids []string
		cursor := ""
		for {
			status, _, body := s.do(t, http.MethodGet, "/v1/audit/events?type=admission.reviewed&limit=1000"+cursor, "")
			if status != http.StatusOK {
				t.Fatalf("audit events: %d %s", status, body)
			}
			var page api.AuditEventList
			if err := json.Unmarshal(body, &page); err != nil {
				t.Fatal(err)
			}
			for _, e := range page.Events {
				ids = append(ids, e.ID)
			}
			if page.NextCursor == nil {
				return ids
			}
			cursor = "&cursor=" + *page.NextCursor
		}
	}
	// event IDs of the admission.reviewed messages rsyslog stored, in order
	msgRE := regexp.MustCompile(`^<\d+>1 \S+ \S+ sandgate - admission\.reviewed \[sandgate@32473 event_id="([^"]+)"`)
	atRsyslog := func() []string {
		var ids []string
		for _, l := range sinkstest.Lines(r.RawFile()) {
			if m := msgRE.FindStringSubmatch(l); m != nil {
				ids = append(ids, m[1])
			}
		}
		return ids
	}
	readiness := func() api.Readiness {
		t.Helper()
		status, _, body := s.do(t, http.MethodGet, "/readyz", "")
		var rd api.Readiness
		if status != http.StatusOK || json.Unmarshal(body, &rd) != nil {
			t.Fatalf("/readyz: %d %s", status, body)
		}
		return rd
	}
	waitUntil := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}

	for i := range 10 {
		review(i)
	}
	waitUntil("the reviews at rsyslog", func() bool { return len(reviewed()) == 10 && len(atRsyslog()) == 10 })

	r.Kill()
	for i := 10; i < 40; i++ {
		review(i) // answered with the receiver dead
	}
	waitUntil("a sink warning in /readyz", func() bool {
		rd := readiness()
		return rd.Ready && len(rd.Warnings) == 1 && strings.Contains(rd.Warnings[0], "sink siem")
	})
	t.Logf("/readyz warns: %s", readiness().Warnings[0])
	_, _, metrics := s.do(t, http.MethodGet, "/metrics", "")
	if m := regexp.MustCompile(`sandgate_audit_sink_lag_events\{sink="siem"\} (\d+)`).FindSubmatch(metrics); m == nil || string(m[1]) == "0" {
		t.Errorf("lag metric with the receiver dead: %q", m)
	}
	if m := regexp.MustCompile(`sandgate_audit_sink_failures_total\{sink="siem"\} (\d+)`).FindSubmatch(metrics); m == nil || string(m[1]) == "0" {
		t.Errorf("failures metric with the receiver dead: %q", m)
	}

	r.Start()
	waitUntil("the sink to catch up", func() bool { return len(atRsyslog()) >= 40 && len(readiness().Warnings) == 0 })
	want, got := reviewed(), atRsyslog()
	if strings.Join(want, ",") != strings.Join(got, ",") {
		t.Errorf("rsyslog got %d reviews, the trail holds %d; rsyslog's file:\n%s\nthe trail:\n%v",
			len(got), len(want), strings.Join(sinkstest.Lines(r.RawFile()), "\n"), want)
	}
}
