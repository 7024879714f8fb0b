package sandbox

import (
	"encoding/binary"
	"testing"

	"golang.org/x/sys/unix"
)

// runBPF interprets the subset of classic BPF the filter uses on a
// seccomp_data record, so the arm and compat branches are checked on any
// machine.
func runBPF(t *testing.T, prog []unix.SockFilter, nr, arch uint32, arg0 uint64) uint32 {
	t.Helper()
	data := make([]byte, 64)
	binary.LittleEndian.PutUint32(data[offNr:], nr)
	binary.LittleEndian.PutUint32(data[offArch:], arch)
	binary.LittleEndian.PutUint64(data[offArg0:], arg0)
	var acc uint32
	for pc := 0; pc < len(prog); pc++ {
		in := prog[pc]
		switch in.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			acc = binary.LittleEndian.Uint32(data[in.K:])
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K:
			if acc == in.K {
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

func TestUnixSocketFilter(t *testing.T) {
	prog := unixSocketFilter()
	deny := uint32(unix.SECCOMP_RET_ERRNO | uint32(unix.EACCES))
	for _, s := range unixSocketSyscalls {
		if got := runBPF(t, prog, s.nr, s.arch, unix.AF_UNIX); got != deny {
			t.Errorf("arch %#x socket(AF_UNIX): %#x, want deny", s.arch, got)
		}
		// The kernel reads the domain as an int: high bits do not help.
		if got := runBPF(t, prog, s.nr, s.arch, unix.AF_UNIX+1<<32); got != deny {
			t.Errorf("arch %#x socket(AF_UNIX with high bits): %#x, want deny", s.arch, got)
		}
		for _, domain := range []uint64{unix.AF_INET, unix.AF_INET6, unix.AF_NETLINK} {
			if got := runBPF(t, prog, s.nr, s.arch, domain); got != unix.SECCOMP_RET_ALLOW {
				t.Errorf("arch %#x socket(%d): %#x, want allow", s.arch, domain, got)
			}
		}
		// Another syscall with 1 as its first argument (write(1, …)).
		if got := runBPF(t, prog, s.nr+1, s.arch, 1); got != unix.SECCOMP_RET_ALLOW {
			t.Errorf("arch %#x syscall %d: %#x, want allow", s.arch, s.nr+1, got)
		}
	}
	if got := runBPF(t, prog, 41, 0x12345678, unix.AF_UNIX); got != unix.SECCOMP_RET_ALLOW {
		t.Errorf("unknown arch: %#x, want allow", got)
	}
}
