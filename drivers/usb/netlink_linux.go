package usb

import (
	"errors"
	"fmt"
	"os"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// netlinkGroupKernel is the multicast group the kernel sends uevents to
// (udev re-broadcasts its processed events on group 2).
const netlinkGroupKernel = 1

// rcvBuf is the socket receive buffer asked for: a hub with several devices
// produces dozens of events at once, and the default (~200 KiB) can overflow
// on a slow board.
const rcvBuf = 1 << 20

// ListenNetlink opens a NETLINK_KOBJECT_UEVENT socket on the kernel's group.
// It needs no privilege and no cgo.
func ListenNetlink() (Listener, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return nil, fmt.Errorf("usb: open uevent netlink socket: %w", err)
	}
	// SO_RCVBUFFORCE passes the system limit but needs CAP_NET_ADMIN; else
	// take what SO_RCVBUF allows.
	if unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, rcvBuf) != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, rcvBuf)
	}
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: netlinkGroupKernel}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("usb: bind uevent netlink socket: %w", err)
	}
	// A non-blocking descriptor becomes pollable: Receive parks in the
	// runtime's poller, and Close wakes it.
	f := os.NewFile(uintptr(fd), "uevent-netlink")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("usb: %w", err)
	}
	return &netlinkListener{f: f, rc: rc, buf: make([]byte, maxUevent)}, nil
}

type netlinkListener struct {
	f      *os.File
	rc     syscall.RawConn
	buf    []byte // used by Receive only; one caller at a time
	closed atomic.Bool
}

func (l *netlinkListener) Source() string { return "netlink" }

func (l *netlinkListener) Close() error {
	l.closed.Store(true)
	return l.f.Close()
}

func (l *netlinkListener) Receive() (Event, error) {
	for {
		var (
			n    int
			from unix.Sockaddr
			rerr error
		)
		err := l.rc.Read(func(fd uintptr) bool {
			n, from, rerr = unix.Recvfrom(int(fd), l.buf, 0)
			return rerr != unix.EAGAIN
		})
		if err != nil {
			// RawConn reports a closed file with an internal poll error,
			// not os.ErrClosed.
			if l.closed.Load() || errors.Is(err, os.ErrClosed) {
				return Event{}, ErrClosed
			}
			return Event{}, fmt.Errorf("usb: receive uevent: %w", err)
		}
		switch {
		case rerr == unix.ENOBUFS:
			return Event{}, ErrOverflow
		case rerr == unix.EINTR:
			continue
		case rerr != nil:
			return Event{}, fmt.Errorf("usb: receive uevent: %w", rerr)
		}
		// Only the kernel (port id 0) speaks on this group; a message from a
		// process is a spoofing attempt, as libudev also assumes.
		if sa, ok := from.(*unix.SockaddrNetlink); !ok || sa.Pid != 0 {
			continue
		}
		ev, err := ParseUevent(l.buf[:n])
		if err != nil {
			continue // not a uevent we understand; the next one may be
		}
		return ev, nil
	}
}
