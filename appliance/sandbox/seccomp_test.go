package sandbox

import (
	"encoding/binary"
	"runtime"
	"slices"
	"testing"

	"golang.org/x/sys/unix"
)

// runBPF interprets the classic BPF the filter uses on a seccomp_data
// record, so every ABI's branch is checked on any machine.
func runBPF(t *testing.T, prog []unix.SockFilter, arch, nr uint32, args ...uint64) uint32 {
	t.Helper()
	data := make([]byte, 64)
	binary.LittleEndian.PutUint32(data[offNr:], nr)
	binary.LittleEndian.PutUint32(data[offArch:], arch)
	for i, a := range args {
		binary.LittleEndian.PutUint64(data[offArg0+8*i:], a)
	}
	var acc uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			acc = binary.LittleEndian.Uint32(data[in.K:])
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K, unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K:
			hit := acc == in.K
			if in.Code&0xf0 == unix.BPF_JGE {
				hit = acc >= in.K
			}
			if hit {
				pc += int(in.Jt)
			} else {
				pc += int(in.Jf)
			}
		case unix.BPF_RET | unix.BPF_K:
			return in.K
		default:
			t.Fatalf("unexpected instruction %+v at %d", in, pc)
		}
	}
	t.Fatal("ran off the end of the program")
	return 0
}

var (
	retAllow  = uint32(unix.SECCOMP_RET_ALLOW)
	retENOSYS = uint32(unix.SECCOMP_RET_ERRNO | uint32(unix.ENOSYS))
	retEACCES = uint32(unix.SECCOMP_RET_ERRNO | uint32(unix.EACCES))
	retEPERM  = uint32(unix.SECCOMP_RET_ERRNO | uint32(unix.EPERM))
)

func mustFilter(t *testing.T, f filterSpec) []unix.SockFilter {
	t.Helper()
	prog, err := buildFilter(f)
	if err != nil {
		t.Fatal(err)
	}
	return prog
}

// neg is a negative int as the kernel gets it in a register (sign-extended
// on 64-bit ABIs).
func neg(n int64) uint64 { return uint64(-n) }

// TestFilterIoUringEverywhere: io_uring is refused on every ABI, whatever
// else the filter does; x32 is refused whole; ordinary calls pass.
func TestFilterIoUringEverywhere(t *testing.T) {
	for _, f := range []filterSpec{{}, {DenyUnix: true}, {Targets: []int32{-1, 100}, NoNewGroups: true}} {
		prog := mustFilter(t, f)
		for _, c := range seccompArches {
			for _, nr := range c.ioUring {
				if got := runBPF(t, prog, c.audit, nr, 4, 0); got != retENOSYS {
					t.Errorf("%+v %s: io_uring call %d: %#x, want ENOSYS", f, c.name, nr, got)
				}
			}
			// socket(AF_INET), kill of an ordinary pid, fcntl(F_GETFL).
			for _, call := range [][]uint64{{uint64(c.socket), unix.AF_INET}, {uint64(c.kill), 4242, 9}, {uint64(c.fcntl[0]), 3, unix.F_GETFL}} {
				if got := runBPF(t, prog, c.audit, uint32(call[0]), call[1:]...); got != retAllow {
					t.Errorf("%+v %s: call %v: %#x, want allow", f, c.name, call, got)
				}
			}
		}
		for _, nr := range []uint32{x32Bit | 41, x32Bit | 425, x32Bit | 62} {
			if got := runBPF(t, prog, unix.AUDIT_ARCH_X86_64, nr, unix.AF_UNIX); got != retENOSYS {
				t.Errorf("%+v x32 call %#x: %#x, want ENOSYS", f, nr, got)
			}
		}
		// The same numbers under an ABI the table does not know.
		if got := runBPF(t, prog, 0x12345678, 425, 0); got != retAllow {
			t.Errorf("unknown ABI: %#x, want allow", got)
		}
	}
}

// TestFilterUnixSockets: with DenyUnix, socket(AF_UNIX) fails with EACCES
// on every ABI, whatever the high bits; socketcall's SYS_SOCKET is refused
// whole where it exists; other domains and other calls pass. Without it,
// UNIX sockets are allowed.
func TestFilterUnixSockets(t *testing.T) {
	prog := mustFilter(t, filterSpec{DenyUnix: true})
	open := mustFilter(t, filterSpec{})
	for _, c := range seccompArches {
		for _, domain := range []uint64{unix.AF_UNIX, unix.AF_UNIX | 1<<32} {
			if got := runBPF(t, prog, c.audit, c.socket, domain); got != retEACCES {
				t.Errorf("%s socket(%#x): %#x, want EACCES", c.name, domain, got)
			}
		}
		if got := runBPF(t, open, c.audit, c.socket, unix.AF_UNIX); got != retAllow {
			t.Errorf("%s socket(AF_UNIX) without DenyUnix: %#x, want allow", c.name, got)
		}
		for _, domain := range []uint64{unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK} {
			if got := runBPF(t, prog, c.audit, c.socket, domain); got != retAllow {
				t.Errorf("%s socket(%d): %#x, want allow", c.name, domain, got)
			}
		}
		for _, nr := range c.socketcall {
			if got := runBPF(t, prog, c.audit, nr, sysSock); got != retEACCES {
				t.Errorf("%s socketcall(SYS_SOCKET): %#x, want EACCES", c.name, got)
			}
			if got := runBPF(t, prog, c.audit, nr, 3 /* SYS_CONNECT */); got != retAllow {
				t.Errorf("%s socketcall(SYS_CONNECT): %#x, want allow", c.name, got)
			}
		}
		// A call with AF_UNIX's value as its first argument: write(1, …).
		if got := runBPF(t, prog, c.audit, c.socket+1, unix.AF_UNIX); got != retAllow {
			t.Errorf("%s call %d: %#x, want allow", c.name, c.socket+1, got)
		}
	}
}

