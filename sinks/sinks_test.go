package sinks_test

import (
	"context"
	"crypto/hmac"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/sinks"
	"github.com/sandgate/sandgate/sinks/sinkstest"
)

func TestParse(t *testing.T) {
	good := `
poll_interval: 2s
sinks:
  - name: siem
    type: syslog
    types: [admission.denied, auth.denied]
    syslog: {address: "127.0.0.1:6514", tls: true, ca_file: /etc/ca.pem, facility: local3}
  - name: hook
    type: webhook
    format: sandgate
    batch_size: 50
    start: newest
    lag_warning: 5m
    webhook: {url: "https://siem.example/ingest", secret_file: /etc/sandgate/sink.key}
`
	f, err := sinks.Parse([]byte(good))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	if got := time.Duration(f.PollInterval); got != 2*time.Second {
		t.Errorf("poll_interval = %v", got)
	}
	s := f.Sinks[0]
	if s.Format != sinks.FormatOCSF || s.BatchSize != sinks.DefaultBatchSize || s.Start != "oldest" ||
		time.Duration(s.LagWarning) != time.Minute || s.Syslog.AppName != "sandgate" || s.Syslog.SDID != sinks.DefaultSDID {
		t.Errorf("defaults not filled in: %+v %+v", s, s.Syslog)
	}
	if h := f.Sinks[1]; h.BatchSize != 50 || h.Start != "newest" || time.Duration(h.LagWarning) != 5*time.Minute {
		t.Errorf("webhook sink = %+v", h)
	}

	for _, tc := range []struct {
		name, file, field string
	}{
		{"unknown field", "sinks: [{name: a, type: syslog, syslog: {address: 'h:1'}, colour: red}]", ""},
		{"bad name", "sinks: [{name: 'A B', type: syslog, syslog: {address: 'h:1'}}]", "sinks[0].name"},
		{"bad type", "sinks: [{name: a, type: kafka}]", "sinks[0].type"},
		{"bad format", "sinks: [{name: a, type: syslog, format: cef, syslog: {address: 'h:1'}}]", "sinks[0].format"},
		{"unknown event type", "sinks: [{name: a, type: syslog, types: [run.exploded], syslog: {address: 'h:1'}}]", "sinks[0].types[0]"},
		{"batch too large", "sinks: [{name: a, type: syslog, batch_size: 100000, syslog: {address: 'h:1'}}]", "sinks[0].batch_size"},
		{"no port", "sinks: [{name: a, type: syslog, syslog: {address: 'h'}}]", "sinks[0].syslog.address"},
		{"ca without tls", "sinks: [{name: a, type: syslog, syslog: {address: 'h:1', ca_file: /x}}]", "sinks[0].syslog.tls"},
		{"bad facility", "sinks: [{name: a, type: syslog, syslog: {address: 'h:1', facility: mars}}]", "sinks[0].syslog.facility"},
		{"syslog without section", "sinks: [{name: a, type: syslog}]", "sinks[0].syslog"},
		{"http to a remote host", "sinks: [{name: a, type: webhook, webhook: {url: 'http://siem.example/', secret_file: /k}}]", "sinks[0].webhook.url"},
		{"no secret", "sinks: [{name: a, type: webhook, webhook: {url: 'https://siem.example/'}}]", "sinks[0].webhook.secret_file"},
		{"twice", "sinks: [{name: a, type: syslog, syslog: {address: 'h:1'}}, {name: a, type: syslog, syslog: {address: 'h:2'}}]", "sinks[1].name"},
		{"bad duration", "sinks: [{name: a, type: syslog, lag_warning: soon, syslog: {address: 'h:1'}}]", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := sinks.Parse([]byte(tc.file))
			var se *sandgate.Error
			if !errors.As(err, &se) || se.Code != sandgate.CodeInvalidRequest {
				t.Fatalf("Parse = %v; want INVALID-REQUEST", err)
			}
			if tc.field != "" && !strings.Contains(se.Error(), tc.field) && fmt.Sprint(se.Details["field"]) != tc.field {
				t.Errorf("error %q (details %v) does not name %s", se.Error(), se.Details, tc.field)
			}
		})
	}
	if _, err := sinks.Parse([]byte(`sinks: [{name: a, type: webhook, webhook: {url: "http://127.0.0.1:9/x", secret_file: /k}}]`)); err != nil {
		t.Errorf("http to loopback refused: %v", err)
	}
}

