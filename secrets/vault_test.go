package secrets

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sandgate/sandgate"
	"github.com/sandgate/sandgate/audit/audittest"
	"github.com/sandgate/sandgate/runstore"
)

// The vault is tested on a real database (the run store's secrets table,
// migrated); the trail is a recorder that keeps what it is given and can
// be made to fail, the one narrow interface faked here.

type recorder struct {
	mu     sync.Mutex
	events []sandgate.Event
	fail   error
}

func (r *recorder) Emit(ev sandgate.Event) {
	r.mu.Lock()
	r.events = append(r.events, ev)
	r.mu.Unlock()
}
func (r *recorder) Queue(_ context.Context, ev sandgate.Event) error {
	r.Emit(ev)
	return nil
}
func (r *recorder) Record(_ context.Context, evs ...sandgate.Event) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.fail != nil {
		return r.fail
	}
	r.events = append(r.events, evs...)
	return nil
}

func (r *recorder) types() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, ev := range r.events {
		out = append(out, fmt.Sprintf("%s:%v", ev.Type, ev.Payload["version"]))
	}
	return out
}

var maskKey = []byte("0123456789abcdef0123456789abcdef")

func newStore(t *testing.T) *runstore.Store {
	t.Helper()
	s, err := runstore.New(audittest.OpenDB(t, audittest.NewMigratedDatabase(t)), runstore.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newVault(t *testing.T, store sandgate.SecretStore, keys string, rec *recorder) *Vault {
	t.Helper()
	v, err := New(Options{Keys: keyring(t, keys), Store: store, Recorder: rec, Masker: sandgate.NewMasker(maskKey),
		Clock: func() time.Time { return time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC) }})
	if err != nil {
		t.Fatal(err)
	}
	return v
}

var alice = sandgate.Subject{Actor: "alice", Team: "security", CorrelationID: "c-1"}

// TestVaultLifecycle: a first put is version 1 (secret.set), the next a
// new version (secret.rotated), listed with who set it and the value's
// keyed hash, never the value; a removal is secret.deleted and the next
// put goes on from the last version as a first one again.
func TestVaultLifecycle(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	v := newVault(t, newStore(t), "k1 "+hexA+"\n", rec)
	if _, created, err := v.Put(ctx, alice, "demo", "tok-1"); err != nil || !created {
		t.Fatal(created, err)
	}
	bob := alice
	bob.Actor = "bob"
	info, created, err := v.Put(ctx, bob, "demo", "tok-2")
	if err != nil || info.Version != 2 || created || info.CreatedBy != "alice" {
		t.Fatalf("second put: %+v %v %v", info, created, err)
	}
	list, err := v.List(ctx)
	if err != nil || len(list) != 1 {
		t.Fatalf("list: %+v %v", list, err)
	}
	got := list[0]
	if got.Name != "demo" || got.Version != 2 || got.SetBy != "bob" || got.CreatedBy != "alice" || got.KeyID != "k1" ||
		got.ValueHash != sandgate.MaskHash(maskKey, "tok-2") || got.SetAt.IsZero() {
		t.Errorf("listed %+v", got)
	}
	if err := v.Delete(ctx, alice, "demo"); err != nil {
		t.Fatal(err)
	}
	if err := v.Delete(ctx, alice, "demo"); sandgate.ErrorCodeOf(err) != sandgate.CodeNotFound {
		t.Errorf("second delete: %v", err)
	}
	if list, _ := v.List(ctx); len(list) != 0 {
		t.Errorf("a removed secret is listed: %+v", list)
	}
	if _, err := v.Reveal(ctx, []sandgate.SecretBinding{{Name: "demo"}}); sandgate.ErrorCodeOf(err) != sandgate.CodeNotFound {
		t.Errorf("a removed secret revealed: %v", err)
	}
	info, created, err = v.Put(ctx, bob, "demo", "tok-3")
	if err != nil || info.Version != 3 || info.CreatedBy != "bob" || !created {
		t.Fatalf("put after delete: %+v %v", info, err)
	}
	want := "secret.set:1 secret.rotated:2 secret.deleted:2 secret.set:3"
	if got := strings.Join(rec.types(), " "); got != want {
		t.Errorf("events %s, want %s", got, want)
	}
	for _, ev := range rec.events {
		doc, _ := json.Marshal(ev)
		if strings.Contains(string(doc), "tok-") {
			t.Errorf("an event holds a value: %s", doc)
		}
		if ev.Actor == "" || ev.CorrelationID != "c-1" {
			t.Errorf("an event without who or correlation: %+v", ev)
		}
	}
	if rec.events[1].Payload["previous_version"] != int64(1) {
		t.Errorf("rotated payload %v", rec.events[1].Payload)
	}
}

// TestVaultRefusesBadInput: a name outside [a-z0-9_-]{1,64}, an empty
// value, one over 64 KiB or with a line break is INVALID-REQUEST naming
// the field, and nothing is stored or recorded.
func TestVaultRefusesBadInput(t *testing.T) {
	rec := &recorder{}
	v := newVault(t, newStore(t), "k1 "+hexA+"\n", rec)
	for name, tc := range map[string]struct{ name, value, field string }{
		"upper case name":   {"Demo", "x", "name"},
		"name with a slash": {"a/b", "x", "name"},
		"long name":         {strings.Repeat("a", 65), "x", "name"},
		"empty name":        {"", "x", "name"},
		"empty value":       {"demo", "", "value"},
		"value over 64 KiB": {"demo", strings.Repeat("v", 64<<10+1), "value"},
		"value with CRLF":   {"demo", "tok\r\nX-Evil: 1", "value"},
		"value with NUL":    {"demo", "tok\x00", "value"},
		"value not UTF-8":   {"demo", "tok\xff", "value"},
	} {
		t.Run(name, func(t *testing.T) {
			_, _, err := v.Put(context.Background(), alice, tc.name, tc.value)
			var se *sandgate.Error
			if !errors.As(err, &se) || se.Code != sandgate.CodeInvalidRequest || se.Field != tc.field {
				t.Fatalf("err = %v, want INVALID-REQUEST on %s", err, tc.field)
			}
			if tc.value != "" && strings.Contains(se.Message, tc.value) {
				t.Errorf("the error quotes the value: %s", se.Message)
			}
		})
	}
	if _, _, err := v.Put(context.Background(), alice, "demo", strings.Repeat("v", 64<<10)); err != nil {
		t.Errorf("a value of exactly 64 KiB: %v", err)
	}
	if got := rec.types(); len(got) != 1 {
		t.Errorf("events %v", got)
	}
}

// TestVaultAuditUnavailable: a change the trail cannot record is not made.
func TestVaultAuditUnavailable(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	v := newVault(t, newStore(t), "k1 "+hexA+"\n", rec)
	if _, _, err := v.Put(ctx, alice, "demo", "tok-1"); err != nil {
		t.Fatal(err)
	}
	rec.fail = sandgate.Errorf(sandgate.CodeAuditUnavailable, "down")
	if _, _, err := v.Put(ctx, alice, "demo", "tok-2"); sandgate.ErrorCodeOf(err) != sandgate.CodeAuditUnavailable {
		t.Fatalf("put: %v", err)
	}
	if err := v.Delete(ctx, alice, "demo"); sandgate.ErrorCodeOf(err) != sandgate.CodeAuditUnavailable {
		t.Fatalf("delete: %v", err)
	}
	rs, err := v.Reveal(ctx, []sandgate.SecretBinding{{Name: "demo"}})
	if err != nil || rs[0].Value.Reveal() != "tok-1" || rs[0].Version != 1 {
		t.Fatalf("after refused changes: %+v %v", rs, err)
	}
}

// TestVaultReEncrypt: a new key put first in the key file seals new
// versions at once and opens the old ones; re-encrypt moves every data
// key under it, after which the old key can leave the file and every
// secret still opens.
func TestVaultReEncrypt(t *testing.T) {
	ctx := context.Background()
	store := newStore(t)
	rec := &recorder{}
	v1 := newVault(t, store, "k1 "+hexA+"\n", rec)
	for i, name := range []string{"a", "b", "c"} {
		if _, _, err := v1.Put(ctx, alice, name, fmt.Sprintf("tok-%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	both := newVault(t, store, "k2 "+hexB+"\nk1 "+hexA+"\n", rec)
	if _, _, err := both.Put(ctx, alice, "d", "tok-3"); err != nil {
		t.Fatal(err)
	}
	n, err := ReEncrypt(ctx, both.keys, store)
	if err != nil || n != 3 {
		t.Fatalf("re-encrypt: %d %v", n, err)
	}
	if n, err := ReEncrypt(ctx, both.keys, store); err != nil || n != 0 {
		t.Fatalf("second re-encrypt: %d %v", n, err)
	}
	only := newVault(t, store, "k2 "+hexB+"\n", rec)
	bindings := []sandgate.SecretBinding{{Name: "a"}, {Name: "b"}, {Name: "c"}, {Name: "d"}}
	rs, err := only.Reveal(ctx, bindings)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range rs {
		if r.Name != bindings[i].Name || r.Value.Reveal() != fmt.Sprintf("tok-%d", i) {
			t.Errorf("%s = %q", r.Name, r.Value.Reveal())
		}
	}
	list, _ := only.List(ctx)
	for _, s := range list {
		if s.KeyID != "k2" {
			t.Errorf("%s is under %s", s.Name, s.KeyID)
		}
	}
	// Without the key a secret is sealed under, it does not open, and
	// re-encrypt says which.
	if _, err := ReEncrypt(ctx, keyring(t, "k3 "+hexA+"\n"), store); err == nil || !strings.Contains(err.Error(), "key k2") {
		t.Errorf("re-encrypt without the key: %v", err)
	}
}

// TestVaultConcurrentPuts: puts of one name at once each get a version of
// their own.
func TestVaultConcurrentPuts(t *testing.T) {
	ctx := context.Background()
	rec := &recorder{}
	v := newVault(t, newStore(t), "k1 "+hexA+"\n", rec)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, _, err := v.Put(ctx, alice, "demo", fmt.Sprintf("tok-%d", i)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	seen := map[any]bool{}
	for _, ev := range rec.events {
		seen[ev.Payload["version"]] = true
	}
	if len(seen) != 8 {
		t.Errorf("versions %v", rec.types())
	}
	if list, _ := v.List(ctx); len(list) != 1 || list[0].Version != 8 {
		t.Errorf("list %+v", list)
	}
}

func sprint(format string, v any) string { return fmt.Sprintf(format, v) }

func jsonOf(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
