package sandgate

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaskPrefix begins every value that masking replaced: the rest is the hex
// HMAC-SHA256 of the value under the mask key.
const MaskPrefix = "hmac-sha256:"

// MaskHash returns MaskPrefix and the hex HMAC-SHA256 of value under key.
// Equal secrets give equal hashes under one key, so an auditor can tell
// that two runs used the same value without learning it.
func MaskHash(key []byte, value string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(value))
	return MaskPrefix + hex.EncodeToString(m.Sum(nil))
}

// SpecSecrets are the paths of a run spec that are masked whatever the
// policy's mask rules say: every env value, stdin, and the content of
// every inline file (a .npmrc holds a token as often as a script does).
var SpecSecrets = []string{"env", "stdin", "files.*.content"}

// MaskSpec returns s as the JSON document it encodes to (RunSpec.Document)
// with every env value, stdin and every field a path names replaced by its
// keyed hash (see Mask): the one form in which a spec reaches the audit
// trail, the run store and API answers.
func MaskSpec(key []byte, s RunSpec, paths []string) map[string]any {
	doc := s.Document()
	Mask(key, doc, slices.Concat(SpecSecrets, paths)...)
	return doc
}

// Mask replaces, in doc itself, every value a path names with keyed hashes
// (MaskValue), and returns doc. doc is a generic JSON document: objects as
// map[string]any (or map[string]string), arrays as []any (or []string).
//
// A path is dotted. Each segment names an object's key, an array's index
// (decimal, from 0), or is "*" for every key or index: "env",
// "labels.token", "command.1", "mounts.0.source", "mounts.*.source". An
// object key that holds dots itself is named by its parts
// ("labels.com.example.token" names the label "com.example.token"). A path
// that names an object or an array masks every value below it; a path that
// names nothing masks nothing. A value named by several paths is hashed
// once.
func Mask(key []byte, doc any, paths ...string) any {
	return MaskAt(key, doc, nil, paths...)
}

// MaskAt is Mask for a value that sits at field (a path as its segments,
// such as a JSON pointer's) of a larger document: what the paths name at
// or below field is hashed in value, and all of value when field lies
// below one of them. A policy mutation's value is masked this way.
func MaskAt(key []byte, value any, field []string, paths ...string) any {
	nodes := []*maskNode{maskTrie(paths)}
	for _, f := range field {
		if ends(nodes) {
			break
		}
		if nodes = step(nodes, f); len(nodes) == 0 {
			return value
		}
	}
	return masker(key).walk(value, nodes)
}

// MaskValue returns v with every scalar replaced by its keyed hash:
// strings as they are, other scalars as their JSON text. Objects keep their
// keys and arrays their length; null stays null. Maps and slices are
// changed in place.
func MaskValue(key []byte, v any) any {
	return masker(key).all(v)
}

// maskNode is a trie of mask paths by segment; end marks a path's last.
type maskNode struct {
	end      bool
	children map[string]*maskNode
}

func maskTrie(paths []string) *maskNode {
	root := &maskNode{}
	for _, p := range paths {
		if p == "" {
			continue
		}
		n := root
		for _, seg := range strings.Split(p, ".") {
			if n.end {
				break // a shorter path covers this one
			}
			c := n.children[seg]
			if c == nil {
				c = &maskNode{}
				if n.children == nil {
					n.children = map[string]*maskNode{}
				}
				n.children[seg] = c
			}
			n = c
		}
		n.end = true
	}
	return root
}

// step follows an object key or an array index from nodes: by each of its
// dotted parts, exactly or by "*". It returns the nodes reached, or a
// single end node as soon as a path ends on the way.
func step(nodes []*maskNode, key string) []*maskNode {
	for part := range strings.SplitSeq(key, ".") {
		var next []*maskNode
		for _, n := range nodes {
			for _, c := range []*maskNode{n.children[part], n.children["*"]} {
				if c == nil {
					continue
				}
				if c.end {
					return []*maskNode{c}
				}
				next = append(next, c)
			}
		}
		if len(next) == 0 {
			return nil
		}
		nodes = next
	}
	return nodes
}

func ends(nodes []*maskNode) bool {
	return len(nodes) == 1 && nodes[0].end
}

// masker hashes with its key.
type masker []byte

// walk masks, in v, what nodes name below it.
func (m masker) walk(v any, nodes []*maskNode) any {
	if ends(nodes) {
		return m.all(v)
	}
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			if next := step(nodes, k); len(next) > 0 {
				x[k] = m.walk(e, next)
			}
		}
	case map[string]string:
		for k, e := range x {
			if ends(step(nodes, k)) {
				x[k] = MaskHash(m, e)
			}
		}
	case []any:
		for i, e := range x {
			if next := step(nodes, strconv.Itoa(i)); len(next) > 0 {
				x[i] = m.walk(e, next)
			}
		}
	case []string:
		for i, e := range x {
			if ends(step(nodes, strconv.Itoa(i))) {
				x[i] = MaskHash(m, e)
			}
		}
	}
	return v
}