// record makes the i-th record of a chain.
func record(i int, typ sandgate.EventType) sandgate.AuditRecord {
	code := i % 4
	t0 := time.Date(2026, 11, 27, 1, 2, 3, 456789000, time.UTC)
	return sandgate.AuditRecord{
		Event: sandgate.Event{
			ID: fmt.Sprintf("01900000-0000-7000-8000-%012d", i), Type: typ, Time: t0.Add(time.Duration(i) * time.Millisecond),
			Outcome: "succeeded", CorrelationID: "corr-" + strconv.Itoa(i), RunID: "run-" + strconv.Itoa(i),
			Actor: "alice", Team: "payments", Node: "gw-1", ExitCode: &code,
			Payload: map[string]any{"note": `quote " bracket ] backslash \ <&>`},
		},
		ChainID: "gw-1-abcd", Seq: int64(i + 1), RecordedAt: t0.Add(time.Duration(i)*time.Millisecond + time.Millisecond),
		Body: "{}", PrevHash: strings.Repeat("0", 64), Hash: strings.Repeat("1", 64),
	}
}

// TestOCSFCoversEveryType: every event type has a class, and each
// encoded event carries OCSF's base attributes with sandgate's fields
// under unmapped.
func TestOCSFCoversEveryType(t *testing.T) {
	for i, typ := range sandgate.EventTypes {
		t.Run(string(typ), func(t *testing.T) {
			data, err := sinks.EncodeOCSF(record(i, typ), "test")
			if err != nil {
				t.Fatal(err)
			}
			var ev struct {
				ClassUID    int    `json:"class_uid"`
				CategoryUID int    `json:"category_uid"`
				ActivityID  int    `json:"activity_id"`
				TypeUID     int    `json:"type_uid"`
				ActivityNm  string `json:"activity_name"`
				Time        int64  `json:"time"`
				SeverityID  int    `json:"severity_id"`
				StatusID    int    `json:"status_id"`
				Metadata    struct {
					UID            string `json:"uid"`
					Version        string `json:"version"`
					CorrelationUID string `json:"correlation_uid"`
					Product        struct {
						Name string `json:"name"`
					} `json:"product"`
				} `json:"metadata"`
				Actor struct {
					User struct {
						Name string `json:"name"`
					} `json:"user"`
				} `json:"actor"`
				Unmapped struct {
					Sandgate map[string]any `json:"sandgate"`
				} `json:"unmapped"`
			}
			if err := json.Unmarshal(data, &ev); err != nil {
				t.Fatal(err)
			}
			r := record(i, typ)
			if ev.ClassUID == 0 || ev.CategoryUID != ev.ClassUID/1000 || ev.TypeUID != ev.ClassUID*100+ev.ActivityID || ev.ActivityNm == string(typ) {
				t.Errorf("class %d category %d activity %d (%s) type %d: not a mapped OCSF class", ev.ClassUID, ev.CategoryUID, ev.ActivityID, ev.ActivityNm, ev.TypeUID)
			}
			if ev.Metadata.UID != r.ID || ev.Metadata.CorrelationUID != r.CorrelationID || ev.Time != r.Time.UnixMilli() ||
				ev.Metadata.Version != sinks.OCSFVersion || ev.Metadata.Product.Name != "sandgate" {
				t.Errorf("metadata = %+v, time %d", ev.Metadata, ev.Time)
			}
			if ev.SeverityID < 1 || ev.StatusID < 1 || ev.Actor.User.Name != "alice" {
				t.Errorf("severity %d status %d actor %q", ev.SeverityID, ev.StatusID, ev.Actor.User.Name)
			}
			if ev.Unmapped.Sandgate["type"] != string(typ) || ev.Unmapped.Sandgate["hash"] != r.Hash || ev.Unmapped.Sandgate["payload"] == nil {
				t.Errorf("unmapped.sandgate = %v", ev.Unmapped.Sandgate)
			}
		})
	}
}

// rfc5424 matches an RFC 5424 SYSLOG-MSG as the syslog sink writes it:
// PRI, version 1, the timestamp, HOSTNAME, APP-NAME, no PROCID, MSGID,
// one SD-ELEMENT, and the JSON event.
var rfc5424 = regexp.MustCompile(`^<(\d{1,3})>1 (\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z) (\S{1,255}) (\S{1,48}) - (\S{1,32}) \[sandgate@32473 event_id="([^"]+)" chain_id="([^"]+)" seq="(\d+)"(?: [a-z_]+="(?:[^"\\\]]|\\.)*")*\] (\{.*\})$`)

