package sinks

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sandgate/sandgate"
)

var facilities = map[string]int{
	"kern": 0, "user": 1, "mail": 2, "daemon": 3, "auth": 4, "syslog": 5, "lpr": 6, "news": 7,
	"uucp": 8, "cron": 9, "authpriv": 10, "ftp": 11, "ntp": 12, "audit": 13, "alert": 14, "clock": 15,
	"local0": 16, "local1": 17, "local2": 18, "local3": 19, "local4": 20, "local5": 21, "local6": 22, "local7": 23,
}

// facility is a facility's number, by name or number; "" is audit (13).
func facility(s string) (int, error) {
	if s == "" {
		return 13, nil
	}
	if n, ok := facilities[strings.ToLower(s)]; ok {
		return n, nil
	}
	if n, err := strconv.Atoi(s); err == nil && n >= 0 && n <= 23 {
		return n, nil
	}
	return 0, fmt.Errorf("%q is not a syslog facility (a name like audit, authpriv, local0, or 0 to 23)", s)
}

// probeWait is how long a syslog sink listens, after writing a batch, for
// the receiver closing or resetting the connection. Syslog has no
// acknowledgement; this catches a receiver that died under the batch.
const probeWait = 5 * time.Millisecond

// syslogSender sends RFC 5424 messages over one TCP (or TLS) connection,
// octet-counted (RFC 6587 section 3.4.1), opened on first use and again
// after any failure. Its methods are called from one goroutine.
type syslogSender struct {
	spec     SyslogSpec
	timeout  time.Duration
	enc      Encoder
	facility int
	tls      *tls.Config
	conn     net.Conn
	buf      bytes.Buffer
}

func newSyslog(s Spec, enc Encoder) (*syslogSender, error) {
	fac, _ := facility(s.Syslog.Facility)
	out := &syslogSender{spec: *s.Syslog, timeout: time.Duration(s.Timeout), enc: enc, facility: fac}
	if s.Syslog.TLS {
		host, _, _ := net.SplitHostPort(s.Syslog.Address)
		cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: host}
		if s.Syslog.ServerName != "" {
			cfg.ServerName = s.Syslog.ServerName
		}
		if s.Syslog.CAFile != "" {
			pem, err := os.ReadFile(s.Syslog.CAFile)
			if err != nil {
				return nil, fmt.Errorf("sink %s: ca_file: %w", s.Name, err)
			}
			cfg.RootCAs = x509.NewCertPool()
			if !cfg.RootCAs.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("sink %s: ca_file %s holds no PEM certificate", s.Name, s.Syslog.CAFile)
			}
		}
		if s.Syslog.CertFile != "" {
			cert, err := tls.LoadX509KeyPair(s.Syslog.CertFile, s.Syslog.KeyFile)
			if err != nil {
				return nil, fmt.Errorf("sink %s: client certificate: %w", s.Name, err)
			}
			cfg.Certificates = []tls.Certificate{cert}
		}
		out.tls = cfg
	}
	return out, nil
}

