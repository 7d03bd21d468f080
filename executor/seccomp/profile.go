// Package seccomp is sandgate's own seccomp profile, applied to every
// container it creates (fresh, warm, session and the agent in them):
// Docker's default profile, taken as Go data from moby/profiles, less the
// system calls untrusted code never needs and kernel escapes keep using.
package seccomp

import (
	"encoding/json"
	"slices"
	"sync"

	moby "github.com/moby/profiles/seccomp"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// Denied are the system calls the profile removes from Docker's default,
// whatever capabilities, architecture or kernel a rule of the default
// would have allowed them for. A call no rule allows fails with EPERM
// (Docker's default action), clone3 with ENOSYS so that C libraries fall
// back to clone, which the profile allows without namespace flags only.
var Denied = []string{
	// io_uring: its own path through the kernel, outside the system call
	// filter, and a long record of privilege escalations.
	"io_uring_setup", "io_uring_enter", "io_uring_register",
	// userfaultfd: the race window of many kernel exploits.
	"userfaultfd",
	// The kernel keyring: not namespaced.
	"add_key", "keyctl", "request_key",
	// eBPF and performance events: kernel attack surface, side channels.
	"bpf", "perf_event_open",
	// Reading and writing other processes.
	"ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd", "kcmp",
	// New namespaces, joined or made: the way to capabilities in a user
	// namespace, and from there to every namespaced kernel interface.
	"unshare", "setns",
	// The mount family, old and new API.
	"mount", "umount", "umount2", "pivot_root", "fsopen", "fsconfig", "fsmount", "fspick",
	"move_mount", "open_tree", "mount_setattr",
	// Opening files by handle, past the mount's root (the shocker escape).
	"open_by_handle_at",
	// Loading another kernel.
	"kexec_load", "kexec_file_load",
	// clone3's flags are behind a pointer, out of a filter's reach.
	"clone3",
}

// namespaceFlags are the clone flags that make new namespaces; clone with
// any of them is refused. Docker's default mask for callers without
// CAP_SYS_ADMIN is the same set.
const namespaceFlags = unix.CLONE_NEWNS | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER |
	unix.CLONE_NEWPID | unix.CLONE_NEWNET | unix.CLONE_NEWCGROUP

var profile = sync.OnceValues(build)

// Profile returns sandgate's profile in Docker's JSON format (with its
// architecture, kernel and capability conditions), built once.
func Profile() ([]byte, error) { return profile() }

// SecurityOpt is the security option that applies the profile to a
// container: Docker reads the profile itself from the option, as `docker
// run --security-opt seccomp=FILE` sends it.
func SecurityOpt() (string, error) {
	p, err := profile()
	if err != nil {
		return "", err
	}
	return "seccomp=" + string(p), nil
}

// build is Docker's default less Denied: each rule keeps the calls that
// are not denied, a rule left with none is dropped, and two rules are
// added: clone3 fails with ENOSYS, and clone is allowed only without
// namespace flags (Docker's default grants both to CAP_SYS_ADMIN, which no
// admitted run has, but sandgate does not lean on the capability set).
func build() ([]byte, error) {
	p := moby.DefaultProfile()
	denied := map[string]bool{"clone": true}
	for _, n := range Denied {
		denied[n] = true
	}
	kept := p.Syscalls[:0]
	for _, rule := range p.Syscalls {
		// Docker's default names its calls in Names only (Name is the
		// deprecated spelling of old JSON profiles).
		rule.Names = slices.DeleteFunc(slices.Clone(rule.Names), func(n string) bool { return denied[n] })
		if len(rule.Names) > 0 {
			kept = append(kept, rule)
		}
	}
	enosys := uint(unix.ENOSYS)
	kept = append(kept,
		&moby.Syscall{
			LinuxSyscall: specs.LinuxSyscall{Names: []string{"clone3"}, Action: specs.ActErrno, ErrnoRet: &enosys},
			Comment:      "sandgate: clone3's flags cannot be filtered; ENOSYS makes callers fall back to clone",
		},
		&moby.Syscall{
			LinuxSyscall: specs.LinuxSyscall{
				Names:  []string{"clone"},
				Action: specs.ActAllow,
				Args:   []specs.LinuxSeccompArg{{Index: 0, Value: namespaceFlags, ValueTwo: 0, Op: specs.OpMaskedEqual}},
			},
			Comment:  "sandgate: clone without namespace flags",
			Excludes: &moby.Filter{Arches: []string{"s390", "s390x"}},
		},
		&moby.Syscall{
			LinuxSyscall: specs.LinuxSyscall{
				Names:  []string{"clone"},
				Action: specs.ActAllow,
				Args:   []specs.LinuxSeccompArg{{Index: 1, Value: namespaceFlags, ValueTwo: 0, Op: specs.OpMaskedEqual}},
			},
			Comment:  "sandgate: clone without namespace flags (s390 orders clone's arguments differently)",
			Includes: &moby.Filter{Arches: []string{"s390", "s390x"}},
		},
	)
	p.Syscalls = kept
	return json.Marshal(p)
}
