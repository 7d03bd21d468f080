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
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
)

// testCA is a certificate authority the test makes with crypto/x509.
type testCA struct {
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
	pem  []byte
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return &testCA{cert: cert, key: key, pem: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})}
}

// issue makes a leaf certificate of subject for usage, and returns it
// as a tls.Certificate and as PEM files (cert, key).
func (ca *testCA) issue(t *testing.T, subject pkix.Name, usage x509.ExtKeyUsage, ips ...net.IP) (tls.Certificate, []byte, []byte) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{
		SerialNumber: serial, Subject: subject, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage}, IPAddresses: ips,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &key.PublicKey, ca.key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder})
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return pair, certPEM, keyPEM
}

func writeFile(t *testing.T, dir, name string, data []byte) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// freeLoopbackAddr is a loopback address with a port no one listens on
// now.
func freeLoopbackAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// TestMTLSClientCertificates: on the TLS listener, a client certificate
// the client CA signed signs its holder in, mapped by the principal rule
// (common name, organization as team, organizational units as roles);
// the trail names the person with method mtls. A certificate of another
// CA is refused at the handshake; one the rule maps to no one is 403
// with the reason; no certificate and no token is 401.
func TestMTLSClientCertificates(t *testing.T) {
	dir := t.TempDir()
	ca, rogue := newTestCA(t, "sandgate test CA"), newTestCA(t, "rogue CA")
	_, srvCert, srvKey := ca.issue(t, pkix.Name{CommonName: "gateway"}, x509.ExtKeyUsageServerAuth, net.ParseIP("127.0.0.1"))
	addr := freeLoopbackAddr(t)
	s := startServer(t,
		withEnv("SANDGATE_TLS_LISTEN", addr),
		withEnv("SANDGATE_TLS_CERT_FILE", writeFile(t, dir, "server.pem", srvCert)),
		withEnv("SANDGATE_TLS_KEY_FILE", writeFile(t, dir, "server-key.pem", srvKey)),
		withEnv("SANDGATE_TLS_CLIENT_CA_FILE", writeFile(t, dir, "ca.pem", ca.pem)))

	roots := x509.NewCertPool()
	roots.AddCert(ca.cert)
	client := func(certs ...tls.Certificate) *http.Client {
		return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
			TLSClientConfig: &tls.Config{RootCAs: roots, Certificates: certs}, DisableKeepAlives: true}}
	}
	get := func(c *http.Client, path string) (int, []byte, error) {
		resp, err := c.Get("https://" + addr + path)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return resp.StatusCode, body, err
	}

	bot, _, _ := ca.issue(t, pkix.Name{CommonName: "build-bot", Organization: []string{"alpha"}, OrganizationalUnit: []string{"submitter"}}, x509.ExtKeyUsageClientAuth)
	status, body, err := get(client(bot), "/v1/whoami")
	var p api.PrincipalView
	if err != nil || status != http.StatusOK || json.Unmarshal(body, &p) != nil {
		t.Fatalf("whoami with the certificate = %d %s %v", status, body, err)
	}
	if p.Name != "build-bot" || p.Team != "alpha" || len(p.Roles) != 1 || p.Roles[0] != sandgate.RoleSubmitter ||
		p.SignIn == nil || p.SignIn.Method != sandgate.MethodMTLS {
		t.Fatalf("whoami = %s", body)
	}

	// The run it submits, and the trail of it, name the certificate's
	// holder.
	resp, err := client(bot).Post("https://"+addr+"/v1/runs?wait=60s", "application/json", stringsReader(`{"command":["true"]}`))
	if err != nil {
		t.Fatal(err)
	}
	body, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	var run api.RunView
	if json.Unmarshal(body, &run) != nil || run.Principal != "build-bot" || run.SignIn == nil || run.SignIn.Method != sandgate.MethodMTLS {
		t.Fatalf("submit = %d %s", resp.StatusCode, body)
	}
	status, body, err = get(client(bot), "/v1/runs/"+run.ID)
	if err != nil || status != http.StatusOK {
		t.Fatalf("get run = %d %s %v", status, body, err)
	}
	events := s.waitAuditEvents(t, s.Token, url.Values{"run_id": {run.ID}}, func(evs []sandgate.AuditRecord) bool {
		return hasEvent(evs, sandgate.EventContainerRemoved)
	})
	for _, ev := range events {
		actor, _ := ev.Payload["actor"].(map[string]any)
		if actor["method"] != sandgate.MethodMTLS || actor["name"] != "build-bot" || actor["issuer"] != ca.cert.Subject.String() {
			t.Errorf("%s: actor = %v", ev.Type, ev.Payload["actor"])
		}
	}

	// Attacks: a certificate of another CA with the same subject; one
	// without a role; none at all.
	forged, _, _ := rogue.issue(t, pkix.Name{CommonName: "build-bot", Organization: []string{"alpha"}, OrganizationalUnit: []string{"admin"}}, x509.ExtKeyUsageClientAuth)
	// Go's client offers only a certificate of a CA the server names; the
	// attacker offers it whatever the server asks.
	pushy := client()
	pushy.Transport.(*http.Transport).TLSClientConfig.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
		return &forged, nil
	}
	if status, body, err := get(pushy, "/v1/whoami"); err == nil {
		t.Errorf("a rogue CA's certificate = %d %s; want the handshake refused", status, body)
	}
	roleless, _, _ := ca.issue(t, pkix.Name{CommonName: "nobody", Organization: []string{"alpha"}}, x509.ExtKeyUsageClientAuth)
	if status, body, err := get(client(roleless), "/v1/whoami"); err != nil || status != http.StatusForbidden {
		t.Errorf("a certificate mapped to no one = %d %s %v; want 403", status, body, err)
	} else if e := apiError(body); e.Error.Message == "" {
		t.Errorf("403 without a reason: %s", body)
	}
	if status, body, err := get(client(), "/v1/whoami"); err != nil || status != http.StatusUnauthorized {
		t.Errorf("no certificate, no token = %d %s %v; want 401", status, body, err)
	}
}

func stringsReader(s string) io.Reader { return strings.NewReader(s) }
