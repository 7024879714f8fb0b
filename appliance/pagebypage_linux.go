package appliance

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The userfaultfd ABI (linux/userfaultfd.h); the ioctl numbers are those of
// the generic encoding, which arm, arm64 and amd64 share. A 32-bit ARM
// kernel has no write protection for userfaultfd at all and refuses the
// feature: the armhf build maps in chunks there, as before.
const (
	uffdUserModeOnly        = 1
	uffdAPI                 = 0xAA
	uffdFeatureWPAsync      = 1 << 15
	uffdioAPI               = 0xC018AA3F // _IOWR(0xAA, 0x3F, struct uffdio_api)
	uffdioRegister          = 0xC020AA00 // _IOWR(0xAA, 0x00, struct uffdio_register)
	uffdioRegisterModeWP    = 1 << 1
	pageByPageKernelAtLeast = "6.7"
)

// pageByPageFD is the userfaultfd the binary's mappings are registered
// with. It stays open for the life of the process: closing it would undo
// the registrations.
var pageByPageFD = sync.OnceValues(func() (int, error) {
	// UFFD_USER_MODE_ONLY is what an unprivileged process may ask for when
	// vm.unprivileged_userfaultfd is 0 (Debian's default); the gateway
	// needs nothing more, since the kernel resolves every fault itself.
	fd, _, errno := unix.Syscall(unix.SYS_USERFAULTFD, unix.O_CLOEXEC|unix.O_NONBLOCK|uffdUserModeOnly, 0, 0)
	if errno != 0 {
		return -1, fmt.Errorf("userfaultfd: %w (a kernel built without CONFIG_USERFAULTFD, or a system call filter refuses it)", errno)
	}
	api := struct{ api, features, ioctls uint64 }{uffdAPI, uffdFeatureWPAsync, 0}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, fd, uffdioAPI, uintptr(unsafe.Pointer(&api))); errno != 0 {
		unix.Close(int(fd))
		return -1, fmt.Errorf("userfaultfd: asynchronous write protection: %w (it needs Linux %s or later, on a 64-bit kernel)", errno, pageByPageKernelAtLeast)
	}
	return int(fd), nil
})

// pageByPageOn records that at least one mapping is faulted page by page.
var pageByPageOn atomic.Bool

// mapPageByPage makes the kernel map [start, end), a read-only private
// mapping of a file, one page per fault instead of the 64 KB around each
// fault it maps by default ("fault-around"). Go lays code out package by
// package and a turn runs a little of almost every package, so with
// fault-around one turn kept 9 MB of the binary mapped for the ~2 MB of
// code and tables it ran. The kernel does not fault around in a range
// registered with a userfaultfd for write protection; in the asynchronous
// mode (Linux 6.7) any memory may be registered and the kernel resolves
// every fault itself, so no thread of ours ever waits on it. Nothing is
// write-protected: only the registration's side effect is wanted.
func mapPageByPage(start, end uintptr) error {
	if end <= start {
		return errors.New("mapPageByPage: empty range")
	}
	fd, err := pageByPageFD()
	if err != nil {
		return err
	}
	reg := struct{ start, len, mode, ioctls uint64 }{uint64(start), uint64(end - start), uffdioRegisterModeWP, 0}
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), uffdioRegister, uintptr(unsafe.Pointer(&reg))); errno != 0 {
		return fmt.Errorf("userfaultfd: registering %#x-%#x: %w", start, end, errno)
	}
	pageByPageOn.Store(true)
	return nil
}

// pageByPage reports whether the binary is mapped page by page.
func pageByPage() bool { return pageByPageOn.Load() }
