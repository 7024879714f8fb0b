package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"
)

// reveal makes the workspace reachable by its own path for a user who
// cannot pass through hide, one of its parents (a root gateway's workspace
// under /root, or in a 0700 $PERCH_HOME). It runs in the confine stage, as
// root, in a mount namespace of the command's own (the supervisor starts
// the stage with CLONE_NEWNS, and Go makes the new namespace's mounts
// private, so nothing here propagates back): a small tmpfs covers hide, the
// directories down to the workspace are made in it, and the workspace is
// bind-mounted at its path. What else hide held stays out of sight, which
// Landlock would refuse anyway. Nothing on disk changes.
func reveal(hide, ws string) error {
	rel, err := filepath.Rel(hide, ws)
	if err != nil || !filepath.IsLocal(rel) {
		return fmt.Errorf("revealing the workspace: %s is not below %s", ws, hide)
	}
	// Hold the workspace before its path is covered.
	fd, err := unix.Open(ws, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("revealing the workspace: %w", err)
	}
	defer unix.Close(fd)
	if err := unix.Mount("perch-sandbox", hide, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "mode=0755,size=64k,nr_inodes=256"); err != nil {
		return fmt.Errorf("revealing the workspace: mounting a tmpfs on %s: %w", hide, err)
	}
	p := hide
	for _, elem := range splitPath(rel) {
		p = filepath.Join(p, elem)
		if err := os.Mkdir(p, 0o755); err != nil {
			return fmt.Errorf("revealing the workspace: %w", err)
		}
	}
	src := "/proc/self/fd/" + strconv.Itoa(fd)
	if err := unix.Mount(src, ws, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("revealing the workspace: bind-mounting it at %s: %w", ws, err)
	}
	return nil
}

// switchUser makes the calling thread uid:gid with groups, for the execve
// that follows on it. Raw calls on purpose: Go's syscall.Setresuid changes
// every thread of the process, which this stage neither needs nor wants
// (its other threads never run the command).
func switchUser(uid, gid int, groups []int) error {
	gs := make([]uint32, len(groups))
	for i, g := range groups {
		gs[i] = uint32(g)
	}
	var p unsafe.Pointer
	if len(gs) > 0 {
		p = unsafe.Pointer(&gs[0])
	}
	if _, _, e := unix.RawSyscall(sysSetgroups, uintptr(len(gs)), uintptr(p), 0); e != 0 {
		return fmt.Errorf("setgroups: %w", e)
	}
	if _, _, e := unix.RawSyscall(sysSetresgid, uintptr(gid), uintptr(gid), uintptr(gid)); e != 0 {
		return fmt.Errorf("setresgid %d: %w", gid, e)
	}
	if _, _, e := unix.RawSyscall(sysSetresuid, uintptr(uid), uintptr(uid), uintptr(uid)); e != 0 {
		return fmt.Errorf("setresuid %d: %w", uid, e)
	}
	return nil
}
