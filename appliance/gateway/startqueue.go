package gateway

import (
	"net"
	"net/http"
	"syscall"

	"golang.org/x/sys/unix"
)

// Clients that connect while the gateway starts (a health probe polling
// /ready, the page reloading after an upgrade) wait in the listen queue
// until it serves. Waiting and Answered let the gateway answer them before
// its own bookkeeping (the pid file, systemd), which on a board's two
// cores would otherwise compete with their first answer.

// Waiting reports whether connections wait in the listen queue to be
// accepted (call it before Serve). It is false when that cannot be told.
func (s *Server) Waiting() bool {
	l, ok := s.ln.(*limitListener)
	if !ok {
		return false
	}
	sc, ok := l.Listener.(syscall.Conn)
	if !ok {
		return false
	}
	raw, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	waiting := false
	raw.Control(func(fd uintptr) {
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		n, err := unix.Poll(fds, 0)
		waiting = err == nil && n > 0 && fds[0].Revents&unix.POLLIN != 0
	})
	return waiting
}

// Answered is closed once the server has finished with a connection's
// request (the response is written: the connection went idle, or closed).
func (s *Server) Answered() <-chan struct{} { return s.answered }

// connState notes the first connection done with a request.
func (s *Server) connState(_ net.Conn, st http.ConnState) {
	switch st {
	case http.StateIdle, http.StateClosed, http.StateHijacked:
		s.answeredOnce.Do(func() { close(s.answered) })
	}
}
