package gateway

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/labstack/echo/v4"
)

// jsonSerializer is echo's JSON serializer without HTML escaping: "<" in a
// run's output or a label is three bytes of JSON, not six ("\u003c"), and
// the API is not an HTML page. Responses are written as they are encoded.
type jsonSerializer struct{}

// Serialize writes i as JSON.
func (jsonSerializer) Serialize(c echo.Context, i any, indent string) error {
	enc := json.NewEncoder(c.Response())
	enc.SetEscapeHTML(false)
	if indent != "" {
		enc.SetIndent("", indent)
	}
	return enc.Encode(i)
}

// Deserialize is echo's; sandgate decodes its bodies itself, strictly.
func (jsonSerializer) Deserialize(c echo.Context, i any) error {
	return echo.DefaultJSONSerializer{}.Deserialize(c, i)
}

// marshal is json.Marshal without HTML escaping and without the newline.
func marshal(v any) ([]byte, error) {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(b.Bytes(), []byte("\n")), nil
}

// streamChunk is how much of an output's data is encoded at a time.
const streamChunk = 32 << 10

// runHead is a run without its output: the part of its JSON that is small
// whatever the run printed. The outer fields hide RunView's.
type runHead struct {
	RunView
	Stdout *struct{} `json:"stdout,omitempty"`
	Stderr *struct{} `json:"stderr,omitempty"`
}

// renderRun answers with one run. Its output, up to the run's output
// limit on each stream, is encoded into the response a chunk at a time
// rather than into one buffer with everything else.
func renderRun(c echo.Context, status int, v RunView) error {
	w := c.Response()
	w.Header().Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	w.WriteHeader(status)
	bw := bufio.NewWriterSize(w, streamChunk)
	if err := writeRun(bw, v); err != nil {
		return err
	}
	if err := bw.WriteByte('\n'); err != nil {
		return err
	}
	return bw.Flush()
}

// renderRuns answers with a page of runs, each written as renderRun does.
func renderRuns(c echo.Context, list RunList) error {
	w := c.Response()
	w.Header().Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, streamChunk)
	bw.WriteString(`{"runs":[`)
	for i, v := range list.Runs {
		if i > 0 {
			bw.WriteByte(',')
		}
		if err := writeRun(bw, v); err != nil {
			return err
		}
	}
	next, err := marshal(list.NextCursor)
	if err != nil {
		return err
	}
	bw.WriteString(`],"next_cursor":`)
	bw.Write(next)
	bw.WriteString("}\n")
	return bw.Flush()
}

// writeRun writes one run as JSON: its head, then each output stream.
func writeRun(w *bufio.Writer, v RunView) error {
	head, err := marshal(runHead{RunView: v})
	if err != nil {
		return err
	}
	w.Write(head[:len(head)-1]) // without the closing brace
	for _, s := range []struct {
		name string
		o    OutputView
	}{{"stdout", v.Stdout}, {"stderr", v.Stderr}} {
		w.WriteString(`,"` + s.name + `":{"data":`)
		if err := writeJSONString(w, s.o.Data); err != nil {
			return err
		}
		w.WriteString(`,"encoding":` + strconv.Quote(s.o.Encoding))
		w.WriteString(`,"bytes":` + strconv.FormatInt(s.o.Bytes, 10))
		w.WriteString(`,"truncated":` + strconv.FormatBool(s.o.Truncated))
		if s.o.SHA256 != "" {
			w.WriteString(`,"sha256":` + strconv.Quote(s.o.SHA256))
		}
		w.WriteByte('}')
	}
	_, err = w.WriteString("}")
	return err
}

// writeJSONString writes s as a JSON string, encoding a chunk at a time;
// chunks end on rune boundaries, so each encodes exactly as the whole
// would.
func writeJSONString(w io.Writer, s string) error {
	if _, err := io.WriteString(w, `"`); err != nil {
		return err
	}
	for len(s) > 0 {
		n := min(len(s), streamChunk)
		for n < len(s) && n > 0 && !utf8.RuneStart(s[n]) {
			n--
		}
		if n == 0 {
			n = min(len(s), streamChunk)
		}
		enc, err := marshal(s[:n])
		if err != nil {
			return err
		}
		if _, err := w.Write(enc[1 : len(enc)-1]); err != nil {
			return err
		}
		s = s[n:]
	}
	_, err := io.WriteString(w, `"`)
	return err
}
