package sandbox

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// iouringClientArg makes the test binary, copied into a workspace, make a
// UNIX socket with io_uring (IORING_OP_SOCKET) and connect it to the path
// in its argument: the way round a seccomp filter on socket(2).
const iouringClientArg = "__sandbox-test-iouring-client"

// The io_uring ABI (include/uapi/linux/io_uring.h).
type ioSqringOffsets struct {
	Head, Tail, RingMask, RingEntries, Flags, Dropped, Array, Resv1 uint32
	UserAddr                                                        uint64
}

type ioCqringOffsets struct {
	Head, Tail, RingMask, RingEntries, Overflow, Cqes, Flags, Resv1 uint32
	UserAddr                                                        uint64
}

type ioUringParams struct {
	SqEntries, CqEntries, Flags, SqThreadCPU, SqThreadIdle, Features, WqFd uint32
	Resv                                                                   [3]uint32
	SqOff                                                                  ioSqringOffsets
	CqOff                                                                  ioCqringOffsets
}

const (
	ioringOpSocket       = 45
	ioringOffSqes        = 0x10000000
	ioringFeatSingleMmap = 1
	ioringEnterGetevents = 1
)

func iouringClient(args []string) int {
	fd, err := iouringSocket()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: args[0]}); err != nil {
		fmt.Println("connect:", err)
		return 1
	}
	fmt.Println("connected")
	return 0
}

// iouringSocket makes an AF_UNIX stream socket through one io_uring
// submission.
func iouringSocket() (int, error) {
	var p ioUringParams
	r, _, errno := unix.Syscall(unix.SYS_IO_URING_SETUP, 4, uintptr(unsafe.Pointer(&p)), 0)
	if errno != 0 {
		return -1, fmt.Errorf("io_uring_setup: %v", errno)
	}
	ring := int(r)
	sqSize := int(p.SqOff.Array + p.SqEntries*4)
	cqSize := int(p.CqOff.Cqes + p.CqEntries*16)
	size := sqSize
	if p.Features&ioringFeatSingleMmap != 0 {
		size = max(sqSize, cqSize)
	}
	sq, err := unix.Mmap(ring, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return -1, fmt.Errorf("mmap sq: %v", err)
	}
	cq := sq
	if p.Features&ioringFeatSingleMmap == 0 {
		if cq, err = unix.Mmap(ring, 0x8000000, cqSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE); err != nil {
			return -1, fmt.Errorf("mmap cq: %v", err)
		}
	}
	sqes, err := unix.Mmap(ring, ioringOffSqes, int(p.SqEntries)*64, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED|unix.MAP_POPULATE)
	if err != nil {
		return -1, fmt.Errorf("mmap sqes: %v", err)
	}
	u32 := func(b []byte, off uint32) *uint32 { return (*uint32)(unsafe.Pointer(&b[off])) }
	// SQE 0: IORING_OP_SOCKET, fd = domain, off = type, len = protocol.
	sqe := sqes[:64]
	clear(sqe)
	sqe[0] = ioringOpSocket
	*(*int32)(unsafe.Pointer(&sqe[4])) = unix.AF_UNIX
	*(*uint64)(unsafe.Pointer(&sqe[8])) = unix.SOCK_STREAM
	*(*uint64)(unsafe.Pointer(&sqe[32])) = 1 // user_data
	tail := atomic.LoadUint32(u32(sq, p.SqOff.Tail))
	mask := *u32(sq, p.SqOff.RingMask)
	*u32(sq, p.SqOff.Array+4*(tail&mask)) = 0
	atomic.StoreUint32(u32(sq, p.SqOff.Tail), tail+1)
	if _, _, errno := unix.Syscall6(unix.SYS_IO_URING_ENTER, uintptr(ring), 1, 1, ioringEnterGetevents, 0, 0); errno != 0 {
		return -1, fmt.Errorf("io_uring_enter: %v", errno)
	}
	head := atomic.LoadUint32(u32(cq, p.CqOff.Head))
	cqe := p.CqOff.Cqes + 16*(head&*u32(cq, p.CqOff.RingMask))
	res := *(*int32)(unsafe.Pointer(&cq[cqe+8]))
	if res < 0 {
		return -1, fmt.Errorf("IORING_OP_SOCKET: %v", unix.Errno(-res))
	}
	return int(res), nil
}

// TestIoUringRefused: io_uring is refused to every command, so its
// IORING_OP_SOCKET cannot make the UNIX socket that the seccomp filter
// refuses through socket(2), nor anything else behind the filter's back.
// The socket is open to all, so only the sandbox stands in the way.
func TestIoUringRefused(t *testing.T) {
	dir := nobodyDir(t)
	sock := filepath.Join(dir, "root-only.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if err := os.Chmod(sock, 0o777); err != nil {
		t.Fatal(err)
	}
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	// Outside the sandbox the client connects through io_uring: this
	// kernel has it, and the client works.
	out, err := exec.Command(os.Args[0], iouringClientArg, sock).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "connected") {
		t.Fatalf("unconfined io_uring client: %v %q", err, out)
	}
	for i := 0; accepted.Load() == 0 && i < 500; i++ {
		time.Sleep(10 * time.Millisecond)
	}
	before := accepted.Load()
	line := "./client " + iouringClientArg + " " + sock
	check := func(t *testing.T, res gatewayResult) {
		t.Helper()
		if res.Err != "" {
			t.Fatalf("run: %s", res.Err)
		}
		if strings.Contains(res.Output, "connected") || !strings.Contains(res.Output, "io_uring_setup: function not implemented") {
			t.Errorf("io_uring in a command: exit %d %q; want io_uring_setup refused", res.ExitCode, res.Output)
		}
	}
	asRootAndNobody(t, func(t *testing.T, asNobody bool) {
		if !asNobody {
			// As root, tools.exec.user root is the case the bypass was
			// found in: uid 0 with UNIX sockets refused by the filter.
			for _, user := range execUsers() {
				f := newFixture(t)
				if err := copyFile(os.Args[0], filepath.Join(f.ws, "client"), 0o755); err != nil {
					t.Fatal(err)
				}
				r := f.newRunner(t, Options{User: user, Limits: clientLimits()})
				res := run(t, r, line)
				check(t, gatewayResult{Output: res.Output, ExitCode: res.ExitCode})
			}
			return
		}
		ws := nobodyWorkspace(t)
		if err := copyFile(os.Args[0], filepath.Join(ws, "client"), 0o755); err != nil {
			t.Fatal(err)
		}
		rep := startGateway(t, gatewayJob{Workspace: ws, Lines: []string{line}, Limits: clientLimits()}, gatewayRun{asNobody: true})
		check(t, rep.Results[0])
	})
	if n := accepted.Load() - before; n != 0 {
		t.Errorf("the listener accepted %d connections from commands", n)
	}
}
