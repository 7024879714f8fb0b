// Package gatewaytest helps tests of the gateway and of what embeds it.
package gatewaytest

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
)

// BreakListener makes the kernel fail every later accept on this process's
// listening socket bound to addr (shutdown(2) on a listener makes accept
// return EINVAL), as a failing socket would, without touching the server's
// code path.
func BreakListener(t testing.TB, addr string) {
	t.Helper()
	want, err := net.ResolveTCPAddr("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	fds, _ := filepath.Glob("/proc/self/fd/*")
	for _, p := range fds {
		fd, err := strconv.Atoi(filepath.Base(p))
		if err != nil {
			continue
		}
		if l, _ := os.Readlink(p); len(l) < 7 || l[:7] != "socket:" {
			continue
		}
		sa, err := syscall.Getsockname(fd)
		if err != nil {
			continue
		}
		if in, ok := sa.(*syscall.SockaddrInet4); ok && in.Port == want.Port && net.IP(in.Addr[:]).Equal(want.IP) {
			if v, err := syscall.GetsockoptInt(fd, syscall.SOL_SOCKET, syscall.SO_ACCEPTCONN); err != nil || v != 1 {
				continue
			}
			if err := syscall.Shutdown(fd, syscall.SHUT_RDWR); err != nil {
				t.Fatalf("shutdown of the listener: %v", err)
			}
			return
		}
	}
	t.Fatalf("no listening socket for %s in this process", addr)
}

// FreePort returns a loopback port nothing listens on at the moment, for a
// config that must name its port before the gateway starts.
func FreePort(t testing.TB) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}
