package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/sandgate/sandgate/executor/executortest"
)

// TestAgentBinary: the agent binary is a static, world-executable file
// named by SANDGATE_AGENT_BINARY, none with "off" or a remote daemon, and
// a configured one that cannot serve is refused at start.
func TestAgentBinary(t *testing.T) {
	static := executortest.AgentBinary(t)
	private := filepath.Join(t.TempDir(), "private")
	b, err := os.ReadFile(static)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(private, b, 0o700); err != nil {
		t.Fatal(err)
	}
	self, _ := os.Executable() // the test binary: linked dynamically, for -race
	tests := []struct {
		name, configured, dockerHost, want, err string
	}{
		{name: "off", configured: "off"},
		{name: "named", configured: static, want: static},
		{name: "remote daemon, default", dockerHost: "tcp://10.0.0.1:2375"},
		{name: "default, this binary dynamic"},
		{name: "dynamic", configured: self, err: "not a statically linked"},
		{name: "not for everyone", configured: private, err: "mode 0755"},
		{name: "missing", configured: "/no/such/binary", err: "not a statically linked"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := agentBinary(tt.configured, tt.dockerHost)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("err = %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || got != tt.want {
				t.Fatalf("agentBinary = %q %v, want %q", got, err, tt.want)
			}
		})
	}
}
