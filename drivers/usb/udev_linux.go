//go:build linux && udev && cgo

package usb

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"

	"github.com/jochenvg/go-udev"
)

// Listen opens the hot-plug event source of this build: libudev's monitor
// (the udev build tag).
func Listen() (Listener, error) { return ListenUdev() }

// ListenUdev opens a libudev monitor. Where udevd runs it receives udev's
// processed events, whose properties carry the hardware database's vendor
// and model names; without udevd (containers, minimal images) it receives
// the kernel's events, as the netlink listener does.
func ListenUdev() (Listener, error) {
	var u udev.Udev
	group, source := "udev", "udev"
	if _, err := os.Stat("/run/udev/control"); err != nil {
		// libudev would bind a monitor that never hears anything.
		group, source = "kernel", "udev (kernel events: udevd is not running)"
	}
	m := u.NewMonitorFromNetlink(group)
	if m == nil {
		return nil, errors.New("usb: udev monitor could not be created")
	}
	_ = m.SetReceiveBufferSize(rcvBuf) // best effort, as in the netlink listener
	ctx, cancel := context.WithCancel(context.Background())
	ch, errs, err := m.DeviceChan(ctx)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("usb: udev monitor: %w", err)
	}
	return &udevListener{ch: ch, errs: errs, cancel: cancel, source: source, done: make(chan struct{})}, nil
}

type udevListener struct {
	ch     <-chan *udev.Device
	errs   <-chan error
	cancel context.CancelFunc
	source string

	once sync.Once
	done chan struct{}
}

func (l *udevListener) Source() string { return l.source }

func (l *udevListener) Receive() (Event, error) {
	select {
	case <-l.done:
		return Event{}, ErrClosed
	default:
	}
	select {
	case <-l.done:
		return Event{}, ErrClosed
	case d, ok := <-l.ch:
		if !ok {
			return Event{}, ErrClosed
		}
		env := d.Properties()
		if env["ACTION"] == "" {
			env["ACTION"] = d.Action()
		}
		if env["DEVPATH"] == "" {
			env["DEVPATH"] = d.Devpath()
		}
		return eventFromEnv(env), nil
	case err, ok := <-l.errs:
		if !ok {
			return Event{}, ErrClosed
		}
		return Event{}, fmt.Errorf("usb: udev monitor: %w", err)
	}
}

// Close stops go-udev's polling goroutine and drains its channels until it
// has exited (within its one-second poll timeout): it blocks on an unread
// send otherwise, and would outlive the listener.
func (l *udevListener) Close() error {
	l.once.Do(func() {
		close(l.done)
		l.cancel()
		ch, errs := l.ch, l.errs
		for ch != nil || errs != nil {
			select {
			case _, ok := <-ch:
				if !ok {
					ch = nil
				}
			case _, ok := <-errs:
				if !ok {
					errs = nil
				}
			}
		}
	})
	return nil
}
