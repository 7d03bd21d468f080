package e2e

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate/sandgatetest"
)

// echoUpstreamPy is the upstream of the secrets tests: an HTTP server in
// a container of its own, on three ports: 8443 and 8444 over TLS with a
// certificate of the test's own authority, 8080 in the clear. Each
// answers a request with its path and headers echoed, as JSON and as the
// base64 of that JSON, and the Authorization header in an answer header,
// gzip-compressed when the request accepts it; /seen answers what
// Authorization each port was sent.
const echoUpstreamPy = `
import base64, gzip, json, ssl, threading
from http.server import ThreadingHTTPServer, BaseHTTPRequestHandler
seen = []
lock = threading.Lock()
class H(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        auth = self.headers.get("Authorization", "")
        if self.path == "/seen":
            with lock:
                body = json.dumps(seen).encode()
        else:
            with lock:
                seen.append({"port": self.server.server_port, "path": self.path, "authorization": auth})
            doc = json.dumps({"path": self.path, "headers": dict(self.headers.items())})
            body = (doc + "\nbase64: " + base64.b64encode(doc.encode()).decode() + "\n").encode()
        gz = "gzip" in self.headers.get("Accept-Encoding", "")
        if gz:
            body = gzip.compress(body)
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.send_header("X-Echo-Authorization", auth)
        if gz:
            self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
def serve(port, tls):
    srv = ThreadingHTTPServer(("0.0.0.0", port), H)
    if tls:
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain("/srv/cert.pem", "/srv/key.pem")
        srv.socket = ctx.wrap_socket(srv.socket, server_side=True)
    srv.serve_forever()
for port, tls in ((8443, True), (8444, True), (8080, False)):
    threading.Thread(target=serve, args=(port, tls), daemon=True).start()
threading.Event().wait()
`

// echoUpstream is the upstream container: its authority's certificate
// (PEM, a file too) and the host's loopback ports of its three servers.
type echoUpstream struct {
	caPEM     []byte
	caFile    string
	api       string // 127.0.0.1:port of 8443
	other     string // of 8444
	plain     string // of 8080
	container string
}

// startEchoUpstream starts the upstream container, its ports published
// on the host's loopback, and waits until it answers; it is removed when
// the test ends.
func startEchoUpstream(t *testing.T) *echoUpstream {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	caPEM, certPEM, keyPEM := upstreamCertificates(t)
	for name, data := range map[string][]byte{"echo.py": []byte(echoUpstreamPy), "cert.pem": certPEM, "key.pem": keyPEM, "ca.pem": caPEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	u := &echoUpstream{caPEM: caPEM, caFile: filepath.Join(dir, "ca.pem"), container: "sgtest-upstream-" + sandgatetest.RandomHex(t, 4)}
	out, err := exec.Command("docker", "run", "-d", "--rm", "--name", u.container, "--user", "10001:10001",
		"-p", "127.0.0.1::8443", "-p", "127.0.0.1::8444", "-p", "127.0.0.1::8080",
		"-v", dir+":/srv:ro", "sandgate/python:3", "python3", "/srv/echo.py").CombinedOutput()
	if err != nil {
		t.Fatalf("start the upstream container: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("docker", "rm", "-f", u.container).Run() })
	port := func(p string) string {
		out, err := exec.Command("docker", "port", u.container, p+"/tcp").Output()
		if err != nil {
			t.Fatalf("docker port %s: %v", p, err)
		}
		return strings.TrimSpace(strings.Split(string(out), "\n")[0])
	}
	u.api, u.other, u.plain = port("8443"), port("8444"), port("8080")
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, err := u.seen(); err == nil {
			return u
		}
		if time.Now().After(deadline) {
			logs, _ := exec.Command("docker", "logs", u.container).CombinedOutput()
			t.Fatalf("the upstream did not answer: %s", logs)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// seenRequest is one request the upstream was sent.
type seenRequest struct {
	Port          int    `json:"port"`
	Path          string `json:"path"`
	Authorization string `json:"authorization"`
}

// seen asks the upstream, straight from the host and trusting its
// authority, what it was sent.
func (u *echoUpstream) seen() ([]seenRequest, error) {
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(u.caPEM)
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}}
	resp, err := c.Get("https://" + u.api + "/seen")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	var out []seenRequest
	return out, json.Unmarshal(b, &out)
}

// port is the host port of an address of the upstream.
func portOf(addr string) string {
	_, p, _ := net.SplitHostPort(addr)
	return p
}

// upstreamCertificates are the upstream's authority and its server
// certificate for localhost and 127.0.0.1, with the server's key, in PEM.
func upstreamCertificates(t *testing.T) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	now := time.Now()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sandgate test upstream CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "localhost"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour), DNSNames: []string{"localhost"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	keyDER, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: keyDER})
}
