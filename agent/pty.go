package agent

import (
	"fmt"
	"os"
	"strconv"
	"syscall"
	"unsafe"
)

// The agent's own pseudo-terminals, with the standard library alone: the
// agent binary is static and links nothing else. A container's /dev/pts
// is a devpts instance of its own (Docker mounts one in every container,
// with /dev/ptmx its multiplexer), so the terminal is the sandbox's like
// everything else the agent starts.

// openPTY opens a new pseudo-terminal: its master, and its slave opened
// without becoming the agent's controlling terminal.
func openPTY() (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("open /dev/ptmx: %w", err)
	}
	var n uint32
	unlock := int32(0)
	err = ioctl(master, syscall.TIOCSPTLCK, unsafe.Pointer(&unlock))
	if err == nil {
		err = ioctl(master, syscall.TIOCGPTN, unsafe.Pointer(&n))
	}
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("unlock the pseudo-terminal: %w", err)
	}
	slave, err = os.OpenFile("/dev/pts/"+strconv.FormatUint(uint64(n), 10), os.O_RDWR|syscall.O_NOCTTY|syscall.O_CLOEXEC, 0)
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("open the pseudo-terminal's slave: %w", err)
	}
	return master, slave, nil
}

// winsize is struct winsize of <asm-generic/termios.h>.
type winsize struct {
	Rows, Cols, X, Y uint16
}

// setSize sets the terminal's window size; its foreground process group
// gets SIGWINCH from the kernel.
func setSize(f *os.File, rows, cols uint16) error {
	ws := winsize{Rows: rows, Cols: cols}
	return ioctl(f, syscall.TIOCSWINSZ, unsafe.Pointer(&ws))
}

// ioctl runs one ioctl on f's descriptor without putting it in blocking
// mode (as f.Fd would): reads of the master stay on the poller, so that
// closing it ends them.
func ioctl(f *os.File, req uintptr, arg unsafe.Pointer) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var errno syscall.Errno
	if err := rc.Control(func(fd uintptr) {
		_, _, errno = syscall.Syscall(syscall.SYS_IOCTL, fd, req, uintptr(arg))
	}); err != nil {
		return err
	}
	if errno != 0 {
		return errno
	}
	return nil
}
