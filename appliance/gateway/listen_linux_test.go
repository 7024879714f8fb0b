package gateway

import (
	"context"
	"log/slog"
	"net"
	"syscall"
	"testing"
)

// TestListenerIsPlainTCP: the gateway's socket is TCP, not the Multipath TCP
// Go would open where the kernel has it.
func TestListenerIsPlainTCP(t *testing.T) {
	s := New(Options{Host: "127.0.0.1", Port: 0, Log: slog.New(slog.DiscardHandler)})
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	defer s.Stop(context.Background())
	tl, ok := s.ln.(*limitListener).Listener.(*net.TCPListener)
	if !ok {
		t.Fatalf("listener %T", s.ln.(*limitListener).Listener)
	}
	rc, err := tl.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	proto, serr := -1, error(nil)
	if err := rc.Control(func(fd uintptr) {
		proto, serr = syscall.GetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_PROTOCOL)
	}); err != nil || serr != nil {
		t.Fatal(err, serr)
	}
	if proto != syscall.IPPROTO_TCP {
		t.Errorf("socket protocol %d, want TCP (%d); 262 is Multipath TCP", proto, syscall.IPPROTO_TCP)
	}
}
