package egress

import (
	"errors"
	"fmt"
	"io"

	"golang.org/x/crypto/cryptobyte"
)

// The TLS values the ClientHello reader checks (RFC 8446 4, 5.1; RFC 6066 3).
const (
	recordTypeHandshake  = 0x16
	handshakeClientHello = 1
	extensionServerName  = 0
	nameTypeHostName     = 0
	// maxRecordPayload is the most a plaintext record may carry.
	maxRecordPayload = 1 << 14
	// maxHostName bounds a server name, as DNS bounds a name.
	maxHostName = 253
)

// maxClientHello bounds the bytes read for a ClientHello, its records'
// headers included (one is a few hundred bytes to a few KiB, with
// post-quantum key shares).
const maxClientHello = 64 << 10

// clientHello is the first flight of a tunnel, read whole and checked.
type clientHello struct {
	// serverName is the name the hello asks for, "" when it names none.
	serverName string
	// raw is every byte read: the hello's records, sent on unchanged.
	raw []byte
}

// readClientHello reads one ClientHello from r, reassembled from as many
// handshake records as it spans, and nothing after it. It accepts only
// what every server reads the same way: handshake records (an alert, a
// change-cipher-spec or any other record first is refused, as is an
// empty record) of version 3.0 to 3.3 holding at most 16 KiB each, whose
// payloads make exactly one ClientHello message, no byte more, of at
// most maxClientHello bytes, well-formed to its last byte with no
// extension twice and at most one host name (parseClientHello). Whatever
// else a tunnel begins with is an error, and the bytes read so far are
// never sent on.
func readClientHello(r io.Reader) (clientHello, error) {
	var raw, msg []byte
	var hdr [5]byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return clientHello{}, helloReadError("record header", len(raw), err)
		}
		vers, n := uint16(hdr[1])<<8|uint16(hdr[2]), int(hdr[3])<<8|int(hdr[4])
		switch {
		case hdr[0] != recordTypeHandshake:
			return clientHello{}, fmt.Errorf("the tunnel's first bytes are not a TLS handshake record (byte %d is %#02x): it carries TLS only", len(raw), hdr[0])
		case vers < 0x0300 || vers > 0x0303:
			return clientHello{}, fmt.Errorf("a handshake record of version %#04x: a ClientHello's record is of version 3.0 to 3.3", vers)
		case n == 0 || n > maxRecordPayload:
			return clientHello{}, fmt.Errorf("a handshake record of %d bytes: a record holds 1 to %d", n, maxRecordPayload)
		case len(raw)+len(hdr)+n > maxClientHello:
			return clientHello{}, fmt.Errorf("the ClientHello's records are longer than %d bytes", maxClientHello)
		}
		raw = append(raw, hdr[:]...)
		start := len(raw)
		raw = append(raw, make([]byte, n)...)
		if _, err := io.ReadFull(r, raw[start:]); err != nil {
			return clientHello{}, helloReadError("record", start, err)
		}
		msg = append(msg, raw[start:]...)
		if len(msg) < 4 {
			continue
		}
		if msg[0] != handshakeClientHello {
			return clientHello{}, fmt.Errorf("the first handshake message is of type %d, not a ClientHello", msg[0])
		}
		want := 4 + (int(msg[1])<<16 | int(msg[2])<<8 | int(msg[3]))
		switch {
		case want > maxClientHello:
			return clientHello{}, fmt.Errorf("a ClientHello of %d bytes: at most %d are read", want, maxClientHello)
		case len(msg) < want:
			continue
		case len(msg) > want:
			return clientHello{}, errors.New("the ClientHello's last record holds more than the ClientHello")
		}
		name, err := parseClientHello(msg[4:])
		if err != nil {
			return clientHello{}, fmt.Errorf("a malformed ClientHello: %w", err)
		}
		return clientHello{serverName: name, raw: raw}, nil
	}
}

func helloReadError(what string, at int, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("the tunnel ended %d bytes into a ClientHello, within a %s: it carries TLS only", at, what)
	}
	return fmt.Errorf("no whole ClientHello was read (%s at byte %d): %w", what, at, err)
}

// parseClientHello checks a ClientHello's body (RFC 8446 4.1.2) to its
// last byte and returns the host name it names, "" for none.
func parseClientHello(body []byte) (string, error) {
	s := cryptobyte.String(body)
	var vers uint16
	var random []byte
	var sessionID, suites, compression cryptobyte.String
	switch {
	case !s.ReadUint16(&vers) || !s.ReadBytes(&random, 32):
		return "", errors.New("it ends within its version or random")
	case vers>>8 != 3:
		return "", fmt.Errorf("its version is %#04x", vers)
	case !s.ReadUint8LengthPrefixed(&sessionID) || len(sessionID) > 32:
		return "", errors.New("its session id is cut short or longer than 32 bytes")
	case !s.ReadUint16LengthPrefixed(&suites) || len(suites) == 0 || len(suites)%2 != 0:
		return "", errors.New("its cipher suites are cut short, none, or of an odd length")
	case !s.ReadUint8LengthPrefixed(&compression) || len(compression) == 0:
		return "", errors.New("its compression methods are cut short or none")
	case s.Empty():
		return "", nil // no extensions (TLS 1.2 and before may send none)
	}
	var exts cryptobyte.String
	if !s.ReadUint16LengthPrefixed(&exts) || !s.Empty() {
		return "", errors.New("its extensions' length is not the rest of the message")
	}
	seen := map[uint16]bool{}
	var name string
	for !exts.Empty() {
		var typ uint16
		var data cryptobyte.String
		if !exts.ReadUint16(&typ) || !exts.ReadUint16LengthPrefixed(&data) {
			return "", errors.New("an extension is cut short")
		}
		if seen[typ] {
			return "", fmt.Errorf("extension %d is sent twice", typ)
		}
		seen[typ] = true
		if typ == extensionServerName {
			var err error
			if name, err = parseServerName(data); err != nil {
				return "", err
			}
		}
	}
	return name, nil
}

// parseServerName reads a server_name extension (RFC 6066 3): exactly
// one name, a host name. A list of several, or of another type, is read
// differently by different servers (Go's skips other types; OpenSSL's
// reads the first entry only), so it is refused.
func parseServerName(data cryptobyte.String) (string, error) {
	var list, name cryptobyte.String
	var typ uint8
	if !data.ReadUint16LengthPrefixed(&list) || !data.Empty() ||
		!list.ReadUint8(&typ) || !list.ReadUint16LengthPrefixed(&name) {
		return "", errors.New("its server_name extension is cut short or longer than its list")
	}
	switch {
	case !list.Empty():
		return "", errors.New("its server_name extension lists more than one name")
	case typ != nameTypeHostName:
		return "", fmt.Errorf("its server_name extension names a name of type %d, not a host name", typ)
	case len(name) == 0 || len(name) > maxHostName:
		return "", fmt.Errorf("its server name is %d bytes long", len(name))
	case name[len(name)-1] == '.':
		return "", errors.New("its server name ends in a dot")
	}
	for _, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '.' || c == '_') {
			return "", fmt.Errorf("its server name holds the byte %#02x", c)
		}
	}
	return string(name), nil
}
