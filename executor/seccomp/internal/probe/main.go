// Command probe tries, inside a container, each system call sandgate's
// seccomp profile denies, and prints one line per call: its name and the
// errno it failed with, or OK. Each call runs in a child process of its
// own, so that one that succeeds (a new user namespace, a personality)
// cannot change what the next one finds. The tests build it statically
// (CGO_ENABLED=0) and mount it read-only into a sandbox.
package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// calls are the probes by name: each makes the call with arguments that
// harm nothing when the call is allowed, and returns its errno (0 when it
// succeeded).
var calls = map[string]func() syscall.Errno{
	"io_uring_setup": func() syscall.Errno {
		var params [120]byte
		return raw(unix.SYS_IO_URING_SETUP, 1, ptr(&params[0]))
	},
	"io_uring_enter":    func() syscall.Errno { return raw(unix.SYS_IO_URING_ENTER, ^uintptr(0), 0, 0, 0, 0, 0) },
	"io_uring_register": func() syscall.Errno { return raw(unix.SYS_IO_URING_REGISTER, ^uintptr(0), 0, 0, 0) },
	"userfaultfd":       func() syscall.Errno { return raw(unix.SYS_USERFAULTFD, 1 /* UFFD_USER_MODE_ONLY */) },
	"add_key": func() syscall.Errno {
		return raw(unix.SYS_ADD_KEY, str("user"), str("sandgate-probe"), str("x"), 1, uintptr(unix.KEY_SPEC_PROCESS_KEYRING&0xffffffff))
	},
	"keyctl": func() syscall.Errno {
		return raw(unix.SYS_KEYCTL, unix.KEYCTL_GET_KEYRING_ID, uintptr(unix.KEY_SPEC_SESSION_KEYRING&0xffffffff), 0)
	},
	"request_key":       func() syscall.Errno { return raw(unix.SYS_REQUEST_KEY, str("user"), str("sandgate-probe-none"), 0, 0) },
	"bpf":               func() syscall.Errno { return raw(unix.SYS_BPF, unix.BPF_MAP_CREATE, 0, 0) },
	"perf_event_open":   func() syscall.Errno { return raw(unix.SYS_PERF_EVENT_OPEN, 0, 0, ^uintptr(0), ^uintptr(0), 0) },
	"ptrace":            func() syscall.Errno { return raw(unix.SYS_PTRACE, unix.PTRACE_ATTACH, 999999, 0, 0) },
	"process_vm_readv":  func() syscall.Errno { return raw(unix.SYS_PROCESS_VM_READV, uintptr(os.Getppid()), 0, 0, 0, 0, 0) },
	"process_vm_writev": func() syscall.Errno { return raw(unix.SYS_PROCESS_VM_WRITEV, uintptr(os.Getppid()), 0, 0, 0, 0, 0) },
	"process_madvise":   func() syscall.Errno { return raw(unix.SYS_PROCESS_MADVISE, ^uintptr(0), 0, 0, 0, 0) },
	"pidfd_getfd":       func() syscall.Errno { return raw(unix.SYS_PIDFD_GETFD, ^uintptr(0), 0, 0) },
	"kcmp": func() syscall.Errno {
		pid := uintptr(os.Getpid())
		return raw(unix.SYS_KCMP, pid, pid, 0 /* KCMP_FILE */, 0, 0)
	},
	// A personality the default does not list (ADDR_NO_RANDOMIZE).
	"personality": func() syscall.Errno { return raw(unix.SYS_PERSONALITY, 0x0040000 /* ADDR_NO_RANDOMIZE */) },
	"unshare":     func() syscall.Errno { return raw(unix.SYS_UNSHARE, unix.CLONE_NEWUSER) },
	"setns":       func() syscall.Errno { return raw(unix.SYS_SETNS, ^uintptr(0), 0) },
	"clone_newuser": func() syscall.Errno {
		return child(&syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER})
	},
	"clone_newns": func() syscall.Errno { return child(&syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNS}) },
	"clone3":      func() syscall.Errno { return raw(unix.SYS_CLONE3, 0, 0) },
	"mount": func() syscall.Errno {
		return raw(unix.SYS_MOUNT, str("none"), str("/tmp"), str("tmpfs"), 0, str(""))
	},
	"umount2":    func() syscall.Errno { return raw(unix.SYS_UMOUNT2, str("/tmp"), 0) },
	"pivot_root": func() syscall.Errno { return raw(unix.SYS_PIVOT_ROOT, str("/tmp"), str("/tmp")) },
	"fsopen":     func() syscall.Errno { return raw(unix.SYS_FSOPEN, str("tmpfs"), 0) },
	"fsconfig":   func() syscall.Errno { return raw(unix.SYS_FSCONFIG, ^uintptr(0), 0, 0, 0, 0) },
	"fsmount":    func() syscall.Errno { return raw(unix.SYS_FSMOUNT, ^uintptr(0), 0, 0) },
	"fspick":     func() syscall.Errno { return raw(unix.SYS_FSPICK, uintptr(unix.AT_FDCWD&0xffffffff), str("/"), 0) },
	"move_mount": func() syscall.Errno {
		return raw(unix.SYS_MOVE_MOUNT, ^uintptr(0), str(""), ^uintptr(0), str(""), 0)
	},
	"open_tree":     func() syscall.Errno { return raw(unix.SYS_OPEN_TREE, uintptr(unix.AT_FDCWD&0xffffffff), str("/"), 0) },
	"mount_setattr": func() syscall.Errno { return raw(unix.SYS_MOUNT_SETATTR, ^uintptr(0), str(""), 0, 0, 0) },
	"open_by_handle_at": func() syscall.Errno {
		return raw(unix.SYS_OPEN_BY_HANDLE_AT, uintptr(unix.AT_FDCWD&0xffffffff), 0, 0)
	},
	"kexec_load":      func() syscall.Errno { return raw(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0) },
	"kexec_file_load": func() syscall.Errno { return raw(unix.SYS_KEXEC_FILE_LOAD, ^uintptr(0), ^uintptr(0), 0, 0, 0) },
}

