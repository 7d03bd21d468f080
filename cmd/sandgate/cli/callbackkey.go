package cli

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// callbackKeyBytes is the size of a generated callback key; a given one
// must have at least minCallbackKeyBytes.
const (
	callbackKeyBytes    = 32
	minCallbackKeyBytes = 16
)

// loadCallbackKey reads the key that signs completion callbacks from
// path (hex, whitespace around it ignored, as `openssl rand -hex 32`
// prints), generating one with mode 0600 when the file does not exist.
// The key is shared with the receivers; it is never printed.
func loadCallbackKey(path string) ([]byte, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return generateCallbackKey(path)
	}
	if err != nil {
		return nil, fmt.Errorf("SANDGATE_CALLBACK_KEY_FILE: %w", err)
	}
	key, err := hex.DecodeString(strings.TrimSpace(string(data)))
	if err != nil {
		return nil, fmt.Errorf("SANDGATE_CALLBACK_KEY_FILE %s: not hex", path)
	}
	if len(key) < minCallbackKeyBytes {
		return nil, fmt.Errorf("SANDGATE_CALLBACK_KEY_FILE %s: %d bytes, want at least %d", path, len(key), minCallbackKeyBytes)
	}
	return key, nil
}

func generateCallbackKey(path string) ([]byte, error) {
	key := make([]byte, callbackKeyBytes)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("generate callback key: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, fmt.Errorf("SANDGATE_CALLBACK_KEY_FILE: %w", err)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if errors.Is(err, os.ErrExist) {
		// Another process made it first: use theirs.
		return loadCallbackKey(path)
	}
	if err != nil {
		return nil, fmt.Errorf("SANDGATE_CALLBACK_KEY_FILE: %w", err)
	}
	_, werr := f.WriteString(hex.EncodeToString(key) + "\n")
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		return nil, fmt.Errorf("write callback key: %w", err)
	}
	return key, nil
}
