package gateway

import (
	"bytes"
	"encoding/json"
	"strings"

	"github.com/sandgate/sandgate"
)

// maskPrefix marks a value the audit trail keeps only as a keyed hash.
const maskPrefix = sandgate.MaskPrefix

// masker replaces secrets with keyed hashes (HMAC-SHA256) before a spec
// reaches the audit trail, with the gateway's own mask key. It is a thin
// front for the masking functions of package sandgate, which the audit
// store uses as well, so the gateway and the trail mask the same paths the
// same way.
type masker struct {
	key []byte
}

// hash returns the keyed hash of v.
func (m masker) hash(v string) string { return sandgate.MaskHash(m.key, v) }

// spec returns the spec as a JSON object with every env value, the stdin
// and every field a mask path names (dotted, such as "labels.token",
// "command.2" or "mounts.*.source") replaced by its keyed hash
// (sandgate.MaskSpec).
func (m masker) spec(s sandgate.RunSpec, mask []string) any { return m.specDoc(s, mask) }

// specDoc is spec as a generic JSON document.
func (m masker) specDoc(s sandgate.RunSpec, mask []string) map[string]any {
	return sandgate.MaskSpec(m.key, s, mask)
}

// at masks the value at path below node.
func (m masker) at(node any, path []string) {
	sandgate.Mask(m.key, node, strings.Join(path, "."))
}

// all masks every scalar in v, keeping objects' keys and arrays' lengths.
func (m masker) all(v any) any { return sandgate.MaskValue(m.key, v) }

// value hashes every scalar of v (a Go value that marshals to JSON).
func (m masker) value(v any) any { return m.all(generic(v)) }

// field masks v as the value at the spec field path (a mutation's), for
// the spec's secrets and the mask paths.
func (m masker) field(v any, path []string, mask []string) any {
	return sandgate.MaskAt(m.key, generic(v), path, append(append([]string{}, sandgate.SpecSecrets...), mask...)...)
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
	// RedactSpec is Redact of the spec's JSON, stdin included.
	RedactSpec(spec sandgate.RunSpec, mask []string) map[string]any
}

// secrets turns secrets into keyed hashes for the audit trail.
type secrets interface {
	// spec returns the spec, with env values, stdin and the mask paths
	// hashed, as the JSON document the trail keeps (RunSpec.Document).
	spec(s sandgate.RunSpec, mask []string) any
	// value hashes every scalar of v.
	value(v any) any
	// field masks v as the value at the spec field path.
	field(v any, path []string, mask []string) any
}

// redactorSecrets adapts a Redactor.
type redactorSecrets struct{ r Redactor }

func (r redactorSecrets) spec(s sandgate.RunSpec, mask []string) any {
	return r.r.RedactSpec(s, append(append([]string{}, mask...), "stdin"))
}

func (r redactorSecrets) value(v any) any {
	return r.r.Redact(map[string]any{"v": generic(v)}, []string{"v"})["v"]
}

// field places v at path in a document of its own, redacts that with the
// spec's secrets and the mask, and takes v back out.
func (r redactorSecrets) field(v any, path []string, mask []string) any {
	if len(path) == 0 {
		return r.value(v)
	}
	doc := map[string]any{}
	node := doc
	for _, p := range path[:len(path)-1] {
		child := map[string]any{}
		node[p] = child
		node = child
	}
	last := path[len(path)-1]
	node[last] = generic(v)
	doc = r.r.Redact(doc, append(append([]string{}, mask...), "stdin"))
	for _, p := range path[:len(path)-1] {
		child, ok := doc[p].(map[string]any)
		if !ok {
			return nil
		}
		doc = child
	}
	return doc[last]
}

// maskMutations returns the decision's mutations with what the masked
// paths name in their values hashed. A mutation path is a JSON pointer
// ("/env/TOKEN"); a value that replaces a whole object ("/labels") has the
// masked fields below it hashed.
func maskMutations(sec secrets, muts []sandgate.Mutation, mask []string) []map[string]any {
	out := make([]map[string]any, 0, len(muts))
	for _, mu := range muts {
		parts := strings.Split(strings.TrimPrefix(mu.Path, "/"), "/")
		for i := range parts {
			parts[i] = strings.NewReplacer("~1", "/", "~0", "~").Replace(parts[i])
		}
		value := mu.Value
		if masked := sec.field(mu.Value, parts, mask); !jsonEqual(masked, generic(mu.Value)) {
			value = masked
		}
		out = append(out, map[string]any{"op": mu.Op, "path": mu.Path, "value": value, "rule": mu.Rule})
	}
	return out
}

// jsonEqual reports whether a and b encode to the same JSON.
func jsonEqual(a, b any) bool {
	ra, err1 := json.Marshal(a)
	rb, err2 := json.Marshal(b)
	return err1 == nil && err2 == nil && bytes.Equal(ra, rb)
}