func syslogSpec(t *testing.T, name, addr string, tls *sinkstest.TLS, clientCert ...string) sinks.Spec {
	t.Helper()
	tlsPart := ""
	if tls != nil {
		tlsPart = fmt.Sprintf(", tls: true, ca_file: %q, server_name: localhost", tls.CAFile)
	}
	if len(clientCert) == 2 {
		tlsPart += fmt.Sprintf(", cert_file: %q, key_file: %q", clientCert[0], clientCert[1])
	}
	f, err := sinks.Parse(fmt.Appendf(nil, `sinks: [{name: %s, type: syslog, format: sandgate, timeout: 5s, syslog: {address: %q%s}}]`, name, addr, tlsPart))
	if err != nil {
		t.Fatal(err)
	}
	return f.Sinks[0]
}

// checkRsyslog waits for n messages at rsyslog and checks that each is
// RFC 5424, in the order sent, with the event whole.
func checkRsyslog(t *testing.T, r *sinkstest.Rsyslog, recs []sandgate.AuditRecord) {
	t.Helper()
	raw := sinkstest.WaitLines(t, r.RawFile(), len(recs), 15*time.Second)
	parsed := sinkstest.WaitLines(t, r.ParsedFile(), len(recs), 5*time.Second)
	// MSG as rsyslog hands it to an output (%msg%): the event's JSON,
	// which the rsyslog example of docs/audit.md writes out a line each.
	for i, m := range sinkstest.WaitLines(t, r.MsgFile(), len(recs), 5*time.Second) {
		if !json.Valid([]byte(strings.TrimSuffix(strings.TrimPrefix(m, "["), "]"))) {
			t.Errorf("rsyslog's MSG of message %d is not the JSON event: %.200s", i, m)
		}
	}
	if len(raw) != len(recs) {
		t.Fatalf("rsyslog received %d messages, want %d", len(raw), len(recs))
	}
	for i, line := range raw {
		m := rfc5424.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("message %d is not RFC 5424 as expected:\n%s", i, line)
		}
		want := recs[i]
		if m[6] != want.ID || m[8] != strconv.FormatInt(want.Seq, 10) || m[5] != string(want.Type) || m[3] != want.Node {
			t.Errorf("message %d is event %s seq %s type %s; want %s %d %s", i, m[6], m[8], m[5], want.ID, want.Seq, want.Type)
		}
		var got sandgate.AuditRecord
		if err := json.Unmarshal([]byte(m[9]), &got); err != nil || got.ID != want.ID || got.Payload["note"] != want.Payload["note"] {
			t.Errorf("message %d MSG is not the record: %v %+v", i, err, got)
		}
		// What rsyslog itself parsed: protocol version 1 (RFC 5424),
		// the hostname, app name and msgid.
		if f := strings.Fields(parsed[i]); len(f) < 4 || f[0] != "1" || f[1] != want.Node || f[2] != "sandgate" || f[3] != string(want.Type) {
			t.Errorf("rsyslog parsed message %d as %q", i, parsed[i])
		}
	}
}

