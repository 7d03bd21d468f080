package sinks

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate"
)

// The headers of a webhook delivery. Timestamp and signature are those
// of completion callbacks: "v1=" + hex(HMAC-SHA256(key, timestamp + "." +
// body)), see sandgate.SignHMAC.
const (
	HeaderTimestamp = "X-Sandgate-Timestamp"
	HeaderSignature = "X-Sandgate-Signature"
	HeaderSink      = "X-Sandgate-Sink"
	HeaderFormat    = "X-Sandgate-Format"
)

// MinSecretBytes is the shortest webhook key accepted.
const MinSecretBytes = 16

// maxAnswer is how much of a receiver's answer is read, so that its
// connection can be reused.
const maxAnswer = 64 << 10

// webhookSender POSTs each batch as a JSON array of events, signed.
type webhookSender struct {
	name, format, url string
	key               []byte
	enc               Encoder
	timeout           time.Duration
	client            *http.Client
	now               func() time.Time
}

func newWebhook(s Spec, enc Encoder) (*webhookSender, error) {
	key, err := LoadSecret(s.Webhook.SecretFile)
	if err != nil {
		return nil, fmt.Errorf("sink %s: %w", s.Name, err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// The operator chose the receiver; a proxy from the environment
	// would send the trail somewhere else.
	tr.Proxy = nil
	tr.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
	if s.Webhook.CAFile != "" {
		pem, err := os.ReadFile(s.Webhook.CAFile)
		if err != nil {
			return nil, fmt.Errorf("sink %s: ca_file: %w", s.Name, err)
		}
		tr.TLSClientConfig.RootCAs = x509.NewCertPool()
		if !tr.TLSClientConfig.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("sink %s: ca_file %s holds no PEM certificate", s.Name, s.Webhook.CAFile)
		}
	}
	return &webhookSender{
		name: s.Name, format: s.Format, url: s.Webhook.URL, key: key, enc: enc,
		timeout: time.Duration(s.Timeout), now: time.Now,
		client: &http.Client{
			Transport: tr,
			// A redirect is not followed: the signed trail goes where
			// the sinks file says, nowhere else.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
	}, nil
}

// LoadSecret reads a hex HMAC key (whitespace around it ignored) of at
// least MinSecretBytes.
func LoadSecret(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("secret_file: %w", err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(data)))
	if err != nil {
		return nil, fmt.Errorf("secret_file %s: not hex", path)
	}
	if len(key) < MinSecretBytes {
		return nil, fmt.Errorf("secret_file %s: %d bytes, want at least %d", path, len(key), MinSecretBytes)
	}
	return key, nil
}

// Deliver POSTs the batch; only a 2xx answer acknowledges it.
func (w *webhookSender) Deliver(ctx context.Context, recs []sandgate.AuditRecord) error {
	var body bytes.Buffer
	body.WriteByte('[')
	for i, r := range recs {
		ev, err := w.enc(r)
		if err != nil {
			return fmt.Errorf("encode event %s: %w", r.ID, err)
		}
		if i > 0 {
			body.WriteByte(',')
		}
		body.Write(ev)
	}
	body.WriteByte(']')
	ctx, cancel := context.WithTimeout(ctx, w.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, w.url, bytes.NewReader(body.Bytes()))
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	ts := strconv.FormatInt(w.now().Unix(), 10)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("User-Agent", "sandgate-audit-sink")
	req.Header.Set(HeaderTimestamp, ts)
	req.Header.Set(HeaderSignature, sandgate.SignHMAC(w.key, ts, body.Bytes()))
	req.Header.Set(HeaderSink, w.name)
	req.Header.Set(HeaderFormat, w.format)
	resp, err := w.client.Do(req)
	if err != nil {
		return fmt.Errorf("webhook: %w", err)
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswer))
	resp.Body.Close()
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return fmt.Errorf("webhook: the receiver answered %s", resp.Status)
	}
	return nil
}

// Close closes idle connections.
func (w *webhookSender) Close() error {
	w.client.CloseIdleConnections()
	return nil
}
