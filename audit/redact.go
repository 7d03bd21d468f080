package audit

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"

	"github.com/sandgate/sandgate"
)

// HashPrefix marks a value replaced by its keyed hash.
const HashPrefix = "hmac-sha256:"

// KeyedHash returns "hmac-sha256:" and the hex HMAC-SHA256 of value under
// key: equal secrets give equal hashes, so auditors can correlate without
// seeing them.
func KeyedHash(key []byte, value string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(value))
	return HashPrefix + hex.EncodeToString(m.Sum(nil))
}

// Redact returns a deep copy of doc with secrets replaced by keyed hashes:
// every value under "env" (keys stay readable), and every field that a
// mask path names. A path is dotted ("stdin", "labels.token", "env");
// when it names an object or array, every leaf value under it is hashed.
// Strings are hashed as they are, other values as their JSON. Paths that
// name nothing are ignored.
func Redact(key []byte, doc map[string]any, mask []string) map[string]any {
	out, _ := deepCopy(doc).(map[string]any)
	if out == nil {
		out = map[string]any{}
	}
	return redactInPlace(key, out, mask)
}

// redactInPlace hashes, in doc itself, env and every path of mask.
func redactInPlace(key []byte, doc map[string]any, mask []string) map[string]any {
	for _, path := range append([]string{"env"}, mask...) {
		if path != "" {
			redactPath(key, doc, strings.Split(path, "."))
		}
	}
	return doc
}

// RedactSpec is Redact over a run spec's JSON document (built fresh, so
// hashed in place): what the gateway puts in a decision's payload, with
// the decision's Mask.
func RedactSpec(key []byte, spec sandgate.RunSpec, mask []string) map[string]any {
	return redactInPlace(key, spec.Document(), mask)
}

// Redact is the package Redact with this Store's mask key.
func (s *Store) Redact(doc map[string]any, mask []string) map[string]any {
	return Redact(s.maskKey, doc, mask)
}

// RedactSpec is the package RedactSpec with this Store's mask key.
func (s *Store) RedactSpec(spec sandgate.RunSpec, mask []string) map[string]any {
	return RedactSpec(s.maskKey, spec, mask)
}

func redactPath(key []byte, m map[string]any, path []string) {
	v, ok := m[path[0]]
	if !ok {
		return
	}
	if len(path) == 1 {
		m[path[0]] = hashLeaves(key, v)
		return
	}
	if child, ok := v.(map[string]any); ok {
		redactPath(key, child, path[1:])
	}
}

func hashLeaves(key []byte, v any) any {
	switch x := v.(type) {
	case nil:
		return nil
	case string:
		if strings.HasPrefix(x, HashPrefix) {
			return x
		}
		return KeyedHash(key, x)
	case map[string]any:
		for k, e := range x {
			x[k] = hashLeaves(key, e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = hashLeaves(key, e)
		}
		return x
	}
	data, _ := json.Marshal(v)
	return KeyedHash(key, string(data))
}

func deepCopy(v any) any {
	switch x := v.(type) {
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = deepCopy(e)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = deepCopy(e)
		}
		return out
	case map[string]string:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = e
		}
		return out
	case []string:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = e
		}
		return out
	}
	return v
}
