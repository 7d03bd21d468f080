package gateway

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"strconv"
	"strings"

	"github.com/sandgate/sandgate"
)

// maskPrefix marks a value the audit trail keeps only as a keyed hash.
const maskPrefix = "hmac-sha256:"

// masker replaces secrets with keyed hashes (HMAC-SHA256) before a spec
// reaches the audit trail. Equal secrets hash equally under one key, so an
// auditor can still tell that two runs used the same value without learning
// it.
type masker struct {
	key []byte
}

// hash returns the keyed hash of v.
func (m masker) hash(v string) string {
	h := hmac.New(sha256.New, m.key)
	h.Write([]byte(v))
	return maskPrefix + hex.EncodeToString(h.Sum(nil))
}

// spec returns the spec as a JSON object with every env value, the stdin
// and every field a mask path names (dotted, such as "labels.token" or
// "command.2") replaced by its keyed hash. A path naming an object or an
// array masks every value below it; a path naming nothing masks nothing.
func (m masker) spec(s sandgate.RunSpec, mask []string) any { return m.specDoc(s, mask) }

// specDoc is spec as a generic JSON document.
func (m masker) specDoc(s sandgate.RunSpec, mask []string) map[string]any {
	doc := s.Document()
	if env, ok := doc["env"]; ok {
		doc["env"] = m.all(env)
	}
	if stdin, ok := doc["stdin"].(string); ok && stdin != "" {
		doc["stdin"] = m.hash(stdin)
	}
	for _, p := range mask {
		m.at(doc, strings.Split(p, "."))
	}
	return doc
}

// at masks the value at path below node.
func (m masker) at(node any, path []string) {
	if len(path) == 0 {
		return
	}
	switch n := node.(type) {
	case map[string]any:
		v, ok := n[path[0]]
		if !ok {
			return
		}
		if len(path) == 1 {
			n[path[0]] = m.all(v)
			return
		}
		m.at(v, path[1:])
	case []any:
		i, err := strconv.Atoi(path[0])
		if err != nil || i < 0 || i >= len(n) {
			return
		}
		if len(path) == 1 {
			n[i] = m.all(n[i])
			return
		}
		m.at(n[i], path[1:])
	}
}

// all masks every scalar in v, keeping objects' keys and arrays' lengths.
func (m masker) all(v any) any {
	switch n := v.(type) {
	case map[string]any:
		for k, e := range n {
			n[k] = m.all(e)
		}
		return n
	case []any:
		for i, e := range n {
			n[i] = m.all(e)
		}
		return n
	case nil:
		return nil
	case string:
		return m.hash(n)
	default:
		raw, _ := json.Marshal(n)
		return m.hash(string(raw))
	}
}

// value hashes every scalar of v (a Go value that marshals to JSON).
func (m masker) value(v any) any {
	return m.all(generic(v))
}

// generic returns v as encoding/json's generic form.
func generic(v any) any {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var g any
	if err := dec.Decode(&g); err != nil {
		return nil
	}
	return g
}

// Redactor is implemented by a Recorder that hashes secrets with its own
// key (the audit store does). When Config.MaskKey is empty the gateway
// uses it, so that the gateway's hashes and the trail's agree.
type Redactor interface {
	// Redact returns doc with every value under "env" and every field a
	// mask path names replaced by its keyed hash.
	Redact(doc map[string]any, mask []string) map[string]any
	// RedactSpec is Redact of the spec's JSON.
	RedactSpec(spec sandgate.RunSpec, mask []string) map[string]any
}

// secrets turns secrets into keyed hashes for the audit trail.
type secrets interface {
	// spec returns the spec, with env values, stdin and the mask paths
	// hashed, as the JSON document the trail keeps (RunSpec.Document).
	spec(s sandgate.RunSpec, mask []string) any
	// value hashes every scalar of v.
	value(v any) any
}

// redactorSecrets adapts a Redactor.
type redactorSecrets struct{ r Redactor }

func (r redactorSecrets) spec(s sandgate.RunSpec, mask []string) any {
	return r.r.RedactSpec(s, append(slices.Clone(mask), "stdin"))
}

func (r redactorSecrets) value(v any) any {
	return r.r.Redact(map[string]any{"v": generic(v)}, []string{"v"})["v"]
}

// maskMutations returns the decision's mutations with the values of masked
// paths hashed. A mutation path is a JSON pointer ("/env/TOKEN").
func maskMutations(sec secrets, muts []sandgate.Mutation, mask []string) []map[string]any {
	out := make([]map[string]any, 0, len(muts))
	for _, mu := range muts {
		parts := strings.Split(strings.TrimPrefix(mu.Path, "/"), "/")
		for i := range parts {
			parts[i] = strings.NewReplacer("~1", "/", "~0", "~").Replace(parts[i])
		}
		value := mu.Value
		if isMasked(parts, mask) {
			value = sec.value(mu.Value)
		}
		out = append(out, map[string]any{"op": mu.Op, "path": mu.Path, "value": value, "rule": mu.Rule})
	}
	return out
}

// isMasked reports whether the field path lies at or below env, stdin or a
// mask path.
func isMasked(path, mask []string) bool {
	if len(path) > 0 && (path[0] == "env" || path[0] == "stdin") {
		return true
	}
	for _, p := range mask {
		mp := strings.Split(p, ".")
		if len(mp) <= len(path) && slices.Equal(mp, path[:len(mp)]) {
			return true
		}
	}
	return false
}
