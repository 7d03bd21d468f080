package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/sandgate/sandgate/gateway"
)

// devTokenPattern is what NewDevToken makes; a file holding anything else
// was not written by serve and is refused rather than trusted.
var devTokenPattern = regexp.MustCompile(`^sgdev_[0-9a-f]{48}$`)

// devToken returns the development token kept in path, or makes one and
// keeps it there (mode 0600): a restarted `make run` then accepts the
// token a developer exported from its first start. The file is only
// ever read by its owner: one that others may read or write is refused.
func devToken(path string) (string, error) {
	data, err := os.ReadFile(path)
	switch {
	case err == nil:
		st, serr := os.Stat(path)
		if serr != nil {
			return "", serr
		}
		if st.Mode().Perm()&0o077 != 0 {
			return "", fmt.Errorf("%s is readable or writable by others (mode %04o): chmod 600 it, or remove it for a new token", path, st.Mode().Perm())
		}
		token := strings.TrimSpace(string(data))
		if !devTokenPattern.MatchString(token) {
			return "", fmt.Errorf("%s does not hold a development token (sgdev_ and 48 hex digits): remove it for a new one", path)
		}
		return token, nil
	case !errors.Is(err, fs.ErrNotExist):
		return "", err
	}
	token, err := gateway.NewDevToken()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) {
		// Another start made it first: take that one.
		return devToken(path)
	}
	if err != nil {
		return "", err
	}
	if _, err := f.WriteString(token + "\n"); err != nil {
		f.Close()
		return "", err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return "", err
	}
	return token, f.Close()
}
