package workspace

import (
	"path"
	"strings"
	"unicode/utf8"

	"github.com/bmatcuk/doublestar/v4"
	"github.com/sandgate/sandgate"
)

// The bounds on a path inside a workspace. A name longer than MaxPathBytes,
// deeper than MaxPathDepth components or with a component longer than
// MaxNameBytes is refused before the file system sees it.
const (
	MaxPathBytes = 4096
	MaxPathDepth = 64
	MaxNameBytes = 255
)

// CheckRelPath returns p as a clean relative slash path ("src/main.py"), or
// an INVALID-REQUEST error naming field when p is empty, absolute, a drive
// letter path, holds a backslash, NUL or another control character, is not
// UTF-8, is too long or too deep, names the workspace itself, or escapes it
// with ".." once cleaned ("a/../b" is "b"; "a/../../b" is refused).
func CheckRelPath(field, p string) (string, error) {
	clean, msg := cleanRel(p)
	if msg != "" {
		return "", sandgate.FieldError(field, "%s", msg)
	}
	if clean == "." {
		return "", sandgate.FieldError(field, "path names the workspace itself")
	}
	return clean, nil
}

// cleanRel is CheckRelPath's rule without the field: the clean path, or
// why p is refused. It returns "." for a name of the root itself ("./"),
// which archives carry and CheckRelPath refuses.
func cleanRel(p string) (string, string) {
	switch {
	case p == "":
		return "", "path is empty"
	case len(p) > MaxPathBytes:
		return "", "path is longer than 4096 bytes"
	case !utf8.ValidString(p):
		return "", "path is not valid UTF-8"
	case strings.IndexFunc(p, isControl) >= 0:
		return "", "path holds a NUL or control character"
	case strings.Contains(p, `\`):
		return "", `path holds a backslash ("\" is not a separator here, and is refused as ambiguous)`
	case strings.HasPrefix(p, "/"):
		return "", "path is absolute"
	case hasDriveLetter(p):
		return "", "path starts with a drive letter"
	}
	clean := path.Clean(p)
	if clean == ".." || strings.HasPrefix(clean, "../") {
		return "", "path escapes the workspace"
	}
	if clean == "." {
		return ".", ""
	}
	depth := 0
	for c := range strings.SplitSeq(clean, "/") {
		depth++
		if len(c) > MaxNameBytes {
			return "", "path has a component longer than 255 bytes"
		}
	}
	if depth > MaxPathDepth {
		return "", "path is deeper than 64 components"
	}
	return clean, ""
}

func isControl(r rune) bool { return r < 0x20 || r == 0x7f }

// hasDriveLetter reports whether p starts like a Windows path ("C:", "c:x").
func hasDriveLetter(p string) bool {
	return len(p) >= 2 && p[1] == ':' && ('a' <= p[0]|0x20 && p[0]|0x20 <= 'z')
}

// MaxPatternBytes bounds one artifact pattern.
const MaxPatternBytes = 1024

// CheckPattern returns an INVALID-REQUEST error naming field unless p is a
// usable artifact pattern: a relative slash path or doublestar glob
// ("out/*.txt", "reports/**", "dist") of at most MaxPatternBytes, UTF-8
// without control characters, with no ".." component and valid glob
// syntax. "." and "**" both name the whole workdir.
func CheckPattern(field, p string) error {
	switch {
	case p == "":
		return sandgate.FieldError(field, "pattern is empty")
	case len(p) > MaxPatternBytes:
		return sandgate.FieldError(field, "pattern is longer than %d bytes", MaxPatternBytes)
	case !utf8.ValidString(p):
		return sandgate.FieldError(field, "pattern is not valid UTF-8")
	case strings.IndexFunc(p, isControl) >= 0:
		return sandgate.FieldError(field, "pattern holds a NUL or control character")
	case strings.HasPrefix(p, "/"):
		return sandgate.FieldError(field, "pattern is absolute; patterns are relative to the workdir")
	}
	for c := range strings.SplitSeq(p, "/") {
		if c == ".." {
			return sandgate.FieldError(field, "pattern has a \"..\" component")
		}
	}
	if !doublestar.ValidatePattern(cleanPattern(p)) {
		return sandgate.FieldError(field, "pattern is not a valid glob")
	}
	return nil
}

// cleanPattern drops "./" prefixes, doubled and trailing slashes, so that
// "./out/" matches what "out" does.
func cleanPattern(p string) string {
	return path.Clean(p)
}
