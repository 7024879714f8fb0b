package sandbox

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Every command runs under a seccomp filter, installed by the confine stage
// right before execve. Landlock decides what a command may reach; the filter
// closes the ways round it and round the supervisor:
//
//   - io_uring, always. A ring performs operations (IORING_OP_SOCKET,
//     connect, openat…) without the system calls a filter sees, so once a
//     command has one no rule below holds. Refused with ENOSYS, which
//     programs take for "no io_uring here" and fall back from.
//   - socket(AF_UNIX), when the command runs as root on a Landlock ABI below
//     9 (filterSpec.DenyUnix). Nothing else stops it from connecting to a
//     UNIX socket it can name then, and uid 0 is trusted by the services
//     behind them: D-Bus would start a transient systemd unit, Docker a
//     container, outside the sandbox.
//   - signals to the supervisor and the gateway, when the command runs as
//     their user on a Landlock ABI below 6, which cannot scope signals
//     (filterSpec.Targets). A command that killed its supervisor would
//     leave its background jobs running past the timeout.
//   - setsid and setpgid (filterSpec.NoNewGroups), where there is neither a
//     cgroup nor Landlock's signal scoping: the command's process group is
//     then the handle the gateway kills the tree by if the supervisor dies.
//
// The filter covers each ABI a kernel of Perch's architectures runs: x86-64
// (and x32, refused whole), i386 on x86-64, arm64, and 32-bit ARM, natively
// or on an arm64 kernel (the usual Raspberry Pi OS setup). socketcall(2)
// multiplexes socket(2) on i386 and hides the domain in memory, so under
// DenyUnix its SYS_SOCKET call is refused whole; on ARM it exists only in
// the old ABI, which kernels with seccomp filters do not build
// (HAVE_ARCH_SECCOMP_FILTER needs !OABI_COMPAT) and arm64 does not run.

// archCalls are an ABI's numbers for the system calls the filter looks at.
type archCalls struct {
	name                                              string
	audit                                             uint32
	x32                                               bool // numbers with bit 30 set are the x32 ABI
	socket                                            uint32
	socketcall                                        []uint32
	kill, tkill, tgkill, sigqueueinfo, tgsigqueueinfo uint32
	pidfdSendSignal                                   uint32
	fcntl                                             []uint32
	setsid, setpgid                                   uint32
	ioUring                                           []uint32
}

// ioUringCalls are io_uring_setup, io_uring_enter and io_uring_register:
// 425 to 427 on every architecture (the numbers were unified from 424 on).
var ioUringCalls = []uint32{425, 426, 427}

// seccompArches are the ABIs the filter covers. The numbers are the
// kernel's (arch/*/syscall*.tbl); seccomp_test.go checks the native ABI's
// against golang.org/x/sys/unix when run on each architecture.
var seccompArches = []archCalls{
	{name: "x86-64", audit: unix.AUDIT_ARCH_X86_64, x32: true,
		socket: 41, kill: 62, tkill: 200, tgkill: 234, sigqueueinfo: 129, tgsigqueueinfo: 297,
		pidfdSendSignal: 424, fcntl: []uint32{72}, setsid: 112, setpgid: 109, ioUring: ioUringCalls},
	{name: "i386", audit: unix.AUDIT_ARCH_I386,
		socket: 359, socketcall: []uint32{102}, kill: 37, tkill: 238, tgkill: 270, sigqueueinfo: 178, tgsigqueueinfo: 335,
		pidfdSendSignal: 424, fcntl: []uint32{55, 221}, setsid: 66, setpgid: 57, ioUring: ioUringCalls},
	{name: "arm64", audit: unix.AUDIT_ARCH_AARCH64,
		socket: 198, kill: 129, tkill: 130, tgkill: 131, sigqueueinfo: 138, tgsigqueueinfo: 240,
		pidfdSendSignal: 424, fcntl: []uint32{25}, setsid: 157, setpgid: 154, ioUring: ioUringCalls},
	{name: "arm", audit: unix.AUDIT_ARCH_ARM,
		socket: 281, socketcall: []uint32{102}, kill: 37, tkill: 238, tgkill: 268, sigqueueinfo: 178, tgsigqueueinfo: 363,
		pidfdSendSignal: 424, fcntl: []uint32{55, 221}, setsid: 66, setpgid: 57, ioUring: ioUringCalls},
}

// nativeAudit maps the architectures Perch is built for to their ABI.
var nativeAudit = map[string]uint32{
	"amd64": unix.AUDIT_ARCH_X86_64,
	"386":   unix.AUDIT_ARCH_I386,
	"arm64": unix.AUDIT_ARCH_AARCH64,
	"arm":   unix.AUDIT_ARCH_ARM,
}

// filterSpec says what a command's filter refuses beyond io_uring.
type filterSpec struct {
	DenyUnix bool
	// Targets are first arguments of kill, tgkill, rt_sigqueueinfo and
	// rt_tgsigqueueinfo that are refused (pids, negated process groups,
	// -1 for every process). When set, tkill (which names a bare thread),
	// pidfd_send_signal (a pidfd can come from opening /proc/<pid>) and
	// F_SETSIG (which turns a file's SIGIO into any signal, delivered to
	// an owner set with F_SETOWN) are refused too.
	Targets []int32
	// NoNewGroups refuses setsid and setpgid.
	NoNewGroups bool
}

// seccomp_data offsets. Arguments are read by their low 32 bits (all the
// ABIs above are little-endian): the kernel reads pids, domains and fcntl
// commands as ints, so high bits change nothing.
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16
	offArg1 = 24
)

