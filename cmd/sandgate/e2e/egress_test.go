package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
	"github.com/sandgate/sandgate/sandgatetest"
)

// egressServer is a gateway whose data allows egress to a loopback
// upstream (explicitly: loopback is refused unless data allows it), on an
// egress network, interface and proxy port of the test's own.
func egressServer(t *testing.T, upstreamPort int) *testServer {
	t.Helper()
	var opts []serverOption
	for k, v := range egressEnv(t, upstreamPort) {
		opts = append(opts, withEnv(k, v))
	}
	return startServer(t, opts...)
}

// egressEnv is the environment of a gateway whose data allows egress to
// 127.0.0.1:upstreamPort, with an egress network, interface and proxy
// port of the test's own, removed (with their firewall rules) when the
// test ends.
func egressEnv(t *testing.T, upstreamPort int) map[string]string {
	t.Helper()
	if os.Geteuid() != 0 && os.Getenv("CI") != "true" {
		t.Skip("the egress network's firewall rules need root (iptables)")
	}
	dest := "127.0.0.1:" + strconv.Itoa(upstreamPort)
	policy := bundleWith(t, func(c map[string]any) {
		c["egress_destinations"] = map[string]any{"default": []any{dest}, "teams": map[string]any{}}
		c["egress_private_cidrs"] = map[string]any{"default": []any{"127.0.0.1/32"}, "teams": map[string]any{}}
	})
	suffix := sandgatetest.RandomHex(t, 3)
	name, iface := "sgtest-egress-"+suffix, "sgte"+suffix
	port := strconv.Itoa(20000 + int(time.Now().UnixNano()%20000))
	t.Cleanup(func() {
		out, _ := exec.Command("docker", "network", "inspect", "-f", "{{(index .IPAM.Config 0).Gateway}}", name).Output()
		if gw := strings.TrimSpace(string(out)); gw != "" {
			_ = exec.Command("iptables", "-w", "-D", "INPUT", "-i", iface, "-p", "tcp", "-d", gw, "--dport", port, "-j", "ACCEPT").Run()
		}
		_ = exec.Command("iptables", "-w", "-D", "INPUT", "-i", iface, "-j", "DROP").Run()
		_ = exec.Command("docker", "network", "rm", name).Run()
	})
	return map[string]string{"SANDGATE_POLICY_DIR": policy, "SANDGATE_EGRESS_NETWORK": name,
		"SANDGATE_EGRESS_INTERFACE": iface, "SANDGATE_EGRESS_PORT": port}
}

// TestEndToEndEgress: through a real gateway, Docker and Postgres, a run
// with network egress reaches the loopback upstream its data allows
// through the proxy variables, is refused the metadata address and a
// connection that ignores the proxy, and its result and the trail show
// each connection with the run's correlation ID. A malformed egress
// entry is a 400 naming it; a destination the data does not allow is
// denied by policy before anything runs.
func TestEndToEndEgress(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	upstream := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello-through-the-proxy")
	})}
	go upstream.Serve(ln)
	defer upstream.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	s := egressServer(t, port)
	target := "http://127.0.0.1:" + strconv.Itoa(port) + "/"

	spec := fmt.Sprintf(`{"command":["sh","-c","wget -q -O - %s; wget -q -O - http://169.254.169.254/ && echo LEAK; gw=${HTTP_PROXY#http://}; timeout 5 wget -Y off -q -O - http://${gw%%:*}:%d/ && echo LEAK-direct; true"],`+
		`"network":"egress","egress":["127.0.0.1:%d"]}`, target, port, port)
	status, _, body := s.doAs(t, s.Token, http.MethodPost, "/v1/runs?wait=60s", spec, "X-Correlation-ID", "corr-e2e-egress")
	if status != http.StatusOK {
		t.Fatalf("POST /v1/runs = %d %s", status, body)
	}
	var run api.RunView
	if err := json.Unmarshal(body, &run); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(run.Stdout.Data, "hello-through-the-proxy") || strings.Contains(run.Stdout.Data, "LEAK") {
		t.Errorf("stdout %q stderr %q", run.Stdout.Data, run.Stderr.Data)
	}
	if e := run.Egress; e == nil || e.ConnectionsAllowed != 1 || e.ConnectionsDenied != 1 || e.BytesReceived == 0 || len(e.Destinations) != 2 {
		t.Errorf("egress summary %+v", run.Egress)
	}
	// Stored, and answered again from the store.
	var again api.RunView
	status, _, body = s.doAs(t, s.Token, http.MethodGet, "/v1/runs/"+run.ID, "")
	if err := json.Unmarshal(body, &again); status != http.StatusOK || err != nil || again.Egress == nil || again.Egress.ConnectionsAllowed != 1 {
		t.Errorf("GET the run: %d %v %+v", status, err, again.Egress)
	}

	allowed := s.waitAuditEvents(t, s.Token, url.Values{"run_id": {run.ID}, "type": {string(sandgate.EventEgressAllowed)}},
		func(ev []sandgate.AuditRecord) bool { return len(ev) == 1 })
	if ev := allowed[0]; ev.CorrelationID != "corr-e2e-egress" || ev.Payload["address"] != "127.0.0.1" || ev.Payload["bytes_received"].(float64) == 0 {
		t.Errorf("egress.allowed %+v", ev)
	}
	denied := s.waitAuditEvents(t, s.Token, url.Values{"run_id": {run.ID}, "type": {string(sandgate.EventEgressDenied)}},
		func(ev []sandgate.AuditRecord) bool { return len(ev) == 1 })
	if ev := denied[0]; ev.CorrelationID != "corr-e2e-egress" || ev.Payload["host"] != "169.254.169.254" {
		t.Errorf("egress.denied %+v", ev)
	}

	status, _, body = s.doAs(t, s.Token, http.MethodPost, "/v1/runs", `{"command":["true"],"network":"egress","egress":["127.0.0.1:80","pypi.org"]}`)
	if status != http.StatusBadRequest || !strings.Contains(string(body), "egress[1]") {
		t.Errorf("an entry without a port: %d %s", status, body)
	}
	status, _, body = s.doAs(t, s.Token, http.MethodPost, "/v1/runs", `{"command":["true"],"network":"egress","egress":["pypi.org:443"]}`)
	if status != http.StatusForbidden || !strings.Contains(string(body), "egress_destination_allowlist") {
		t.Errorf("a destination the data does not allow: %d %s", status, body)
	}
}

