package gateway

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/sandgate/sandgate"
)

// TokensFile is the tokens file kept current: read again when it changes
// (Watch) or when asked (Reload, on SIGHUP), so that a token removed from
// it stops working within the watch's debounce, with no restart. A file
// that no longer parses is refused and the tokens in force stay: an edit
// half written never signs everyone out, nor anyone in. It is safe for
// concurrent use.
type TokensFile struct {
	path    string
	log     *slog.Logger
	current atomic.Pointer[Principals]

	mu  sync.Mutex // serialises reads
	sum [sha256.Size]byte
}

// TokensDebounce is how long Watch waits after the last change of the
// tokens file's directory before it reads the file again.
const TokensDebounce = 100 * time.Millisecond

// OpenTokensFile reads the tokens file (LoadPrincipals); a file that
// does not parse is an error.
func OpenTokensFile(path string, log *slog.Logger) (*TokensFile, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &TokensFile{path: path, log: log}
	if _, err := f.read(); err != nil {
		return nil, err
	}
	return f, nil
}

// Authenticate authenticates token against the tokens in force.
func (f *TokensFile) Authenticate(token string) (sandgate.Principal, bool) {
	return f.current.Load().Authenticate(token)
}

// Reload reads the file again; on an error the tokens in force stay.
func (f *TokensFile) Reload() error {
	changed, err := f.read()
	switch {
	case err != nil:
		f.log.Error("tokens file refused; the tokens in force stay", "path", f.path, "err", err)
	case changed:
		f.log.Info("tokens file reloaded", "path", f.path, "principals", len(f.current.Load().entries))
	}
	return err
}

// read loads the file and puts it in force when its content changed.
func (f *TokensFile) read() (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	data, err := os.ReadFile(f.path)
	if err != nil {
		return false, fmt.Errorf("read tokens file: %w", err)
	}
	sum := sha256.Sum256(data)
	if f.current.Load() != nil && bytes.Equal(sum[:], f.sum[:]) {
		return false, nil
	}
	p, err := parsePrincipals(f.path, data)
	if err != nil {
		return false, err
	}
	f.current.Store(p)
	f.sum = sum
	return true, nil
}

// Watch reads the file again after each burst of changes in its
// directory (editors and configuration managers replace a file by
// renaming another over it, which a watch on the file itself would
// lose), until ctx ends.
func (f *TokensFile) Watch(ctx context.Context) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watch the tokens file: %w", err)
	}
	defer w.Close()
	if err := w.Add(filepath.Dir(f.path)); err != nil {
		return fmt.Errorf("watch the tokens file's directory: %w", err)
	}
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case _, ok := <-w.Events:
			if !ok {
				return nil
			}
			timer.Reset(TokensDebounce)
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			f.log.Warn("watching the tokens file", "err", err)
		case <-timer.C:
			_ = f.Reload()
		}
	}
}
