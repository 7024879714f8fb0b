package usb

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Event is one kernel uevent: a device was added, removed, bound to a
// driver, changed… It covers every subsystem; DeviceFromEvent picks the USB
// devices out.
type Event struct {
	Action    string // add, remove, bind, unbind, change, move, online, offline
	DevPath   string // under /sys, e.g. /devices/platform/soc/3f980000.usb/usb1/1-1/1-1.3
	Subsystem string // usb, net, block, …
	DevType   string // usb_device, usb_interface, … (may be empty)
	Seq       uint64 // the kernel's SEQNUM
	// Env holds every KEY=VALUE of the event, including the ones above.
	Env map[string]string
}

// maxUevent bounds what ParseUevent accepts: the kernel's environment
// buffer is 2 KiB (UEVENT_BUFFER_SIZE), plus the ACTION@DEVPATH header.
const maxUevent = 8 << 10

// errUdevMessage marks a message in udev's format ("libudev" header) rather
// than the kernel's.
var errUdevMessage = errors.New("usb: message is udev's, not the kernel's")

// ParseUevent parses a message as the kernel sends it on
// NETLINK_KOBJECT_UEVENT: "ACTION@DEVPATH", then KEY=VALUE fields, each
// ended by a NUL byte.
func ParseUevent(b []byte) (Event, error) {
	if len(b) > maxUevent {
		return Event{}, fmt.Errorf("usb: uevent of %d bytes exceeds %d", len(b), maxUevent)
	}
	if bytes.HasPrefix(b, []byte("libudev\x00")) {
		return Event{}, errUdevMessage
	}
	fields := bytes.Split(bytes.TrimRight(b, "\x00"), []byte{0})
	action, devpath, ok := strings.Cut(string(fields[0]), "@")
	if !ok || action == "" || !strings.HasPrefix(devpath, "/") {
		return Event{}, fmt.Errorf("usb: uevent header %q is not ACTION@DEVPATH", truncate(fields[0], 64))
	}
	env := make(map[string]string, len(fields))
	for _, f := range fields[1:] {
		k, v, ok := bytes.Cut(f, []byte("="))
		if !ok || len(k) == 0 {
			return Event{}, fmt.Errorf("usb: uevent field %q is not KEY=VALUE", truncate(f, 64))
		}
		env[string(k)] = string(v)
	}
	if a := env["ACTION"]; a != action {
		return Event{}, fmt.Errorf("usb: uevent header says %q but ACTION=%q", action, a)
	}
	if p := env["DEVPATH"]; p != devpath {
		return Event{}, fmt.Errorf("usb: uevent header says %q but DEVPATH=%q", devpath, p)
	}
	return eventFromEnv(env), nil
}

// eventFromEnv builds an Event from its environment (a uevent's fields, or
// a udev device's properties).
func eventFromEnv(env map[string]string) Event {
	seq, _ := strconv.ParseUint(env["SEQNUM"], 10, 64)
	return Event{
		Action:    env["ACTION"],
		DevPath:   env["DEVPATH"],
		Subsystem: env["SUBSYSTEM"],
		DevType:   env["DEVTYPE"],
		Seq:       seq,
		Env:       env,
	}
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "…"
	}
	return string(b)
}
