package proof

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/sandgate/sandgate"
)

// HashSize is the size of a chain hash.
const HashSize = sha256.Size

// body is the canonical form of one event: the fields hashed and stored as
// audit_events.body. Its JSON has sorted keys (the fields are declared in
// key order; the payload's maps encode sorted), no HTML escaping, times in
// RFC 3339 UTC with microseconds (what Postgres keeps), and omits empty
// fields. canonical.appendBody writes it (by hand, byte for byte what
// encoding/json writes for this struct); verify reads it back with this
// type.
type body struct {
	Actor          string          `json:"actor,omitempty"`
	ContainerID    string          `json:"container_id,omitempty"`
	CorrelationID  string          `json:"correlation_id,omitempty"`
	DecisionID     string          `json:"decision_id,omitempty"`
	EventID        string          `json:"event_id"`
	EventTime      string          `json:"event_time"`
	ExitCode       *int            `json:"exit_code,omitempty"`
	Node           string          `json:"node,omitempty"`
	Outcome        string          `json:"outcome,omitempty"`
	Payload        json.RawMessage `json:"payload,omitempty"`
	PolicyRevision string          `json:"policy_revision,omitempty"`
	RecordedAt     string          `json:"recorded_at"`
	RunID          string          `json:"run_id,omitempty"`
	Team           string          `json:"team,omitempty"`
	Type           string          `json:"type"`
}

// TimeLayout is how times appear in bodies: UTC, microseconds.
const TimeLayout = "2006-01-02T15:04:05.000000Z"

// CanonicalTime is t as the canonical form holds it: UTC, truncated to
// microseconds (what Postgres keeps of a timestamp).
func CanonicalTime(t time.Time) time.Time { return t.UTC().Truncate(time.Microsecond) }

// cleanText makes s storable in a Postgres text column: valid UTF-8 without
// NUL characters.
func cleanText(s string) string {
	if !utf8.ValidString(s) {
		s = strings.ToValidUTF8(s, "\uFFFD")
	}
	if strings.IndexByte(s, 0) >= 0 {
		s = strings.ReplaceAll(s, "\x00", "\uFFFD")
	}
	return s
}

// Canonical is an event in canonical form with its payload encoded (and
// Event.Payload nil): all a writer has left to do is stamp, hash and store
// it. Producers make it (Emit, Queue, Record), so the costly part of an
// event's encoding is spread over their goroutines instead of queueing in
// the one writer per chain.
type Canonical struct {
	sandgate.Event
	// payload is the event's payload as canonical JSON, nil without one.
	payload json.RawMessage
}

// Canonicalize cleans ev's text, truncates its time to microseconds in UTC
// and encodes its payload canonically (numbers kept as written, strings
// cleaned), once.
func Canonicalize(ev sandgate.Event) (Canonical, error) {
	ev.ID = cleanText(ev.ID)
	ev.Type = sandgate.EventType(cleanText(string(ev.Type)))
	ev.Time = CanonicalTime(ev.Time)
	for _, p := range []*string{&ev.Outcome, &ev.CorrelationID, &ev.RunID, &ev.DecisionID,
		&ev.ContainerID, &ev.Actor, &ev.Team, &ev.Node, &ev.PolicyRevision} {
		*p = cleanText(*p)
	}
	if len(ev.Payload) == 0 {
		ev.Payload = nil
		return Canonical{Event: ev}, nil
	}
	payload := plainPayload(ev.Payload)
	if payload == nil {
		p, err := canonicalPayload(ev.Payload)
		if err != nil {
			return Canonical{Event: ev}, err
		}
		if payload, err = marshalCanonical(p); err != nil {
			ev.Payload = p
			return Canonical{Event: ev}, err
		}
	}
	// Only the encoded payload is kept: the map would hold it again while
	// the event waits (queued, sealed in the spool, or in memory while the
	// spool is full).
	ev.Payload = nil
	return Canonical{Event: ev, payload: payload}, nil
}

// PayloadOf returns the payload a canonical body holds, as it is there
// (canonical JSON), or nil when it has none.
func PayloadOf(body []byte) (json.RawMessage, error) {
	var b struct {
		Payload json.RawMessage `json:"payload"`
	}
	if err := json.Unmarshal(body, &b); err != nil {
		return nil, err
	}
	return b.Payload, nil
}

// MustCanonicalize is Canonicalize for a producer that cannot fail: an
// unencodable payload (the only failure) is replaced by one that says why,
// so the event itself is still recorded.
func MustCanonicalize(ev sandgate.Event, log *slog.Logger) Canonical {
	c, err := Canonicalize(ev)
	if err != nil {
		log.Error("audit: payload not encodable; stored without it", "event_id", c.ID, "err", err)
		c.Payload = map[string]any{"payload_error": err.Error()}
		c, _ = Canonicalize(c.Event)
	}
	return c
}

// Body returns the canonical body bytes of c recorded at recordedAt: what
// is stored and hashed.
func (c *Canonical) Body(recordedAt time.Time) []byte {
	return c.appendBody(make([]byte, 0, bodySizeHint+len(c.payload)), recordedAt)
}

// bodySizeHint is about what a body holds besides its payload.
const bodySizeHint = 384

// PayloadJSON returns c's payload as canonical JSON, nil without one.
func (c *Canonical) PayloadJSON() json.RawMessage { return c.payload }

// plainPayload returns p's canonical JSON when encoding it once gives it:
// p holds only maps with string keys, slices, strings, booleans and
// numbers (no structs, whose fields would not come out sorted, and no
// custom encoders), and its text is valid UTF-8 without NUL (see
// appendCanonical). Otherwise it returns nil and canonicalPayload does the
// work.
func plainPayload(p map[string]any) json.RawMessage {
	data, ok := appendCanonical(make([]byte, 0, 256), p)
	if !ok {
		return nil
	}
	return data
}

// canonicalPayload round-trips p through JSON so that what is stored is
// exactly what a reader decodes: maps with string keys, json.Number
// numbers, and strings without NUL characters (jsonb refuses them).
func canonicalPayload(p map[string]any) (map[string]any, error) {
	data, err := marshalCanonical(p)
	if err != nil {
		return nil, fmt.Errorf("encode payload: %w", err)
	}
	var out map[string]any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&out); err != nil {
		return nil, fmt.Errorf("decode payload: %w", err)
	}
	return cleanValue(out).(map[string]any), nil
}

func cleanValue(v any) any {
	switch x := v.(type) {
	case string:
		return cleanText(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[cleanText(k)] = cleanValue(e)
		}
		return out
	case []any:
		for i := range x {
			x[i] = cleanValue(x[i])
		}
		return x
	}
	return v
}

// marshalCanonical encodes v as JSON without HTML escaping and without the
// trailing newline. Maps encode with sorted keys; body's fields are
// declared in sorted order.
func marshalCanonical(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// ChainHash returns SHA-256(prev ‖ uint16be(len(chainID)) ‖ chainID ‖
// uint64be(seq) ‖ body): the hash of one trail entry. The length prefix
// keeps chain IDs from running into the sequence number.
func ChainHash(prev []byte, chainID string, seq int64, body []byte) []byte {
	h := sha256.New()
	if len(prev) == 0 {
		prev = make([]byte, HashSize)
	}
	h.Write(prev)
	var n [8]byte
	binary.BigEndian.PutUint16(n[:2], uint16(len(chainID)))
	h.Write(n[:2])
	h.Write([]byte(chainID))
	binary.BigEndian.PutUint64(n[:], uint64(seq))
	h.Write(n[:])
	h.Write(body)
	return h.Sum(nil)
}
