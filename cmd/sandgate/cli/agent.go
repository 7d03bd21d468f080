package cli

import (
	"debug/elf"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/sandgate/sandgate/agent"
)

// AgentCommand is the hidden subcommand a sandbox's agent runs as: the
// executor mounts this binary read-only into the container and makes
// `sandgate sandbox-agent` its main process, under the container's init.
// It reads nothing but its stdin and needs no configuration.
const AgentCommand = "sandbox-agent"

// RunAgent is the agent, on the process's stdin and stdout: its exit code
// is 0 when its stdin ended, 1 when it refused the stream.
func RunAgent(stdin io.Reader, stdout, stderr io.Writer) int {
	if err := agent.Serve(stdin, stdout); err != nil {
		fmt.Fprintln(stderr, err)
		return 1
	}
	return 0
}

// agentBinary is the binary to mount into sandboxes as their agent: the
// configured one ("off": none), else this binary when it is statically
// linked (a dynamically linked one would not run in an image without its
// libraries) and the daemon is local (it resolves the mount's source on
// its own host), else none.
func agentBinary(configured, dockerHost string) (string, error) {
	switch configured {
	case "off":
		return "", nil
	case "":
		if dockerHost != "" && !strings.HasPrefix(dockerHost, "unix://") {
			return "", nil
		}
		self, err := os.Executable()
		if err != nil || !static(self) || !everyoneExecutes(self) {
			return "", nil
		}
		return self, nil
	}
	p, err := filepath.Abs(configured)
	if err != nil {
		return "", err
	}
	if !static(p) {
		return "", fmt.Errorf("SANDGATE_AGENT_BINARY=%s is not a statically linked executable (build it with CGO_ENABLED=0)", configured)
	}
	if !everyoneExecutes(p) {
		return "", fmt.Errorf("SANDGATE_AGENT_BINARY=%s must be readable and executable by every user (mode 0755): the sandboxes' users run it", configured)
	}
	return p, nil
}

// everyoneExecutes reports whether any user may read and run path.
func everyoneExecutes(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular() && fi.Mode().Perm()&0o005 == 0o005
}

// static reports whether path is an ELF executable with no interpreter.
func static(path string) bool {
	f, err := elf.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false
		}
	}
	return f.Type == elf.ET_EXEC || f.Type == elf.ET_DYN
}
