package sandbox

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Before Landlock ABI 9, nothing stops a sandboxed command from connecting
// to a UNIX socket it can name, and uid 0 is trusted by the services behind
// them: D-Bus would start a transient systemd unit, Docker a container,
// outside the sandbox. So when the gateway runs as root on such a kernel,
// the confine stage also installs a seccomp filter that makes
// socket(AF_UNIX, …) fail with EACCES. Unprivileged gateways do not need
// it: those services treat their commands as the gateway's own user.

// unixSocketSyscalls are the (audit arch, socket syscall number) pairs the
// filter covers: the process's own ABI and the compat ABIs a 64-bit kernel
// also runs (32-bit userland on a 64-bit Pi kernel is common). i386's
// socketcall multiplexer hides its arguments and is not covered.
var unixSocketSyscalls = []struct{ arch, nr uint32 }{
	{unix.AUDIT_ARCH_X86_64, 41},
	{unix.AUDIT_ARCH_X86_64, 41 | 0x40000000}, // x32
	{unix.AUDIT_ARCH_I386, 359},
	{unix.AUDIT_ARCH_AARCH64, 198},
	{unix.AUDIT_ARCH_ARM, 281},
}

// seccomp_data offsets.
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16 // low 32 bits on the little-endian ABIs above
)

func bpfStmt(code uint16, k uint32) unix.SockFilter { return unix.SockFilter{Code: code, K: k} }

func bpfJump(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
}

// unixSocketFilter returns the BPF program: for each covered pair, if the
// arch and the number match and the domain is AF_UNIX, fail with EACCES;
// allow everything else.
func unixSocketFilter() []unix.SockFilter {
	const (
		ld  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		ret = unix.BPF_RET | unix.BPF_K
	)
	var prog []unix.SockFilter
	for _, s := range unixSocketSyscalls {
		// 6 instructions per pair; a miss jumps to the next pair.
		prog = append(prog,
			bpfStmt(ld, offArch),
			bpfJump(jeq, s.arch, 0, 4),
			bpfStmt(ld, offNr),
			bpfJump(jeq, s.nr, 0, 2),
			bpfStmt(ld, offArg0),
			bpfJump(jeq, unix.AF_UNIX, 0, 0), // patched below: to deny
		)
	}
	allow := len(prog)
	prog = append(prog,
		bpfStmt(ret, unix.SECCOMP_RET_ALLOW),
		bpfStmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.EACCES)),
	)
	deny := allow + 1
	for i := 5; i < allow; i += 6 {
		prog[i].Jt = uint8(deny - i - 1) // Jf 0: on to the next pair, or allow after the last
	}
	return prog
}

// denyUnixSockets installs the filter on the calling thread, which must
// have no_new_privs set and exec next.
func denyUnixSockets() error {
	filter := unixSocketFilter()
	prog := unix.SockFprog{Len: uint16(len(filter)), Filter: &filter[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&prog)), 0, 0); err != nil {
		return fmt.Errorf("installing the seccomp filter against UNIX sockets: %w", err)
	}
	return nil
}
