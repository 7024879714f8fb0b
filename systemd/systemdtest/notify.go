package systemdtest

import (
	"errors"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// NotifySocket is the receiving end of sd_notify: a unixgram socket the test
// owns, named by NOTIFY_SOCKET for the rest of the test (so tests using it
// cannot run in parallel).
type NotifySocket struct {
	conn *net.UnixConn
}

// ListenNotify creates the socket and sets NOTIFY_SOCKET to it.
func ListenNotify(t testing.TB) *NotifySocket {
	t.Helper()
	// A short directory: socket paths are limited to 108 bytes.
	dir, err := os.MkdirTemp("", "notify")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	path := filepath.Join(dir, "s")
	conn, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: path, Net: "unixgram"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = conn.Close() })
	t.Setenv("NOTIFY_SOCKET", path)
	return &NotifySocket{conn: conn}
}

// Next waits up to timeout for one message and returns its text.
func (n *NotifySocket) Next(t testing.TB, timeout time.Duration) string {
	t.Helper()
	_ = n.conn.SetReadDeadline(time.Now().Add(timeout))
	buf := make([]byte, 4096)
	k, err := n.conn.Read(buf)
	if err != nil {
		t.Fatalf("no notify message within %s: %v", timeout, err)
	}
	return string(buf[:k])
}

// Pending returns the messages already queued, without waiting. A sender's
// write returns only once its datagram is queued here, so after the sender
// is known to have moved on, Pending holds everything it sent.
func (n *NotifySocket) Pending(t testing.TB) []string {
	t.Helper()
	raw, err := n.conn.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	buf := make([]byte, 4096)
	for {
		var k int
		var rerr error
		// A read deadline in the past fails before looking at the queue, so
		// ask the kernel directly, without blocking.
		if err := raw.Read(func(fd uintptr) bool {
			k, _, rerr = unix.Recvfrom(int(fd), buf, unix.MSG_DONTWAIT)
			return true
		}); err != nil {
			t.Fatal(err)
		}
		if errors.Is(rerr, unix.EAGAIN) {
			return out
		}
		if rerr != nil {
			t.Fatalf("read notify socket: %v", rerr)
		}
		out = append(out, string(buf[:k]))
	}
}
