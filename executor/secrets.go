package executor

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/docker/docker/api/types/mount"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/egress"
)

// An egress run with secrets (Job.Secrets) gets, in its container, a
// placeholder of each secret in the variable its binding names, and the
// certificate of its own authority (egress.RunCA) as its trust: a file
// bind-mounted read-only at TrustPath and named by the variables TLS
// clients read. The authority's key and the values stay in this process:
// the egress proxy is given them when the run's address is registered
// (egress.go), and terminates the run's TLS with the authority to write
// the values into its requests (docs/secrets.md).

// DefaultTrustDir holds each run's trust file while it runs.
const DefaultTrustDir = "/run/sandgate/trust"

// TrustPath is where a run with secrets finds its authority's
// certificate.
const TrustPath = "/etc/sandgate/ca.pem"

// TrustEnv are the variables that name TrustPath in a run with secrets:
// OpenSSL (curl, Python's ssl), Python's requests, Node.js, curl and git.
var TrustEnv = []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "NODE_EXTRA_CA_CERTS", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO"}

// runSecrets is what a run with secrets holds while it runs.
type runSecrets struct {
	ca      *egress.RunCA
	secrets []egress.Secret
	dir     string
}

// withSecrets gives r's container its placeholders and its trust, and
// keeps for the proxy what it will be given; nil for a run without
// secrets. The caller removes the trust file once the container is gone.
func (e *Executor) withSecrets(h *handle, set *settings) (*runSecrets, error) {
	job := h.job
	if len(job.Secrets) == 0 {
		return nil, nil
	}
	refuse := func(err error) error {
		return sandgate.WrapError(sandgate.CodeContainerCreate, err, "the run's secrets cannot be prepared")
	}
	ca, err := egress.NewRunCA(job.RunID, e.now())
	if err != nil {
		return nil, refuse(err)
	}
	var nonce [16]byte
	_, _ = rand.Read(nonce[:])
	rs := &runSecrets{ca: ca}
	env := map[string]string{}
	for _, s := range job.Secrets {
		ph := sandgate.SecretPlaceholder(s.Name, hex.EncodeToString(nonce[:]))
		rs.secrets = append(rs.secrets, egress.Secret{Name: s.Name, Version: s.Version, Placeholder: ph, Value: s.Value,
			Destinations: s.Destinations, Header: s.Header, Format: s.Format})
		env[s.Env] = ph
	}
	root := e.cfg.TrustDir
	if root == "" {
		root = DefaultTrustDir
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return nil, refuse(err)
	}
	if rs.dir, err = os.MkdirTemp(root, "run-"); err != nil {
		return nil, refuse(err)
	}
	file := filepath.Join(rs.dir, "ca.pem")
	if err := os.Chmod(rs.dir, 0o755); err != nil {
		rs.remove()
		return nil, refuse(err)
	}
	if err := os.WriteFile(file, ca.CertPEM(), 0o644); err != nil {
		rs.remove()
		return nil, refuse(err)
	}
	for _, k := range TrustEnv {
		env[k] = TrustPath
	}
	set.config.Env = withEnv(set.config.Env, env)
	set.host.Mounts = append(append([]mount.Mount(nil), set.host.Mounts...), mount.Mount{
		Type: mount.TypeBind, Source: file, Target: TrustPath, ReadOnly: true,
		BindOptions: &mount.BindOptions{Propagation: mount.PropagationRPrivate},
	})
	return rs, nil
}

// withEnv is env with the variables of set, each replacing any entry of
// its name.
func withEnv(env []string, set map[string]string) []string {
	out := make([]string, 0, len(env)+len(set))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		if _, ok := set[k]; !ok {
			out = append(out, kv)
		}
	}
	for k, v := range set {
		out = append(out, fmt.Sprintf("%s=%s", k, v))
	}
	return out
}

// remove removes the run's trust file.
func (rs *runSecrets) remove() {
	if rs != nil && rs.dir != "" {
		_ = os.RemoveAll(rs.dir)
	}
}

// proxyRun adds the run's secrets and authority to what the proxy is
// told of it.
func (rs *runSecrets) proxyRun(run *egress.Run) {
	if rs != nil {
		run.Secrets, run.CA = rs.secrets, rs.ca
	}
}
