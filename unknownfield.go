package sandgate

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strconv"
	"strings"
)

// unknownFieldError names an unknown field by its path in the document
// ("resources.memory", "mounts[1].readonly") and, when a known field of
// the same object is spelt closely enough, suggests it. encoding/json
// reports only the key's name; the path is found by walking the document
// along v's type.
func unknownFieldError(name string, data []byte, v any) *Error {
	path, known := name, []string(nil)
	var doc any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if dec.Decode(&doc) == nil {
		if p, k, ok := findUnknown(doc, reflect.TypeOf(v), "", name); ok {
			path, known = p, k
		}
	}
	if s := suggest(name, known); s != "" {
		return FieldError(path, "unknown field; did you mean %s?", s)
	}
	return FieldError(path, "unknown field")
}

// findUnknown walks doc along t and returns the path of the first key
// called name that t has no field for, with the names t does have there.
// Keys are visited in sorted order, so the answer does not depend on a
// map's order.
func findUnknown(doc any, t reflect.Type, path, name string) (string, []string, bool) {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return "", nil, false
	}
	switch d := doc.(type) {
	case map[string]any:
		keys := make([]string, 0, len(d))
		for k := range d {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		switch t.Kind() {
		case reflect.Struct:
			fields := jsonFields(t)
			for _, k := range keys {
				ft, ok := fieldFor(fields, k)
				if !ok {
					if k == name {
						return join(path, k), names(fields), true
					}
					continue
				}
				if p, kn, ok := findUnknown(d[k], ft, join(path, k), name); ok {
					return p, kn, true
				}
			}
		case reflect.Map:
			for _, k := range keys {
				if p, kn, ok := findUnknown(d[k], t.Elem(), join(path, k), name); ok {
					return p, kn, true
				}
			}
		}
	case []any:
		if t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
			for i, e := range d {
				if p, kn, ok := findUnknown(e, t.Elem(), path+"["+strconv.Itoa(i)+"]", name); ok {
					return p, kn, true
				}
			}
		}
	}
	return "", nil, false
}

func join(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// jsonFields maps the JSON names of t's fields (embedded structs' fields
// included, as encoding/json sees them) to their types.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		n, _, _ := strings.Cut(tag, ",")
		ft := f.Type
		if f.Anonymous && n == "" {
			et := ft
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				for k, v := range jsonFields(et) {
					if _, ok := out[k]; !ok {
						out[k] = v
					}
				}
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if n == "" {
			n = f.Name
		}
		out[n] = ft
	}
	return out
}

// fieldFor finds key's field as encoding/json does: exactly, else
// without regard to case.
func fieldFor(fields map[string]reflect.Type, key string) (reflect.Type, bool) {
	if t, ok := fields[key]; ok {
		return t, true
	}
	for n, t := range fields {
		if strings.EqualFold(n, key) {
			return t, true
		}
	}
	return nil, false
}

func names(fields map[string]reflect.Type) []string {
	out := make([]string, 0, len(fields))
	for n := range fields {
		out = append(out, n)
	}
	slices.Sort(out)
	return out
}

// suggest returns the known name closest to name when it is close enough
// to be a slip: one a prefix of the other at a word boundary
// ("memory" for "memory_mb"), or a few letters apart.
func suggest(name string, known []string) string {
	best, bestScore := "", 1<<30
	low := strings.ToLower(name)
	for _, k := range known {
		kl := strings.ToLower(k)
		score := editDistance(low, kl)
		switch {
		case strings.HasPrefix(kl, low+"_"), strings.HasPrefix(low, kl+"_"),
			strings.HasSuffix(kl, "_"+low), strings.HasSuffix(low, "_"+kl):
			score = 1
		case score > max(1, min(len(low), len(kl))/3):
			continue
		}
		if score < bestScore || (score == bestScore && k < best) {
			best, bestScore = k, score
		}
	}
	return best
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
