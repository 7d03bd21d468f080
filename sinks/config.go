// Package sinks delivers the audit trail into the tools a security team
// already runs: RFC 5424 syslog over TCP or TLS with octet-counting
// framing (RFC 6587), and a signed HTTPS webhook. Each event is sent as
// OCSF (ocsf.go says which class each event type maps to, and why) or as
// the API's audit record JSON.
//
// This package turns records into bytes and bytes into acknowledged
// deliveries; which records, in what order, and where each sink stands
// in the trail is package audit's (Streamer), which owns the database.
// It links the standard library, the root package and sigs.k8s.io/yaml
// only.
package sinks

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/sandgate/sandgate"
)

// The sink types and formats.
const (
	TypeSyslog  = "syslog"
	TypeWebhook = "webhook"

	FormatOCSF     = "ocsf"
	FormatSandgate = "sandgate"
)

// Limits and defaults of a sinks file.
const (
	MaxSinks          = 32
	DefaultBatchSize  = 100
	MaxBatchSize      = 10_000
	DefaultLagWarning = time.Minute
	DefaultTimeout    = 10 * time.Second
	DefaultPoll       = time.Second
	// DefaultSDID names the RFC 5424 structured data element. 32473 is
	// the private enterprise number RFC 5612 reserves for documentation;
	// a site with its own number sets sd_id.
	DefaultSDID = "sandgate@32473"
)

// File is a sinks file (SANDGATE_SINKS_FILE), YAML or JSON.
type File struct {
	// PollInterval is how often a caught-up sink looks for new events
	// (default 1s).
	PollInterval Duration `json:"poll_interval,omitempty"`
	Sinks        []Spec   `json:"sinks"`
}

// Spec is one sink of a sinks file.
type Spec struct {
	// Name identifies the sink: its cursor in Postgres and its lock are
	// keyed by it, so renaming a sink starts it afresh.
	Name string `json:"name"`
	// Type is "syslog" or "webhook".
	Type string `json:"type"`
	// Format is "ocsf" (default) or "sandgate" (the API's audit record).
	Format string `json:"format,omitempty"`
	// BatchSize is the most events sent at once (default 100).
	BatchSize int `json:"batch_size,omitempty"`
	// Types sends only these event types; empty sends all.
	Types []string `json:"types,omitempty"`
	// Start is where a new sink begins: "oldest" (default: every event
	// still in the trail) or "newest" (events recorded after its first
	// start).
	Start string `json:"start,omitempty"`
	// LagWarning is how far behind (in time) the sink may fall before
	// readiness warns (default 1m). A failing sink warns at once.
	LagWarning Duration `json:"lag_warning,omitempty"`
	// Timeout bounds one delivery attempt (default 10s).
	Timeout Duration `json:"timeout,omitempty"`

	Syslog  *SyslogSpec  `json:"syslog,omitempty"`
	Webhook *WebhookSpec `json:"webhook,omitempty"`
}

// SyslogSpec is where and how a syslog sink sends.
type SyslogSpec struct {
	// Address is the receiver's host:port (TCP).
	Address string `json:"address"`
	// TLS wraps the connection in TLS (RFC 5425); CAFile verifies the
	// receiver (default: the system's roots), ServerName is the name its
	// certificate must carry (default: the host of Address), CertFile and
	// KeyFile a client certificate for a receiver that asks for one.
	TLS        bool   `json:"tls,omitempty"`
	CAFile     string `json:"ca_file,omitempty"`
	ServerName string `json:"server_name,omitempty"`
	CertFile   string `json:"cert_file,omitempty"`
	KeyFile    string `json:"key_file,omitempty"`
	// Facility is the RFC 5424 facility, by name or number (default
	// "audit", 13: log audit).
	Facility string `json:"facility,omitempty"`
	// AppName is the APP-NAME field (default "sandgate").
	AppName string `json:"app_name,omitempty"`
	// SDID names the structured data element (default sandgate@32473).
	SDID string `json:"sd_id,omitempty"`
}

// WebhookSpec is where and how a webhook sink POSTs.
type WebhookSpec struct {
	// URL is the receiver: https, or http to a loopback address (or
	// anywhere with AllowHTTP).
	URL string `json:"url"`
	// SecretFile holds the HMAC key, hex (at least 16 bytes), the same
	// form as SANDGATE_CALLBACK_KEY_FILE; the signature is that of
	// completion callbacks.
	SecretFile string `json:"secret_file"`
	// AllowHTTP permits http:// to a host that is not loopback: the
	// events then cross the network in clear.
	AllowHTTP bool `json:"allow_http,omitempty"`
	// CAFile verifies an https receiver (default: the system's roots).
	CAFile string `json:"ca_file,omitempty"`
}

// Duration is a time.Duration written as "30s", "2m" in a sinks file.
type Duration time.Duration

