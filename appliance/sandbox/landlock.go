package sandbox

import (
	"errors"
	"fmt"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Landlock is driven through its three system calls rather than through
// go-landlock's Config.Restrict: the ruleset is applied by a child on the one
// thread that then calls execve, so nothing needs go-landlock's all-threads
// machinery (psx), which under cgo would wrap pthread_create in the whole
// gateway binary. Only the kernel's ABI numbers and bits are used, from
// x/sys/unix.

// landlockABI probes the kernel. It returns the ABI version to use (0 when
// Landlock is unavailable) and, when 0, why.
func landlockABI() (int, string) {
	v, _, errno := syscall.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	if errno != 0 {
		switch errno {
		case unix.ENOSYS:
			return 0, "the kernel is built without Landlock (CONFIG_SECURITY_LANDLOCK); Debian and Raspberry Pi OS kernels since 5.13 have it"
		case unix.EOPNOTSUPP:
			return 0, "Landlock is built in but not enabled at boot; add landlock to the kernel's lsm= list (e.g. lsm=landlock,… in cmdline.txt on a Raspberry Pi)"
		}
		return 0, fmt.Sprintf("the Landlock probe failed: %v", errno)
	}
	abi := int(v)
	if abi >= 6 {
		// Signal scoping had a bug fixed by erratum 2 (backported to
		// 6.12 LTS); without the fix, use the V5 feature set.
		errata, _, e := syscall.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_ERRATA)
		if e != 0 || errata&0x2 == 0 {
			abi = 5
		}
	}
	return abi, ""
}

// applyLandlock restricts the calling thread to rules under the given ABI.
// The caller must hold the thread (runtime.LockOSThread), have set
// no_new_privs on it and execve from it: the restriction is per thread, and
// execve carries it into the new program and everything it starts.
func applyLandlock(abi int, rules []pathRule) error {
	handled := handledAccess(abi)
	attr := unix.LandlockRulesetAttr{
		Handled_access_fs: handled,
		Scoped:            handledScopes(abi),
	}
	// Older kernels know a shorter struct; the quiet fields (V10) are zero,
	// which every kernel accepts, but pass only the part the ABI knows.
	size := unsafe.Sizeof(attr)
	switch {
	case abi < 4:
		size = 8
	case abi < 6:
		size = 16
	case abi < 10:
		size = 24
	}
	fd, _, errno := syscall.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, uintptr(unsafe.Pointer(&attr)), size, 0)
	if errno != 0 {
		return fmt.Errorf("landlock_create_ruleset: %w", errno)
	}
	defer unix.Close(int(fd))

	for _, r := range rules {
		if err := addRule(int(fd), r, handled); err != nil {
			return err
		}
	}
	if _, _, errno := syscall.Syscall(unix.SYS_LANDLOCK_RESTRICT_SELF, fd, 0, 0); errno != 0 {
		return fmt.Errorf("landlock_restrict_self: %w", errno)
	}
	return nil
}

func addRule(rulesetFD int, r pathRule, handled uint64) error {
	pfd, err := unix.Open(r.Path, unix.O_PATH|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.ENOENT) {
			return nil // gone since the rules were built: nothing to allow
		}
		return fmt.Errorf("landlock rule for %s: %w", r.Path, err)
	}
	defer unix.Close(pfd)
	var st unix.Stat_t
	if err := unix.Fstat(pfd, &st); err != nil {
		return fmt.Errorf("landlock rule for %s: %w", r.Path, err)
	}
	access := r.Access & handled
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		access &= accFileOnly
	}
	if access == 0 {
		return nil
	}
	attr := unix.LandlockPathBeneathAttr{Allowed_access: access, Parent_fd: int32(pfd)}
	_, _, errno := syscall.Syscall6(unix.SYS_LANDLOCK_ADD_RULE, uintptr(rulesetFD),
		unix.LANDLOCK_RULE_PATH_BENEATH, uintptr(unsafe.Pointer(&attr)), 0, 0, 0)
	if errno != 0 {
		return fmt.Errorf("landlock rule for %s (access %#x): %w", r.Path, access, errno)
	}
	return nil
}
