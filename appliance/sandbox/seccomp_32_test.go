//go:build linux && (386 || arm)

package sandbox

import "golang.org/x/sys/unix"

// 32-bit ABIs have fcntl64 beside fcntl.
var nativeFcntl64 = []uint32{unix.SYS_FCNTL64}
