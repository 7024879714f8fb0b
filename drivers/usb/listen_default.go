//go:build linux && !(udev && cgo)

package usb

// Listen opens the hot-plug event source of this build: the kernel's uevent
// netlink socket (build with -tags udev and cgo for libudev's monitor).
func Listen() (Listener, error) { return ListenNetlink() }