// allowed are calls the profile must leave working: a plain child process
// (clone without namespace flags, then execve).
var allowed = map[string]func() syscall.Errno{
	"clone_plain": func() syscall.Errno { return child(nil) },
	"getpid":      func() syscall.Errno { return raw(unix.SYS_GETPID) },
}

func raw(trap uintptr, args ...uintptr) syscall.Errno {
	var a [6]uintptr
	copy(a[:], args)
	_, _, errno := syscall.Syscall6(trap, a[0], a[1], a[2], a[3], a[4], a[5])
	return errno
}

func ptr(b *byte) uintptr { return uintptr(unsafe.Pointer(b)) }

// str is a NUL-terminated copy of s, kept alive by the caller's frame for
// the call (the runtime does not move heap objects).
func str(s string) uintptr {
	p, err := unix.BytePtrFromString(s)
	if err != nil {
		panic(err)
	}
	return uintptr(unsafe.Pointer(p))
}

// child starts this program again, doing nothing, with attr, and returns
// the errno of the clone that made it.
func child(attr *syscall.SysProcAttr) syscall.Errno {
	cmd := exec.Command("/proc/self/exe", "noop")
	cmd.SysProcAttr = attr
	err := cmd.Run()
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	if err != nil {
		return syscall.EIO
	}
	return 0
}

func result(errno syscall.Errno) string {
	if errno == 0 {
		return "OK"
	}
	return unix.ErrnoName(errno)
}

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "noop":
			return
		case "one":
			f := calls[os.Args[2]]
			if f == nil {
				f = allowed[os.Args[2]]
			}
			fmt.Println(result(f()))
			return
		}
	}
	var names []string
	for n := range calls {
		names = append(names, n)
	}
	for n := range allowed {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		out, err := exec.Command("/proc/self/exe", "one", n).Output()
		if err != nil {
			fmt.Printf("%s ERROR(%v)\n", n, err)
			continue
		}
		fmt.Printf("%s %s", n, out)
	}
}