// Deliver writes the batch and returns nil when every byte was written
// and the receiver has not closed the connection: the most TCP syslog
// can tell. Any failure closes the connection; the next call opens
// another and the caller sends the batch again.
func (s *syslogSender) Deliver(ctx context.Context, recs []sandgate.AuditRecord) error {
	s.buf.Reset()
	for _, r := range recs {
		msg, err := s.message(r)
		if err != nil {
			return err
		}
		s.buf.WriteString(strconv.Itoa(len(msg)))
		s.buf.WriteByte(' ')
		s.buf.Write(msg)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	if s.conn != nil && !s.alive(0) {
		s.drop()
	}
	if s.conn == nil {
		if err := s.dial(ctx); err != nil {
			return err
		}
	}
	deadline, _ := ctx.Deadline()
	_ = s.conn.SetWriteDeadline(deadline)
	// A write blocked on a receiver that stopped reading ends when ctx
	// does (a gateway stopping), not only at the timeout.
	conn := s.conn
	stop := context.AfterFunc(ctx, func() { _ = conn.SetWriteDeadline(time.Now()) })
	_, err := s.conn.Write(s.buf.Bytes())
	stop()
	if err != nil {
		s.drop()
		return fmt.Errorf("syslog %s: write: %w", s.spec.Address, err)
	}
	if !s.alive(probeWait) {
		s.drop()
		return fmt.Errorf("syslog %s: the receiver closed the connection under the batch", s.spec.Address)
	}
	return nil
}

func (s *syslogSender) dial(ctx context.Context) error {
	d := &net.Dialer{KeepAlive: 30 * time.Second}
	var (
		c   net.Conn
		err error
	)
	if s.tls != nil {
		c, err = (&tls.Dialer{NetDialer: d, Config: s.tls}).DialContext(ctx, "tcp", s.spec.Address)
	} else {
		c, err = d.DialContext(ctx, "tcp", s.spec.Address)
	}
	if err != nil {
		return fmt.Errorf("syslog %s: connect: %w", s.spec.Address, err)
	}
	s.conn = c
	return nil
}

// alive reads from the connection for up to wait: a syslog receiver never
// writes, so a timeout means alive and anything else (EOF, a reset, a TLS
// alert, bytes) means the connection is no good.
func (s *syslogSender) alive(wait time.Duration) bool {
	if wait <= 0 {
		wait = time.Millisecond
	}
	_ = s.conn.SetReadDeadline(time.Now().Add(wait))
	var b [1]byte
	_, err := s.conn.Read(b[:])
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		_ = s.conn.SetReadDeadline(time.Time{})
		return true
	}
	return false
}

func (s *syslogSender) drop() {
	if s.conn != nil {
		_ = s.conn.Close()
		s.conn = nil
	}
}

// Close closes the connection.
func (s *syslogSender) Close() error {
	s.drop()
	return nil
}

// message is one RFC 5424 SYSLOG-MSG: PRI, version 1, the event's time,
// the node as HOSTNAME, APP-NAME, no PROCID, the event type as MSGID, a
// structured data element with the event's identity, and the event in the
// sink's format as MSG.
func (s *syslogSender) message(r sandgate.AuditRecord) ([]byte, error) {
	body, err := s.enc(r)
	if err != nil {
		return nil, fmt.Errorf("encode event %s: %w", r.ID, err)
	}
	_, _, sev := Severity(r.Type)
	var b bytes.Buffer
	fmt.Fprintf(&b, "<%d>1 %s %s %s - %s [%s", s.facility*8+sev,
		r.Time.UTC().Format("2006-01-02T15:04:05.000000Z"),
		header(r.Node, 255), s.spec.AppName, header(string(r.Type), 32), s.spec.SDID)
	param := func(k, v string) {
		if v == "" {
			return
		}
		b.WriteString(" " + k + `="`)
		b.WriteString(sdEscaper.Replace(v))
		b.WriteByte('"')
	}
	param("event_id", r.ID)
	param("chain_id", r.ChainID)
	param("seq", strconv.FormatInt(r.Seq, 10))
	param("correlation_id", r.CorrelationID)
	param("run_id", r.RunID)
	b.WriteString("] ")
	b.Write(body)
	return b.Bytes(), nil
}

// sdEscaper escapes a PARAM-VALUE (RFC 5424 section 6.3.3).
var sdEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, `]`, `\]`)

// header makes v a header field: printable ASCII without spaces, at most
// max characters, "-" when empty.
func header(v string, max int) string {
	b := make([]byte, 0, min(len(v), max))
	for i := 0; i < len(v) && len(b) < max; i++ {
		if c := v[i]; c >= 33 && c <= 126 {
			b = append(b, c)
		} else {
			b = append(b, '_')
		}
	}
	if len(b) == 0 {
		return "-"
	}
	return string(b)
}
