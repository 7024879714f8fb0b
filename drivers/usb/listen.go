package usb

import "errors"

// Listener delivers uevents as the kernel (or udev) announces them.
type Listener interface {
	// Receive blocks until the next event. It returns ErrClosed after
	// Close, and ErrOverflow when events were lost because they came faster
	// than they were read; the caller should then re-enumerate.
	Receive() (Event, error)
	// Close ends the listening and unblocks Receive.
	Close() error
	// Source names where events come from: "netlink" or "udev".
	Source() string
}

var (
	// ErrClosed is returned by Receive after Close.
	ErrClosed = errors.New("usb: listener closed")
	// ErrOverflow means the kernel dropped events: its socket buffer filled
	// before they were read. Re-enumerate to catch up.
	ErrOverflow = errors.New("usb: events lost (receive buffer overflow)")
	// ErrUnsupported means hot-plug events need Linux.
	ErrUnsupported = errors.New("usb: hot-plug events need Linux")
)