// UnmarshalJSON reads a Go duration string.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string like \"30s\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil || v < 0 {
		return fmt.Errorf("%q is not a duration like \"30s\"", s)
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9_.-]{0,62}$`)

// Load reads and checks a sinks file.
func Load(path string) (File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return File{}, fmt.Errorf("sinks file: %w", err)
	}
	f, err := Parse(data)
	if err != nil {
		return File{}, fmt.Errorf("sinks file %s: %w", path, err)
	}
	return f, nil
}

// Parse decodes a sinks file (YAML or JSON; unknown fields refused),
// fills in the defaults and checks every sink. A bad value is
// INVALID-REQUEST naming the field.
func Parse(data []byte) (File, error) {
	var f File
	if err := yaml.UnmarshalStrict(data, &f); err != nil {
		return File{}, sandgate.Errorf(sandgate.CodeInvalidRequest, "not a sinks file: %v", err)
	}
	if f.PollInterval == 0 {
		f.PollInterval = Duration(DefaultPoll)
	}
	if len(f.Sinks) > MaxSinks {
		return File{}, sandgate.FieldError("sinks", "at most %d sinks", MaxSinks)
	}
	seen := map[string]bool{}
	for i := range f.Sinks {
		s := &f.Sinks[i]
		if err := s.check(fmt.Sprintf("sinks[%d]", i)); err != nil {
			return File{}, err
		}
		if seen[s.Name] {
			return File{}, sandgate.FieldError(fmt.Sprintf("sinks[%d].name", i), "%q is used twice", s.Name)
		}
		seen[s.Name] = true
	}
	return f, nil
}

// check fills in s's defaults and checks it; at names the sink.
func (s *Spec) check(at string) error {
	bad := func(field, format string, args ...any) error {
		return sandgate.FieldError(at+"."+field, format, args...)
	}
	if !nameRE.MatchString(s.Name) {
		return bad("name", "must be 1 to 63 of a-z, 0-9, '.', '_', '-', starting with a letter or digit")
	}
	switch s.Format {
	case "":
		s.Format = FormatOCSF
	case FormatOCSF, FormatSandgate:
	default:
		return bad("format", "must be %q or %q, not %q", FormatOCSF, FormatSandgate, s.Format)
	}
	switch {
	case s.BatchSize == 0:
		s.BatchSize = DefaultBatchSize
	case s.BatchSize < 0 || s.BatchSize > MaxBatchSize:
		return bad("batch_size", "must be from 1 to %d", MaxBatchSize)
	}
	for j, t := range s.Types {
		if !sandgate.EventType(t).Known() {
			return bad(fmt.Sprintf("types[%d]", j), "%q is not an event type", t)
		}
	}
	switch s.Start {
	case "":
		s.Start = "oldest"
	case "oldest", "newest":
	default:
		return bad("start", "must be \"oldest\" or \"newest\", not %q", s.Start)
	}
	if s.LagWarning == 0 {
		s.LagWarning = Duration(DefaultLagWarning)
	}
	if s.Timeout == 0 {
		s.Timeout = Duration(DefaultTimeout)
	}
	switch s.Type {
	case TypeSyslog:
		if s.Syslog == nil || s.Webhook != nil {
			return bad("syslog", "a syslog sink needs a syslog section and no webhook section")
		}
		return s.Syslog.check(at + ".syslog")
	case TypeWebhook:
		if s.Webhook == nil || s.Syslog != nil {
			return bad("webhook", "a webhook sink needs a webhook section and no syslog section")
		}
		return s.Webhook.check(at + ".webhook")
	default:
		return bad("type", "must be %q or %q, not %q", TypeSyslog, TypeWebhook, s.Type)
	}
}

func (s *SyslogSpec) check(at string) error {
	host, port, err := net.SplitHostPort(s.Address)
	if err != nil || host == "" || port == "" {
		return sandgate.FieldError(at+".address", "must be host:port")
	}
	if _, err := facility(s.Facility); err != nil {
		return sandgate.FieldError(at+".facility", "%v", err)
	}
	if (s.CertFile == "") != (s.KeyFile == "") {
		return sandgate.FieldError(at+".cert_file", "cert_file and key_file go together")
	}
	if !s.TLS && (s.CAFile != "" || s.CertFile != "" || s.ServerName != "") {
		return sandgate.FieldError(at+".tls", "ca_file, server_name and cert_file need tls: true")
	}
	if s.AppName == "" {
		s.AppName = "sandgate"
	}
	if !printASCII(s.AppName, 48) {
		return sandgate.FieldError(at+".app_name", "must be 1 to 48 printable ASCII characters without spaces")
	}
	if s.SDID == "" {
		s.SDID = DefaultSDID
	}
	if !printASCII(s.SDID, 32) || strings.ContainsAny(s.SDID, `= ]"`) || !strings.Contains(s.SDID, "@") {
		return sandgate.FieldError(at+".sd_id", "must be name@number, up to 32 printable ASCII characters")
	}
	return nil
}

func (w *WebhookSpec) check(at string) error {
	u, err := url.Parse(w.URL)
	if err != nil || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return sandgate.FieldError(at+".url", "must be an absolute https (or http) URL")
	}
	if u.User != nil {
		return sandgate.FieldError(at+".url", "must not carry credentials; the HMAC signature authenticates sandgate")
	}
	if u.Scheme == "http" && !w.AllowHTTP && !loopbackHost(u.Hostname()) {
		return sandgate.FieldError(at+".url", "http is allowed to a loopback address only; use https, or allow_http: true to send the trail in clear")
	}
	if w.SecretFile == "" {
		return sandgate.FieldError(at+".secret_file", "is required: the receiver checks the HMAC signature with it")
	}
	return nil
}

func loopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.IsLoopback()
}

// printASCII reports whether s is 1 to max characters of RFC 5424's
// PRINTUSASCII (33 to 126).
func printASCII(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < 33 || s[i] > 126 {
			return false
		}
	}
	return true
}
