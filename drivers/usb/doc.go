// Package usb reports USB devices and their hot-plug events on Linux.
//
// # Concepts
//
// The kernel announces every device change as a uevent: a message on the
// NETLINK_KOBJECT_UEVENT socket, "ACTION@DEVPATH" followed by NUL-separated
// KEY=VALUE fields (SUBSYSTEM, DEVTYPE, PRODUCT=vid/pid/bcd, BUSNUM, …).
// Plugging one USB device produces several: the device itself
// (SUBSYSTEM=usb, DEVTYPE=usb_device), each of its interfaces
// (DEVTYPE=usb_interface), driver "bind" events, and the devices the drivers
// create (tty, hid, block). DeviceFromEvent keeps only the first kind, so a
// consumer sees one add and one remove per physical device.
//
// A Listener delivers the events. The default build uses a pure-Go netlink
// socket (no cgo, no udev needed, no privilege) and accepts only messages
// sent by the kernel itself. Built with the udev tag (and cgo), Listen uses
// libudev's monitor instead: where udevd runs, its events carry the hardware
// database's vendor and model names for devices without string descriptors.
//
// A Device's strings (manufacturer, product, serial) are read from sysfs
// when it is added; on removal sysfs has forgotten them, so consumers keep
// the record from the add. Enumerate lists the devices present at start from
// /sys/bus/usb/devices, through the same code as a hot-plug event. The sysfs
// root is a parameter, so tests run against a recorded tree in testdata/.
package usb