// TestSyslogToRsyslog sends batches over TCP, octet-counted, to Debian's
// rsyslog and reads what it stored.
func TestSyslogToRsyslog(t *testing.T) {
	r := sinkstest.Start(t, nil)
	s, err := sinks.New(syslogSpec(t, "rsyslog", r.Addr(), nil), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var recs []sandgate.AuditRecord
	for i := range 60 {
		recs = append(recs, record(i, sandgate.EventTypes[i%len(sandgate.EventTypes)]))
	}
	for _, b := range [][]sandgate.AuditRecord{recs[:25], recs[25:50], recs[50:]} {
		if err := s.Deliver(context.Background(), b); err != nil {
			t.Fatalf("Deliver: %v", err)
		}
	}
	checkRsyslog(t, r, recs)
}

// TestSyslogTLSToRsyslog sends over TLS to rsyslog's GnuTLS driver; a
// sender that does not trust the receiver's CA sends nothing.
func TestSyslogTLSToRsyslog(t *testing.T) {
	material := sinkstest.NewTLS(t)
	r := sinkstest.Start(t, material)
	s, err := sinks.New(syslogSpec(t, "rsyslog-tls", r.Addr(), material), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs := []sandgate.AuditRecord{record(0, sandgate.EventAdmissionDenied), record(1, sandgate.EventAuthDenied), record(2, sandgate.EventContainerExited)}
	if err := s.Deliver(context.Background(), recs); err != nil {
		t.Fatalf("Deliver over TLS: %v", err)
	}
	checkRsyslog(t, r, recs)

	other := sinkstest.NewTLS(t)
	s2, err := sinks.New(syslogSpec(t, "untrusted", r.Addr(), other), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer s2.Close()
	if err := s2.Deliver(context.Background(), recs); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("Deliver to a receiver of another CA = %v; want a certificate error", err)
	}
}

// TestSyslogClientCertToRsyslog: a receiver that requires a client
// certificate takes the sender that has one; one without is refused, and
// the refusal is a failed delivery, not a batch taken for delivered.
func TestSyslogClientCertToRsyslog(t *testing.T) {
	material := sinkstest.NewTLS(t)
	material.ClientCerts = true
	r := sinkstest.Start(t, material)
	recs := []sandgate.AuditRecord{record(0, sandgate.EventAdmissionDenied)}

	anon, err := sinks.New(syslogSpec(t, "anonymous", r.Addr(), material), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer anon.Close()
	if err := anon.Deliver(context.Background(), recs); err == nil {
		t.Error("Deliver without a client certificate to a receiver that requires one succeeded")
	} else {
		t.Logf("without a client certificate: %v", err)
	}

	s, err := sinks.New(syslogSpec(t, "with-cert", r.Addr(), material, material.CertFile, material.KeyFile), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.Deliver(context.Background(), recs); err != nil {
		t.Fatalf("Deliver with a client certificate: %v", err)
	}
	checkRsyslog(t, r, recs)
}

// TestSyslogReceiverGone: a receiver killed between batches fails the
// next batch (it is not taken for delivered), and once it is back the
// batch goes through on a new connection.
func TestSyslogReceiverGone(t *testing.T) {
	r := sinkstest.Start(t, nil)
	s, err := sinks.New(syslogSpec(t, "gone", r.Addr(), nil), "test")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	first := []sandgate.AuditRecord{record(0, sandgate.EventRunRequested)}
	if err := s.Deliver(context.Background(), first); err != nil {
		t.Fatal(err)
	}
	sinkstest.WaitLines(t, r.RawFile(), 1, 10*time.Second)
	r.Kill()
	second := []sandgate.AuditRecord{record(1, sandgate.EventAdmissionAllowed)}
	if err := s.Deliver(context.Background(), second); err == nil {
		t.Fatal("Deliver to a killed receiver succeeded")
	}
	r.Start()
	if err := s.Deliver(context.Background(), second); err != nil {
		t.Fatalf("Deliver after the receiver is back: %v", err)
	}
	checkRsyslog(t, r, append(first, second...))
}

// TestWebhookSigned: the receiver gets a JSON array of OCSF events signed
// like completion callbacks; anything but 2xx is a failure.
func TestWebhookSigned(t *testing.T) {
	key := []byte("0123456789abcdef0123456789abcdef")
	keyFile := filepath.Join(t.TempDir(), "sink.key")
	if err := os.WriteFile(keyFile, []byte(hex.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var (
		mu     sync.Mutex
		got    []map[string]any
		status = http.StatusNoContent
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		ts := r.Header.Get(sinks.HeaderTimestamp)
		want := sandgate.SignHMAC(key, ts, body)
		if !hmac.Equal([]byte(want), []byte(r.Header.Get(sinks.HeaderSignature))) {
			http.Error(w, "bad signature", http.StatusUnauthorized)
			return
		}
		if r.Header.Get(sinks.HeaderSink) != "hook" || r.Header.Get(sinks.HeaderFormat) != "ocsf" || r.Header.Get("Content-Type") != "application/json" {
			http.Error(w, "bad headers", http.StatusBadRequest)
			return
		}
		var evs []map[string]any
		if err := json.Unmarshal(body, &evs); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		if status/100 == 2 {
			got = append(got, evs...)
		}
		w.WriteHeader(status)
	}))
	defer srv.Close()
	f, err := sinks.Parse(fmt.Appendf(nil, `sinks: [{name: hook, type: webhook, webhook: {url: %q, secret_file: %q}}]`, srv.URL+"/ingest", keyFile))
	if err != nil {
		t.Fatal(err)
	}
	s, err := sinks.New(f.Sinks[0], "test")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs := []sandgate.AuditRecord{record(0, sandgate.EventAdmissionDenied), record(1, sandgate.EventContainerStarted)}
	if err := s.Deliver(context.Background(), recs); err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	mu.Lock()
	status = http.StatusServiceUnavailable
	mu.Unlock()
	if err := s.Deliver(context.Background(), recs); err == nil || !strings.Contains(err.Error(), "503") {
		t.Errorf("Deliver answered 503 = %v; want an error", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 2 {
		t.Fatalf("receiver got %d events, want 2", len(got))
	}
	if md := got[0]["metadata"].(map[string]any); md["uid"] != recs[0].ID || got[0]["class_uid"] != float64(6003) || got[0]["disposition_id"] != float64(2) {
		t.Errorf("first event = %v", got[0])
	}
}