// TestFilterProtectsTargets: with Targets, no kill-like call reaches a
// protected pid or group, nor every process at once; other pids can still
// be signalled; tkill, pidfd_send_signal and F_SETSIG are refused; and
// NoNewGroups refuses setsid and setpgid.
func TestFilterProtectsTargets(t *testing.T) {
	const sup, gw, gwGroup = 4100, 812, 800
	prog := mustFilter(t, filterSpec{Targets: []int32{-1, sup, -sup, gw, -gwGroup}, NoNewGroups: true})
	open := mustFilter(t, filterSpec{})
	for _, c := range seccompArches {
		for _, nr := range []uint32{c.kill, c.tgkill, c.sigqueueinfo, c.tgsigqueueinfo} {
			for _, target := range []uint64{sup, neg(sup), gw, neg(gwGroup), neg(1), neg(1) & 0xffffffff} {
				if got := runBPF(t, prog, c.audit, nr, target, 9); got != retEPERM {
					t.Errorf("%s call %d to %#x: %#x, want EPERM", c.name, nr, target, got)
				}
				if got := runBPF(t, open, c.audit, nr, target, 9); got != retAllow {
					t.Errorf("%s call %d to %#x unprotected: %#x, want allow", c.name, nr, target, got)
				}
			}
			for _, target := range []uint64{sup + 1, 0, neg(sup + 1)} {
				if got := runBPF(t, prog, c.audit, nr, target, 9); got != retAllow {
					t.Errorf("%s call %d to %#x: %#x, want allow", c.name, nr, target, got)
				}
			}
		}
		if got := runBPF(t, prog, c.audit, c.tkill, 4200, 9); got != retEPERM {
			t.Errorf("%s tkill: %#x, want EPERM", c.name, got)
		}
		if got := runBPF(t, prog, c.audit, c.pidfdSendSignal, 5, 9); got != retENOSYS {
			t.Errorf("%s pidfd_send_signal: %#x, want ENOSYS", c.name, got)
		}
		for _, nr := range c.fcntl {
			if got := runBPF(t, prog, c.audit, nr, 3, unix.F_SETSIG, 9); got != retEPERM {
				t.Errorf("%s fcntl %d F_SETSIG: %#x, want EPERM", c.name, nr, got)
			}
			for _, cmd := range []uint64{unix.F_SETOWN, unix.F_SETFL, unix.F_GETFD} {
				if got := runBPF(t, prog, c.audit, nr, 3, cmd, 1); got != retAllow {
					t.Errorf("%s fcntl %d cmd %d: %#x, want allow", c.name, nr, cmd, got)
				}
			}
		}
		for _, nr := range []uint32{c.setsid, c.setpgid} {
			if got := runBPF(t, prog, c.audit, nr, 0, 0); got != retEPERM {
				t.Errorf("%s call %d: %#x, want EPERM", c.name, nr, got)
			}
			if got := runBPF(t, open, c.audit, nr, 0, 0); got != retAllow {
				t.Errorf("%s call %d unprotected: %#x, want allow", c.name, nr, got)
			}
		}
	}
}

// TestFilterNativeNumbers: the table's numbers for the ABI this test
// binary runs under are the ones golang.org/x/sys/unix was generated with
// from the kernel's headers. .ci/qemu-test runs it as arm64 and arm.
func TestFilterNativeNumbers(t *testing.T) {
	audit, ok := nativeAudit[runtime.GOARCH]
	if !ok {
		t.Fatalf("GOARCH %s has no seccomp ABI", runtime.GOARCH)
	}
	i := slices.IndexFunc(seccompArches, func(c archCalls) bool { return c.audit == audit })
	if i < 0 {
		t.Fatalf("the filter does not cover this binary's own ABI %#x", audit)
	}
	c := seccompArches[i]
	for _, x := range []struct {
		name      string
		got, want uint32
	}{
		{"socket", c.socket, unix.SYS_SOCKET},
		{"kill", c.kill, unix.SYS_KILL},
		{"tkill", c.tkill, unix.SYS_TKILL},
		{"tgkill", c.tgkill, unix.SYS_TGKILL},
		{"rt_sigqueueinfo", c.sigqueueinfo, unix.SYS_RT_SIGQUEUEINFO},
		{"rt_tgsigqueueinfo", c.tgsigqueueinfo, unix.SYS_RT_TGSIGQUEUEINFO},
		{"pidfd_send_signal", c.pidfdSendSignal, unix.SYS_PIDFD_SEND_SIGNAL},
		{"setsid", c.setsid, unix.SYS_SETSID},
		{"setpgid", c.setpgid, unix.SYS_SETPGID},
		{"io_uring_setup", c.ioUring[0], unix.SYS_IO_URING_SETUP},
		{"io_uring_enter", c.ioUring[1], unix.SYS_IO_URING_ENTER},
		{"io_uring_register", c.ioUring[2], unix.SYS_IO_URING_REGISTER},
	} {
		if x.got != x.want {
			t.Errorf("%s %s: table %d, kernel %d", c.name, x.name, x.got, x.want)
		}
	}
	want := append([]uint32{unix.SYS_FCNTL}, nativeFcntl64...)
	if !slices.Equal(c.fcntl, want) {
		t.Errorf("%s fcntl: table %v, kernel %v", c.name, c.fcntl, want)
	}
	if !slices.Equal(c.socketcall, nativeSocketcall) {
		t.Errorf("%s socketcall: table %v, kernel %v", c.name, c.socketcall, nativeSocketcall)
	}
}
