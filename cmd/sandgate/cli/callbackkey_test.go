package cli

import (
	"crypto/hmac"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestCallbackKeyFile: the key is generated (0600, hex) when the file is
// missing, read back the same, and a short or non-hex key is refused.
func TestCallbackKeyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "state", "callback.key")
	key, err := loadCallbackKey(path)
	if err != nil || len(key) != callbackKeyBytes {
		t.Fatalf("generate: %d bytes, %v", len(key), err)
	}
	fi, err := os.Stat(path)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v, %v", fi.Mode(), err)
	}
	again, err := loadCallbackKey(path)
	if err != nil || !hmac.Equal(key, again) {
		t.Errorf("read back: %v", err)
	}
	for name, content := range map[string]string{"short": "abcd\n", "not hex": "zz" + strings.Repeat("0", 62)} {
		p := filepath.Join(t.TempDir(), "k")
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := loadCallbackKey(p); err == nil {
			t.Errorf("%s key accepted", name)
		} else if strings.Contains(err.Error(), content[:4]) {
			t.Errorf("%s: the error shows the key: %v", name, err)
		}
	}
}