// all hashes every scalar in v.
func (m masker) all(v any) any {
	switch x := v.(type) {
	case nil:
		return nil
	case string:
		return MaskHash(m, x)
	case json.Number:
		return MaskHash(m, x.String())
	case map[string]any:
		for k, e := range x {
			x[k] = m.all(e)
		}
		return x
	case map[string]string:
		for k, e := range x {
			x[k] = MaskHash(m, e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = m.all(e)
		}
		return x
	case []string:
		for i, e := range x {
			x[i] = MaskHash(m, e)
		}
		return x
	}
	raw, err := json.Marshal(v)
	if err != nil {
		// Not encodable as JSON: hash what it prints as, never keep it.
		raw = fmt.Append(nil, v)
	}
	return MaskHash(m, string(raw))
}

// Masker is the one owner of masking: every secret that reaches the audit
// trail, the run store or an answer is hashed by a Masker, under the
// deployment's mask key. The gateway, the admission pipeline and the audit
// store hold the same one, so their hashes agree, whichever of them
// hashed a value.
type Masker struct{ key []byte }

// NewMasker returns the Masker of key.
func NewMasker(key []byte) Masker { return Masker{key: slices.Clone(key)} }

// Keyed reports whether m has a key: the zero Masker has none.
func (m Masker) Keyed() bool { return len(m.key) > 0 }

// Hash returns the keyed hash of v (MaskHash).
func (m Masker) Hash(v string) string { return MaskHash(m.key, v) }

// Value returns v, any value that encodes to JSON, with every scalar
// hashed (MaskValue of its JSON form): a string's hash is Hash's.
func (m Masker) Value(v any) any { return MaskValue(m.key, jsonGeneric(v)) }

// Spec is the spec's JSON document with its secrets and the paths hashed
// (MaskSpec): the form in which a spec reaches the audit trail.
func (m Masker) Spec(s RunSpec, paths []string) map[string]any { return MaskSpec(m.key, s, paths) }

// Doc returns a copy of doc, a generic JSON document, with what paths
// name hashed (Mask); doc is left as it was.
func (m Masker) Doc(doc map[string]any, paths ...string) map[string]any {
	out, _ := jsonGeneric(doc).(map[string]any)
	if out == nil {
		out = map[string]any{}
	}
	Mask(m.key, out, paths...)
	return out
}

// StoredSpec is the spec as the run store keeps it and the API shows it:
// env values, stdin, inline files' content and the fields the paths name
// become keyed hashes, so that secrets never rest in the database. Equal
// secrets hash equally, so an idempotent retry still compares equal.
func (m Masker) StoredSpec(s RunSpec, paths []string) RunSpec {
	out := s.clone()
	for k, v := range out.Env {
		out.Env[k] = m.Hash(v)
	}
	if out.Stdin != "" {
		out.Stdin = m.Hash(out.Stdin)
	}
	for i := range out.Files {
		out.Files[i].Content = m.Hash(out.Files[i].Content)
	}
	// Paths within env and stdin name nothing the lines above left
	// unhashed: the default mask (env, stdin) needs no JSON round trip,
	// which was most of an audited review's masking cost.
	paths = slices.DeleteFunc(slices.Clone(paths), func(p string) bool {
		return p == "env" || p == "stdin" || strings.HasPrefix(p, "env.")
	})
	if len(paths) == 0 {
		return out
	}
	// Other masked paths go through the spec's JSON form. A path that
	// names a field that is not a string cannot hold a hash in a RunSpec;
	// the secrets above are hashed all the same.
	raw, err := json.Marshal(m.Spec(s, paths))
	if err != nil {
		return out
	}
	var masked RunSpec
	if err := json.Unmarshal(raw, &masked); err != nil {
		return out
	}
	return masked
}

// Mutations returns a decision's mutations as the trail records them,
// with what the spec's secrets and paths name in their values hashed. A
// mutation's path is a JSON pointer ("/env/TOKEN"); a value that replaces
// a whole object ("/labels") has the masked fields below it hashed.
func (m Masker) Mutations(muts []Mutation, paths []string) []map[string]any {
	all := slices.Concat(SpecSecrets, paths)
	out := make([]map[string]any, 0, len(muts))
	for _, mu := range muts {
		parts := strings.Split(strings.TrimPrefix(mu.Path, "/"), "/")
		for i := range parts {
			parts[i] = strings.NewReplacer("~1", "/", "~0", "~").Replace(parts[i])
		}
		out = append(out, map[string]any{"op": mu.Op, "path": mu.Path, "value": MaskAt(m.key, jsonGeneric(mu.Value), parts, all...), "rule": mu.Rule})
	}
	return out
}

// jsonGeneric returns v as encoding/json's generic form (numbers as
// json.Number), a copy that masking may change in place; nil when v does
// not encode.
func jsonGeneric(v any) any {
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
