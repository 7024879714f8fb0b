package sandbox

import (
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"
)

// closeInherited makes every descriptor above statusFD close when the
// confine stage execs the shell. The gateway's own files are close-on-exec
// already, but descriptors it inherited are not: a shell's `exec 7<file`
// before `perch gateway`, or whatever a terminal or service manager leaves
// open, would reach every command and let it read, through the descriptor,
// what Landlock denies it by path. Close-on-exec rather than close: the Go
// runtime of this stage keeps its own descriptors until execve.
func closeInherited() error {
	// close_range(2) with CLOSE_RANGE_CLOEXEC: Linux 5.11, so on every
	// kernel with Landlock.
	if err := unix.CloseRange(statusFD+1, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err == nil {
		return nil
	}
	// Older kernels: mark each open descriptor.
	d, err := os.Open("/proc/self/fd")
	if err != nil {
		return fmt.Errorf("listing open descriptors: %w", err)
	}
	names, err := d.Readdirnames(-1)
	d.Close()
	if err != nil {
		return fmt.Errorf("listing open descriptors: %w", err)
	}
	for _, n := range names {
		fd, err := strconv.Atoi(n)
		if err != nil || fd <= statusFD {
			continue
		}
		if _, err := unix.FcntlInt(uintptr(fd), unix.F_SETFD, unix.FD_CLOEXEC); err != nil && err != unix.EBADF {
			return fmt.Errorf("marking descriptor %d close-on-exec: %w", fd, err)
		}
	}
	return nil
}
