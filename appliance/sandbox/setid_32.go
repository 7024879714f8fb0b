//go:build linux && (386 || arm)

package sandbox

import "golang.org/x/sys/unix"

// 32-bit ABIs keep the 16-bit id calls under the plain names.
const (
	sysSetgroups = unix.SYS_SETGROUPS32
	sysSetresgid = unix.SYS_SETRESGID32
	sysSetresuid = unix.SYS_SETRESUID32
)
