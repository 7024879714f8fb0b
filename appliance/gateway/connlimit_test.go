package gateway

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// dialFrom opens a TCP connection to addr from the loopback address from.
func dialFrom(t *testing.T, from, addr string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 2 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	c, err := d.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// closedByServer reports whether the server closed c (without answering)
// within d.
func closedByServer(c net.Conn, d time.Duration) bool {
	c.SetReadDeadline(time.Now().Add(d))
	_, err := c.Read(make([]byte, 1))
	return err != nil && !isTimeout(err)
}

func isTimeout(err error) bool {
	ne, ok := err.(net.Error)
	return ok && ne.Timeout()
}

// get sends one request on c and returns the status line.
func getOn(t *testing.T, c net.Conn) string {
	t.Helper()
	c.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.WriteString(c, "GET /open HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 64)
	n, err := c.Read(buf)
	if err != nil {
		t.Fatalf("reading the answer: %v", err)
	}
	line, _, _ := strings.Cut(string(buf[:n]), "\r\n")
	return line
}

func serveLimited(t *testing.T, opts Options) *Server {
	t.Helper()
	opts.Host = "127.0.0.1"
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	s := New(opts)
	s.Handle(http.MethodGet, "/open", Open, func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, map[string]bool{"ok": true})
	})
	if err := s.Listen(); err != nil {
		t.Fatal(err)
	}
	go s.Serve()
	t.Cleanup(func() { s.Stop(t.Context()) })
	return s
}

// One client holds at most its share of the connections: beyond it, its
// new connections are closed at once, and other clients are still served.
func TestConnectionsPerClientCapped(t *testing.T) {
	var logs syncBuffer
	s := serveLimited(t, Options{MaxConns: 8, MaxConnsPerClient: 3, HeaderTimeout: time.Second, Log: slog.New(slog.NewTextHandler(&logs, nil))})
	var held []net.Conn
	for range 3 {
		held = append(held, dialFrom(t, "127.0.0.2", s.Addr()))
	}
	for _, c := range held {
		if closedByServer(c, 100*time.Millisecond) {
			t.Fatal("a connection within the client's share was closed")
		}
	}
	extra := dialFrom(t, "127.0.0.2", s.Addr())
	if !closedByServer(extra, 2*time.Second) {
		t.Fatal("a connection beyond the client's share was kept")
	}
	if got := getOn(t, dialFrom(t, "127.0.0.3", s.Addr())); !strings.Contains(got, "200") {
		t.Errorf("another client: %q, want 200", got)
	}
	held[0].Close()
	// The server noticed the close.
	for deadline := time.Now().Add(10 * time.Second); s.ln.(*limitListener).heldBy("127.0.0.2") >= len(held); {
		if time.Now().After(deadline) {
			t.Fatal("the server never noticed the closed connection")
		}
		time.Sleep(time.Millisecond)
	}
	if got := getOn(t, dialFrom(t, "127.0.0.2", s.Addr())); !strings.Contains(got, "200") {
		t.Errorf("after closing one, the client's new connection: %q, want 200", got)
	}
	s.Stop(t.Context())
	if !strings.Contains(logs.String(), "127.0.0.2") {
		t.Errorf("the refused client is not in the log:\n%s", logs.String())
	}
}

// A connection that never completes its request headers is closed after
// the header timeout, giving its slot back.
func TestHalfOpenConnectionTimesOut(t *testing.T) {
	s := serveLimited(t, Options{HeaderTimeout: 300 * time.Millisecond})
	c := dialFrom(t, "127.0.0.2", s.Addr())
	io.WriteString(c, "GET /open HTTP/1.1\r\nHost: 127.0.0.1\r\n")
	start := time.Now()
	if !closedByServer(c, 3*time.Second) {
		t.Fatal("a half-open connection was kept past the header timeout")
	}
	if took := time.Since(start); took > 2*time.Second {
		t.Errorf("closed after %v", took)
	}
}

// All slots taken: a new connection waits for one instead of being served
// beyond the cap, and is served once a slot frees.
func TestConnectionsCappedInTotal(t *testing.T) {
	s := serveLimited(t, Options{MaxConns: 2, MaxConnsPerClient: 2})
	a := dialFrom(t, "127.0.0.2", s.Addr())
	dialFrom(t, "127.0.0.3", s.Addr())
	waitConns(t, s, func(n int) bool { return n == 2 })
	waiting := dialFrom(t, "127.0.0.4", s.Addr())
	waiting.SetDeadline(time.Now().Add(300 * time.Millisecond))
	io.WriteString(waiting, "GET /open HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
	if _, err := waiting.Read(make([]byte, 1)); err == nil || !isTimeout(err) {
		t.Fatalf("a connection beyond the total cap was served or closed: %v", err)
	}
	a.Close()
	waiting.SetDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 12)
	if _, err := io.ReadFull(waiting, buf); err != nil || !strings.Contains(string(buf), "200") {
		t.Fatalf("after a slot freed: %q %v", buf, err)
	}
}

// Stop does not hang on an Accept that waits for a slot.
func TestStopWhileAllSlotsTaken(t *testing.T) {
	s := serveLimited(t, Options{MaxConns: 1, MaxConnsPerClient: 1, HeaderTimeout: 500 * time.Millisecond})
	dialFrom(t, "127.0.0.2", s.Addr())
	dialFrom(t, "127.0.0.3", s.Addr())
	waitConns(t, s, func(n int) bool { return n == 1 })
	done := make(chan error, 1)
	go func() { done <- s.Stop(t.Context()) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop hung")
	}
}

// waitConns waits until the number of connections holding a slot
// satisfies cond: the server has accepted (or noticed the close of) the
// connections a test made, however slow the machine.
func waitConns(t *testing.T, s *Server, cond func(int) bool) {
	t.Helper()
	l := s.ln.(*limitListener)
	for deadline := time.Now().Add(10 * time.Second); !cond(l.inUse()); {
		if time.Now().After(deadline) {
			t.Fatalf("connections in use: %d", l.inUse())
		}
		time.Sleep(time.Millisecond)
	}
}
