package cli

import (
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSinksFileRefused: serve refuses a sinks file it cannot use, naming
// the variable, the file and the field, before any sink starts.
func TestSinksFileRefused(t *testing.T) {
	dir := t.TempDir()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range []struct{ name, file, want string }{
		{"bad field", `sinks: [{name: siem, type: syslog, syslog: {address: "no-port"}}]`, "sinks[0].syslog.address"},
		{"unknown field", `sinks: [{name: siem, type: syslog, syslog: {address: "h:1"}, extra: 1}]`, "extra"},
		{"missing secret file", `sinks: [{name: hook, type: webhook, webhook: {url: "https://h/", secret_file: "` + filepath.Join(dir, "none") + `"}}]`, "secret_file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".yaml")
			if err := os.WriteFile(path, []byte(tc.file), 0o600); err != nil {
				t.Fatal(err)
			}
			st, err := (&sinkConfig{SinksFile: path}).load()
			if err == nil {
				st.close()
				t.Fatal("the sinks file was accepted")
			}
			if !strings.Contains(err.Error(), "SANDGATE_SINKS_FILE") || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %q names neither SANDGATE_SINKS_FILE nor %s", err, tc.want)
			}
		})
	}
	st, err := (&sinkConfig{}).load()
	if err != nil {
		t.Fatalf("no sinks file: %v", err)
	}
	if s, err := st.start("host=/nonexistent dbname=x", logger); s != nil || err != nil {
		t.Errorf("no sinks file = %v, %v; want nothing", s, err)
	}
}
