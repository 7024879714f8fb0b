//go:build linux && !(386 || arm)

package sandbox

import "golang.org/x/sys/unix"

const (
	sysSetgroups = unix.SYS_SETGROUPS
	sysSetresgid = unix.SYS_SETRESGID
	sysSetresuid = unix.SYS_SETRESUID
)
