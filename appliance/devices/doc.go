// Package devices is the device event service: it keeps the list of USB
// devices connected to the board and tells the last active chat when one
// comes or goes (Linux only; config devices.enabled and devices.monitor_usb).
//
// # Concepts
//
// At Start the service opens the hot-plug event source (drivers/usb: kernel
// netlink, or libudev with the udev build tag), then lists the devices
// present. Each USB device that is plugged in or pulled out becomes one
// change; the many events around it (interfaces, driver binds, tty and hid
// children) are ignored, so one device is one line, never five.
//
// Changes are gathered into one notification per burst: a hub plugged with
// three devices in it sends one message listing four, once the events have
// been quiet for Options.Quiet (at most Options.MaxWait after the first).
// Nothing is dropped: a failed send is retried with the changes that came
// since, a receive-buffer overflow re-reads the device list and reports the
// difference, and a burst still gathering at Stop is sent then. With no
// active chat (LastActive returns "") there is nobody to tell and the
// notification is skipped; the list is kept all the same.
//
// The list is saved through Store at every change and at Stop; at the next
// Start, devices plugged or unplugged while Perch was not running are
// reported as such. The first run has nothing to compare with and reports
// nothing.
//
// Check never fails: devices do not stop the gateway serving chat. Its
// message says what is monitored, or why not (disabled, not Linux, no event
// source).
package devices
