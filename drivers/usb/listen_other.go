//go:build !linux

package usb

// Listen returns ErrUnsupported: hot-plug events need Linux.
func Listen() (Listener, error) { return nil, ErrUnsupported }