// TestEndToEndEgressSession: a session opened with network egress gives
// its commands the proxy variables; a command reaches the loopback
// upstream the data allows and nothing else (the metadata address, a
// destination not admitted, a connection that ignores the proxy), each
// connection recorded against the session (its ID as run_id and
// session_id, its correlation ID), and the ended session carries the
// summary of all its commands.
func TestEndToEndEgressSession(t *testing.T) {
	ln, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	upstream := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintln(w, "hello-to-the-session")
	})}
	go upstream.Serve(ln)
	defer upstream.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	s := egressServer(t, port)
	p := strconv.Itoa(port)

	ss, err := s.Client.CreateSession(t.Context(), api.SessionRequest{RunSpec: sandgate.RunSpec{
		Network: sandgate.NetworkEgress, Egress: []string{"127.0.0.1:" + p},
	}})
	if err != nil || ss.State != sandgate.SessionOpen {
		t.Fatalf("create session: %+v %v", ss, err)
	}
	ok := execWait(t, s.Client, ss.ID, api.ExecRequest{Command: []string{"wget", "-q", "-O", "-", "http://127.0.0.1:" + p + "/"}})
	if outcomeOf(ok) != sandgate.OutcomeSucceeded || !strings.Contains(ok.Stdout.Data, "hello-to-the-session") {
		t.Errorf("allowed destination from a command: %s %q %q", outcomeOf(ok), ok.Stdout.Data, ok.Stderr.Data)
	}
	refused := execWait(t, s.Client, ss.ID, api.ExecRequest{Command: []string{"sh", "-c",
		"timeout 10 wget -q -O - http://169.254.169.254/ && echo LEAK-metadata; " +
			"timeout 10 wget -q -O - http://127.0.0.1:" + strconv.Itoa(port+1) + "/ && echo LEAK-port; " +
			"gw=${HTTP_PROXY#http://}; timeout 5 wget -Y off -q -O - http://${gw%:*}:" + p + "/ && echo LEAK-direct; true"}})
	if strings.Contains(refused.Stdout.Data, "LEAK") {
		t.Errorf("a refused destination was reached from a command: %q", refused.Stdout.Data)
	}
	allowed := s.waitAuditEvents(t, s.Token, url.Values{"run_id": {ss.ID}, "type": {string(sandgate.EventEgressAllowed)}},
		func(ev []sandgate.AuditRecord) bool { return len(ev) == 1 })
	if ev := allowed[0]; ev.CorrelationID != ss.CorrelationID || ev.Payload["session_id"] != ss.ID || ev.Payload["address"] != "127.0.0.1" {
		t.Errorf("egress.allowed %+v", ev)
	}
	denied := s.waitAuditEvents(t, s.Token, url.Values{"run_id": {ss.ID}, "type": {string(sandgate.EventEgressDenied)}},
		func(ev []sandgate.AuditRecord) bool { return len(ev) == 2 })
	hosts := map[any]bool{}
	for _, ev := range denied {
		hosts[ev.Payload["host"]] = true
		// Refused before any per-connection decision: the revision that
		// admitted the session.
		if ev.CorrelationID != ss.CorrelationID || ev.Payload["session_id"] != ss.ID || ev.Payload["reason"] != "not_admitted" || ev.PolicyRevision != ss.PolicyRevision {
			t.Errorf("egress.denied %+v", ev)
		}
	}
	if !hosts["169.254.169.254"] || !hosts["127.0.0.1"] {
		t.Errorf("denied hosts %v, want the metadata address and the port not admitted", hosts)
	}

	ended, err := s.Client.DeleteSession(t.Context(), ss.ID)
	if err != nil || ended.State != sandgate.SessionEnded {
		t.Fatalf("delete session: %+v %v", ended, err)
	}
	if e := ended.Egress; e == nil || e.ConnectionsAllowed != 1 || e.ConnectionsDenied != 2 || e.BytesReceived == 0 {
		t.Errorf("ended session's egress %+v", ended.Egress)
	}
	again, err := s.Client.Session(t.Context(), ss.ID)
	if err != nil || again.Egress == nil || again.Egress.ConnectionsAllowed != 1 {
		t.Errorf("stored session's egress %+v %v", again.Egress, err)
	}

	// The gateway's metrics count them: connections by result and reason,
	// bytes by direction.
	_, _, metrics := s.do(t, http.MethodGet, "/metrics", "")
	for _, want := range []string{
		`sandgate_egress_connections_total{reason="",result="allowed"} 1`,
		`sandgate_egress_connections_total{reason="not_admitted",result="denied"} 2`,
	} {
		if !strings.Contains(string(metrics), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
	if m := regexp.MustCompile(`sandgate_egress_bytes_total\{direction="received"\} (\d+)`).FindSubmatch(metrics); m == nil || string(m[1]) == "0" {
		t.Errorf("/metrics counts no bytes received through the proxy")
	}
}
