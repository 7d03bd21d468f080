package sandgate

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// DecodeStrict decodes one JSON value from r into v, refusing unknown
// fields, trailing data and bodies over limit bytes. It also refuses any
// string, key or value, that holds what sandgate could not store or would
// silently change: a NUL character (Postgres text and jsonb cannot hold
// one) and an unpaired UTF-16 surrogate escape (encoding/json would turn
// it into U+FFFD). Errors are *Error with code INVALID-REQUEST (naming
// the field) or TOO-LARGE.
func DecodeStrict(r io.Reader, v any, limit int64) error {
	data, err := io.ReadAll(io.LimitReader(r, limit+1))
	if err != nil {
		return WrapError(CodeInvalidRequest, err, "read body")
	}
	if int64(len(data)) > limit {
		return Errorf(CodeTooLarge, "body exceeds %d bytes", limit)
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return FieldError("body", "empty body, a JSON object is required")
	}
	// encoding/json would quietly turn invalid UTF-8 into U+FFFD and run
	// something other than what was sent; JSON must be UTF-8 (RFC 8259).
	if !utf8.Valid(data) {
		return FieldError("body", "is not valid UTF-8")
	}
	// A raw control character is invalid JSON, so a NUL or a surrogate
	// can only come as a \u escape: look further only when one is there.
	if bytes.Contains(data, []byte(`\u`)) {
		if err := checkStrings(data); err != nil {
			return err
		}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		if name, ok := unknownFieldName(err); ok {
			return unknownFieldError(name, data, v)
		}
		return jsonFieldError(err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return FieldError("body", "unexpected data after the JSON object")
	}
	return nil
}

// checkStrings walks the JSON document's tokens and refuses the first
// string that holds a NUL or an unpaired surrogate escape, naming where it
// is ("labels.a", "command[2]", or the key itself). Malformed JSON is left
// for the decoder to report.
func checkStrings(data []byte) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	type frame struct {
		array bool
		index int
		key   string
		// keyNext: in an object, the next string is a key.
		keyNext bool
	}
	var stack []frame
	path := func(last string) string {
		var b strings.Builder
		for _, f := range stack {
			switch {
			case f.array:
				b.WriteString("[" + strconv.Itoa(f.index) + "]")
			case !f.keyNext:
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(f.key)
			}
		}
		if last != "" {
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(last)
		}
		if b.Len() == 0 {
			return "body"
		}
		return b.String()
	}
	// value is called after each complete value, to move the container on.
	value := func() {
		if n := len(stack); n > 0 {
			if stack[n-1].array {
				stack[n-1].index++
			} else {
				stack[n-1].keyNext = true
			}
		}
	}
	prev := int64(0)
	for {
		tok, err := dec.Token()
		if err != nil {
			return nil // io.EOF, or malformed: the decoder says which
		}
		end := dec.InputOffset()
		raw := data[prev:end]
		prev = end
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				stack = append(stack, frame{keyNext: true})
			case '[':
				stack = append(stack, frame{array: true})
			default:
				stack = stack[:len(stack)-1]
				value()
			}
		case string:
			isKey := len(stack) > 0 && !stack[len(stack)-1].array && stack[len(stack)-1].keyNext
			if problem := stringProblem(t, raw); problem != "" {
				if isKey {
					return FieldError(path(strings.ReplaceAll(t, "\x00", `\u0000`)), "the key %s", problem)
				}
				return FieldError(path(""), "%s", problem)
			}
			if isKey {
				stack[len(stack)-1].key = t
				stack[len(stack)-1].keyNext = false
				continue
			}
			value()
		default:
			value()
		}
	}
}

// stringProblem says what is wrong with a decoded string whose raw JSON
// (with what preceded it since the last token) is raw, or "".
func stringProblem(s string, raw []byte) string {
	if strings.IndexByte(s, 0) >= 0 {
		return "must not contain a NUL character (\\u0000)"
	}
	if strings.ContainsRune(s, utf8.RuneError) && loneSurrogate(raw) {
		return "must not contain an unpaired UTF-16 surrogate escape"
	}
	return ""
}

// loneSurrogate reports whether raw holds a \uD800–\uDFFF escape that is
// not the high half of a pair followed by its low half.
func loneSurrogate(raw []byte) bool {
	for i := 0; i+6 <= len(raw); i++ {
		if raw[i] != '\\' {
			continue
		}
		if raw[i+1] == '\\' {
			i++ // an escaped backslash, not an escape
			continue
		}
		if raw[i+1] != 'u' {
			continue
		}
		r, err := strconv.ParseUint(string(raw[i+2:i+6]), 16, 32)
		if err != nil {
			continue
		}
		switch {
		case r >= 0xDC00 && r <= 0xDFFF:
			return true
		case r >= 0xD800 && r <= 0xDBFF:
			if i+12 > len(raw) || raw[i+6] != '\\' || raw[i+7] != 'u' {
				return true
			}
			lo, err := strconv.ParseUint(string(raw[i+8:i+12]), 16, 32)
			if err != nil || lo < 0xDC00 || lo > 0xDFFF {
				return true
			}
			i += 11
		default:
			i += 5
		}
	}
	return false
}

// jsonFieldError turns an encoding/json error into an INVALID-REQUEST error
// that names the field, when the decoder says which.
func jsonFieldError(err error) error {
	var typeErr *json.UnmarshalTypeError
	var syntaxErr *json.SyntaxError
	switch {
	case errors.As(err, &typeErr):
		field := typeErr.Field
		if field == "" {
			field = "body"
		}
		return FieldError(field, "must be %s, not JSON %s", jsonKind(typeErr.Type.Kind().String()), typeErr.Value)
	case errors.As(err, &syntaxErr):
		return FieldError("body", "malformed JSON at byte %d: %v", syntaxErr.Offset, syntaxErr)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return FieldError("body", "truncated JSON")
	}
	if name, ok := unknownFieldName(err); ok {
		return FieldError(name, "unknown field")
	}
	return FieldError("body", "invalid JSON: %v", err)
}

// unknownFieldName returns the key of encoding/json's unknown field
// error, which it reports only as text: `json: unknown field "x"`.
func unknownFieldName(err error) (string, bool) {
	name, ok := strings.CutPrefix(err.Error(), "json: unknown field ")
	if !ok {
		return "", false
	}
	if u, err := strconv.Unquote(name); err == nil {
		return u, true
	}
	return strings.Trim(name, `"`), true
}

func jsonKind(k string) string {
	switch k {
	case "slice", "array":
		return "an array"
	case "map", "struct":
		return "an object"
	case "int", "int64", "int32", "uint", "uint64":
		return "an integer"
	case "float64", "float32":
		return "a number"
	case "bool":
		return "a boolean"
	case "string":
		return "a string"
	case "ptr":
		return "a value of the right type"
	}
	return "a " + k
}
