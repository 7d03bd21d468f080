package audit

import (
	"slices"

	"github.com/sandgate/sandgate"
)

// Redact returns a deep copy of doc with secrets replaced by keyed hashes
// (sandgate.Mask, the masking the gateway uses too): every value under
// "env" (keys stay readable), and every field that a mask path names. A
// path is dotted, its segments object keys, array indices or "*"
// ("stdin", "labels.token", "command.1", "mounts.*.source"); when it names
// an object or array, every leaf value under it is hashed. Strings are
// hashed as they are, other values as their JSON. Paths that name nothing
// are ignored.
func Redact(key []byte, doc map[string]any, mask []string) map[string]any {
	out, _ := deepCopy(doc).(map[string]any)
	if out == nil {
		out = map[string]any{}
	}
	sandgate.Mask(key, out, slices.Concat([]string{"env"}, mask)...)
	return out
}

// RedactSpec is the run spec's JSON document with env values, stdin and
// the mask paths hashed (sandgate.MaskSpec): what the gateway puts in a
// decision's payload, with the decision's Mask.
func RedactSpec(key []byte, spec sandgate.RunSpec, mask []string) map[string]any {
	return sandgate.MaskSpec(key, spec, mask)
}

// Redact is the package Redact with this Store's mask key.
func (s *Store) Redact(doc map[string]any, mask []string) map[string]any {
	return Redact(s.maskKey, doc, mask)
}

// RedactSpec is the package RedactSpec with this Store's mask key.
func (s *Store) RedactSpec(spec sandgate.RunSpec, mask []string) map[string]any {
	return RedactSpec(s.maskKey, spec, mask)
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