const (
	x32Bit  = 0x40000000
	sysSock = 1 // socketcall's SYS_SOCKET
)

// buildFilter assembles the BPF program for f.
func buildFilter(f filterSpec) ([]unix.SockFilter, error) {
	const (
		ld  = unix.BPF_LD | unix.BPF_W | unix.BPF_ABS
		jeq = unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K
		jge = unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K
		ret = unix.BPF_RET | unix.BPF_K
	)
	var a bpfAsm
	a.stmt(ld, offArch)
	for _, c := range seccompArches {
		a.jump(jeq, c.audit, "arch "+c.name, "")
	}
	// An ABI the kernel cannot run for this binary (the table covers
	// every one that kernels of Perch's architectures offer).
	a.stmt(ret, unix.SECCOMP_RET_ALLOW)
	protect := len(f.Targets) > 0
	for _, c := range seccompArches {
		a.label("arch " + c.name)
		a.stmt(ld, offNr)
		if c.x32 {
			a.jump(jge, x32Bit, "enosys", "")
		}
		for _, nr := range c.ioUring {
			a.jump(jeq, nr, "enosys", "")
		}
		if f.DenyUnix {
			a.jump(jeq, c.socket, "socket", "")
			for _, nr := range c.socketcall {
				a.jump(jeq, nr, "socketcall", "")
			}
		}
		if protect {
			a.jump(jeq, c.pidfdSendSignal, "enosys", "")
			a.jump(jeq, c.tkill, "eperm", "")
			for _, nr := range []uint32{c.kill, c.tgkill, c.sigqueueinfo, c.tgsigqueueinfo} {
				a.jump(jeq, nr, "target", "")
			}
			for _, nr := range c.fcntl {
				a.jump(jeq, nr, "fcntl", "")
			}
		}
		if f.NoNewGroups {
			a.jump(jeq, c.setsid, "eperm", "")
			a.jump(jeq, c.setpgid, "eperm", "")
		}
		a.stmt(ret, unix.SECCOMP_RET_ALLOW)
	}
	if f.DenyUnix {
		a.label("socket")
		a.stmt(ld, offArg0)
		a.jump(jeq, unix.AF_UNIX, "eacces", "")
		a.stmt(ret, unix.SECCOMP_RET_ALLOW)
		a.label("socketcall")
		a.stmt(ld, offArg0)
		a.jump(jeq, sysSock, "eacces", "")
		a.stmt(ret, unix.SECCOMP_RET_ALLOW)
	}
	if protect {
		a.label("target")
		a.stmt(ld, offArg0)
		for _, t := range f.Targets {
			a.jump(jeq, uint32(t), "eperm", "")
		}
		a.stmt(ret, unix.SECCOMP_RET_ALLOW)
		a.label("fcntl")
		a.stmt(ld, offArg1)
		a.jump(jeq, unix.F_SETSIG, "eperm", "")
		a.stmt(ret, unix.SECCOMP_RET_ALLOW)
	}
	a.label("enosys")
	a.stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.ENOSYS))
	a.label("eacces")
	a.stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.EACCES))
	a.label("eperm")
	a.stmt(ret, unix.SECCOMP_RET_ERRNO|uint32(unix.EPERM))
	return a.assemble()
}

// installFilter installs f's filter on the calling thread, which must have
// no_new_privs set and exec next.
func installFilter(f filterSpec) error {
	if _, ok := nativeAudit[runtime.GOARCH]; !ok {
		return fmt.Errorf("the exec sandbox has no seccomp filter for GOARCH=%s; Perch is built for amd64, arm64 and arm", runtime.GOARCH)
	}
	prog, err := buildFilter(f)
	if err != nil {
		return err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		return fmt.Errorf("installing the seccomp filter: %w", err)
	}
	return nil
}

// bpfAsm assembles classic BPF with forward jumps to named labels.
type bpfAsm struct {
	prog   []unix.SockFilter
	labels map[string]int
	jumps  []bpfJump // jumps whose targets are resolved by assemble
}

type bpfJump struct {
	pc     int
	jt, jf string // "" is the next instruction
}

func (a *bpfAsm) stmt(code uint16, k uint32) {
	a.prog = append(a.prog, unix.SockFilter{Code: code, K: k})
}

func (a *bpfAsm) jump(code uint16, k uint32, jt, jf string) {
	a.jumps = append(a.jumps, bpfJump{pc: len(a.prog), jt: jt, jf: jf})
	a.stmt(code, k)
}

func (a *bpfAsm) label(name string) {
	if a.labels == nil {
		a.labels = map[string]int{}
	}
	a.labels[name] = len(a.prog)
}

func (a *bpfAsm) assemble() ([]unix.SockFilter, error) {
	offset := func(pc int, label string) (uint8, error) {
		if label == "" {
			return 0, nil
		}
		to, ok := a.labels[label]
		if !ok {
			return 0, fmt.Errorf("seccomp filter: no label %q", label)
		}
		d := to - pc - 1
		if d < 0 || d > 255 {
			return 0, fmt.Errorf("seccomp filter: jump from %d to %q (%d) out of range", pc, label, to)
		}
		return uint8(d), nil
	}
	for _, j := range a.jumps {
		var err error
		if a.prog[j.pc].Jt, err = offset(j.pc, j.jt); err != nil {
			return nil, err
		}
		if a.prog[j.pc].Jf, err = offset(j.pc, j.jf); err != nil {
			return nil, err
		}
	}
	return a.prog, nil
}
