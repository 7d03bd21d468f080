package secrets

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate"
)

const (
	hexA = "000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
	hexB = "f0f1f2f3f4f5f6f7f8f9fafbfcfdfeff000102030405060708090a0b0c0d0e0f"
)

func keyring(t *testing.T, text string) *Keyring {
	t.Helper()
	k, err := ParseKeyring([]byte(text))
	if err != nil {
		t.Fatalf("ParseKeyring: %v", err)
	}
	return k
}

// TestParseKeyringRefuses: a key file that is not ID and 32 hex bytes a
// line is refused with the line named and never the key.
func TestParseKeyringRefuses(t *testing.T) {
	for name, tc := range map[string]struct{ text, want string }{
		"empty":          {"# only a comment\n\n", "no key"},
		"one field":      {hexA + "\n", "line 1: want a key ID"},
		"short key":      {"k1 " + hexA[:62] + "\n", "line 1: key k1 is not 32 bytes"},
		"not hex":        {"k1 " + strings.Repeat("zz", 32) + "\n", "line 1: key k1 is not 32 bytes"},
		"duplicate id":   {"k1 " + hexA + "\nk1 " + hexB + "\n", "line 2: key ID k1 is given twice"},
		"bad id":         {"k/1 " + hexA + "\n", `line 1: key ID "k/1"`},
		"three fields":   {"# c\nk1 " + hexA + " extra\n", "line 2: want a key ID"},
		"long 33 bytes ": {"k1 " + hexA + "ff\n", "line 1: key k1 is not 32 bytes"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseKeyring([]byte(tc.text))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want %q", err, tc.want)
			}
			if strings.Contains(err.Error(), hexA[:16]) || strings.Contains(err.Error(), hexB[:16]) {
				t.Errorf("the error shows a key: %v", err)
			}
		})
	}
}

// TestLoadKeyringMode: a key file others than its owner may read is
// refused; one of mode 0600 is read, its first key the primary.
func TestLoadKeyringMode(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secrets.keys")
	if err := os.WriteFile(path, []byte("# rotated 2026\nk2 "+hexB+"\nk1 "+hexA+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKeyring(path); err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("a 0644 key file: err = %v", err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
	k, err := LoadKeyring(path)
	if err != nil {
		t.Fatal(err)
	}
	if k.Primary() != "k2" || strings.Join(k.IDs(), ",") != "k2,k1" {
		t.Errorf("primary %s, ids %v", k.Primary(), k.IDs())
	}
}

// TestSealBindsNameAndVersion: a sealed value opens as itself, under the
// key it names; moved to another name or version, or with its wrapped key
// or ciphertext swapped with another's, it does not open.
func TestSealBindsNameAndVersion(t *testing.T) {
	k := keyring(t, "k1 "+hexA+"\n")
	seal := func(name string, version int64, value string) sandgate.SealedSecret {
		s := sandgate.SealedSecret{SecretInfo: sandgate.SecretInfo{Name: name, Version: version}}
		if err := k.seal(&s, value); err != nil {
			t.Fatal(err)
		}
		return s
	}
	a, b := seal("demo", 1, "tok-A"), seal("other", 1, "tok-B")
	if got, err := k.open(a); err != nil || got != "tok-A" {
		t.Fatalf("open = %q, %v", got, err)
	}
	if strings.Contains(string(a.Ciphertext), "tok-A") || strings.Contains(string(a.WrappedKey), "tok-A") {
		t.Fatal("the ciphertext holds the value")
	}
	for name, s := range map[string]sandgate.SealedSecret{
		"renamed":          {SecretInfo: sandgate.SecretInfo{Name: "other", Version: 1, KeyID: "k1"}, WrappedKey: a.WrappedKey, Ciphertext: a.Ciphertext},
		"other version":    {SecretInfo: sandgate.SecretInfo{Name: "demo", Version: 2, KeyID: "k1"}, WrappedKey: a.WrappedKey, Ciphertext: a.Ciphertext},
		"another's value":  {SecretInfo: a.SecretInfo, WrappedKey: a.WrappedKey, Ciphertext: b.Ciphertext},
		"another's key":    {SecretInfo: a.SecretInfo, WrappedKey: b.WrappedKey, Ciphertext: a.Ciphertext},
		"unknown key":      {SecretInfo: sandgate.SecretInfo{Name: "demo", Version: 1, KeyID: "k9"}, WrappedKey: a.WrappedKey, Ciphertext: a.Ciphertext},
		"truncated":        {SecretInfo: a.SecretInfo, WrappedKey: a.WrappedKey, Ciphertext: a.Ciphertext[:10]},
		"flipped bit":      {SecretInfo: a.SecretInfo, WrappedKey: a.WrappedKey, Ciphertext: flip(a.Ciphertext)},
		"no format marker": {SecretInfo: a.SecretInfo, WrappedKey: a.WrappedKey, Ciphertext: append([]byte{9}, a.Ciphertext[1:]...)},
	} {
		if v, err := k.open(s); err == nil {
			t.Errorf("%s: opened as %q", name, v)
		} else if strings.Contains(err.Error(), "tok-") {
			t.Errorf("%s: the error shows a value: %v", name, err)
		}
	}
}

func flip(b []byte) []byte {
	c := append([]byte(nil), b...)
	c[len(c)-1] ^= 1
	return c
}

// TestRewrap: after a new key is put first, rewrap moves a secret's data
// key under it and leaves its ciphertext alone; the old key, removed from
// the file afterwards, is no longer needed.
func TestRewrap(t *testing.T) {
	old := keyring(t, "k1 "+hexA+"\n")
	s := sandgate.SealedSecret{SecretInfo: sandgate.SecretInfo{Name: "demo", Version: 3}}
	if err := old.seal(&s, "tok-A"); err != nil {
		t.Fatal(err)
	}
	rotated := keyring(t, "k2 "+hexB+"\nk1 "+hexA+"\n")
	if v, err := rotated.open(s); err != nil || v != "tok-A" {
		t.Fatalf("the old key no longer opens: %q %v", v, err)
	}
	next, changed, err := rotated.rewrap(s)
	if err != nil || !changed || next.KeyID != "k2" || string(next.Ciphertext) != string(s.Ciphertext) {
		t.Fatalf("rewrap: changed %v key %s err %v", changed, next.KeyID, err)
	}
	if _, changed, _ := rotated.rewrap(next); changed {
		t.Error("a secret under the primary key was rewrapped again")
	}
	onlyNew := keyring(t, "k2 "+hexB+"\n")
	if v, err := onlyNew.open(next); err != nil || v != "tok-A" {
		t.Fatalf("after rotation: %q %v", v, err)
	}
	if _, err := onlyNew.open(s); err == nil || !strings.Contains(err.Error(), "key k1") {
		t.Errorf("a secret still under a removed key: %v", err)
	}
}

// TestSecretValueHidden: a revealed value prints, formats, encodes and
// logs as [secret].
func TestSecretValueHidden(t *testing.T) {
	v := sandgate.NewSecretValue("tok-A")
	rs := sandgate.RunSecret{Value: v}
	for _, s := range []string{sprint("%v", rs), sprint("%+v", rs), sprint("%#v", rs), sprint("%s", v), sprint("%q", v), jsonOf(t, rs)} {
		if strings.Contains(s, "tok-A") {
			t.Errorf("the value shows: %s", s)
		}
	}
	if v.Reveal() != "tok-A" {
		t.Error("Reveal")
	}
}
