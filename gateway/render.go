package gateway

import (
	"bufio"
	"bytes"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"unicode/utf8"

	"github.com/labstack/echo/v4"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/gateway/api"
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
// whatever the run printed. The outer fields hide api.RunView's.
type runHead struct {
	api.RunView
	Stdout *struct{} `json:"stdout,omitempty"`
	Stderr *struct{} `json:"stderr,omitempty"`
}

// renderRun answers with one run. Its output, up to the run's output
// limit on each stream, is encoded into the response a chunk at a time
// from the bytes the run holds, never into a buffer of its own.
func renderRun(c echo.Context, status int, run *sandgate.Run) error {
	return renderRunWaiting(c, status, run, nil)
}

// renderRunWaiting is renderRun with the approval the run waits for.
func renderRunWaiting(c echo.Context, status int, run *sandgate.Run, a *sandgate.Approval) error {
	w := c.Response()
	w.Header().Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	w.WriteHeader(status)
	bw := bufio.NewWriterSize(w, streamChunk)
	if err := writeRun(bw, run, a); err != nil {
		return err
	}
	if err := bw.WriteByte('\n'); err != nil {
		return err
	}
	return bw.Flush()
}

// renderRuns answers with a page of runs, each written as renderRun does;
// load, when set, reads each run whole just before it is written.
func renderRuns(c echo.Context, runs []sandgate.Run, next string, load func(*sandgate.Run) (*sandgate.Run, error)) error {
	w := c.Response()
	w.Header().Set(echo.HeaderContentType, echo.MIMEApplicationJSON)
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(w, streamChunk)
	bw.WriteString(`{"runs":[`)
	for i := range runs {
		if i > 0 {
			bw.WriteByte(',')
		}
		r := &runs[i]
		if load != nil {
			full, err := load(r)
			if err != nil {
				// The status is sent: end the body short, as a broken
				// connection would, rather than claim a whole page.
				return err
			}
			r = full
		}
		if err := writeRun(bw, r, nil); err != nil {
			return err
		}
	}
	cursor, err := marshal(cursorPtr(next))
	if err != nil {
		return err
	}
	bw.WriteString(`],"next_cursor":`)
	bw.Write(cursor)
	bw.WriteString("}\n")
	return bw.Flush()
}

// writeRun writes one run as JSON: its head, then each output stream.
func writeRun(w *bufio.Writer, run *sandgate.Run, a *sandgate.Approval) error {
	v := runView(run)
	v.Approval = a
	head, err := marshal(runHead{RunView: v})
	if err != nil {
		return err
	}
	w.Write(head[:len(head)-1]) // without the closing brace
	for _, s := range []struct {
		name string
		o    sandgate.Output
	}{{"stdout", run.Stdout}, {"stderr", run.Stderr}} {
		w.WriteString(`,"` + s.name + `":`)
		if err := writeOutput(w, s.o); err != nil {
			return err
		}
	}
	_, err = w.WriteString("}")
	return err
}

// writeOutput writes one stream as an api.OutputView: from its raw bytes when
// the run holds them (text escaped, or base64, a chunk at a time), or from
// its stored data.
func writeOutput(w *bufio.Writer, o sandgate.Output) error {
	enc := o.Encoding
	w.WriteString(`{"data":`)
	switch {
	case o.Raw != nil:
		enc = sandgate.OutputEncoding(o.Raw)
		if enc == sandgate.EncodingBase64 {
			w.WriteByte('"')
			b64 := base64.NewEncoder(base64.StdEncoding, w)
			if _, err := b64.Write(o.Raw); err != nil {
				return err
			}
			if err := b64.Close(); err != nil {
				return err
			}
			w.WriteByte('"')
		} else if err := writeJSONString(w, o.Raw); err != nil {
			return err
		}
	default:
		if enc == "" {
			enc = sandgate.EncodingUTF8
		}
		if err := writeJSONString(w, o.Data); err != nil {
			return err
		}
	}
	w.WriteString(`,"encoding":` + strconv.Quote(enc))
	w.WriteString(`,"bytes":` + strconv.FormatInt(o.Bytes, 10))
	w.WriteString(`,"truncated":` + strconv.FormatBool(o.Truncated))
	if o.SHA256 != "" {
		w.WriteString(`,"sha256":` + strconv.Quote(o.SHA256))
	}
	_, err := w.WriteString("}")
	return err
}

// writeJSONString writes s as a JSON string, encoding a chunk at a time;
// chunks end on rune boundaries, so each encodes exactly as the whole
// would.
func writeJSONString[T string | []byte](w io.Writer, s T) error {
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
		enc, err := marshal(string(s[:n]))
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
