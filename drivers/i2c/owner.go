package i2c

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"periph.io/x/conn/v3/i2c"

	"github.com/perchhq/perch/drivers/internal/periphhost"
)

// DriverError is the refusal of a transfer to an address a kernel driver
// owns ("UU" in i2cdetect). It matches ErrBusy.
type DriverError struct {
	Op     string // "read" or "write"
	Bus    BusInfo
	Addr   int
	Driver string // the driver's name in sysfs, e.g. "rtc-ds1307"
	// DeviceBus is the number of the bus the owned device is declared on:
	// Bus.Number, or a bus a multiplexer joins to it.
	DeviceBus int
}

func (e *DriverError) Error() string {
	dev := sysfsName(e.DeviceBus, e.Addr)
	return fmt.Sprintf("i2c: %s 0x%02x on bus %s refused: the address is in use by kernel driver %s%s (UU in a scan). "+
		"Perch refuses every transfer to it, reads included: one can land between the driver's own and corrupt "+
		"what the device holds (an RTC's time, an EEPROM's contents, a power chip's settings). "+
		"Use the kernel's interface for the device instead (an RTC as /dev/rtc0, a sensor under /sys/class/hwmon "+
		"or /sys/bus/iio/devices, an EEPROM as /sys/bus/i2c/devices/%s/eeprom), or, if nothing on the board "+
		"needs the driver, unbind it first: %s",
		e.Op, e.Addr, e.Bus, e.Driver, muxedFrom(e.Bus.Number, e.DeviceBus), dev, e.UnbindCommand())
}

// muxedFrom names the bus an owned device is on when a multiplexer joins
// it to bus n, and is empty when the device is on bus n itself.
func muxedFrom(n, deviceBus int) string {
	if deviceBus == n {
		return ""
	}
	return fmt.Sprintf(" on bus %d, which a multiplexer joins to this one", deviceBus)
}

// UnbindCommand is the shell command that detaches the driver from the
// device, wherever it is declared.
func (e *DriverError) UnbindCommand() string { return unbindCommand(e.DeviceBus, e.Addr, e.Driver) }

// Is makes errors.Is(err, ErrBusy) hold.
func (e *DriverError) Is(target error) bool { return target == ErrBusy }

// UnbindCommand is the shell command that detaches driver from the device
// at addr on this bus, leaving the address to Perch until the next boot.
func (b BusInfo) UnbindCommand(addr int, driver string) string {
	return unbindCommand(b.Number, addr, driver)
}

func unbindCommand(bus, addr int, driver string) string {
	return fmt.Sprintf("echo %s > /sys/bus/i2c/drivers/%s/unbind", sysfsName(bus, addr), driver)
}

// sysfsName is the kernel's name for the device at addr on bus n, as in
// /sys/bus/i2c/devices: "1-0068".
func sysfsName(n, addr int) string { return fmt.Sprintf("%d-%04x", n, addr) }

// Driver returns the name of the kernel driver that owns addr on the bus, or
// "" when none does (see Owner).
func (b BusInfo) Driver(addr int) (string, error) {
	drv, _, err := b.Owner(addr)
	return drv, err
}

// Owner returns the kernel driver that owns addr for this bus and the
// number of the bus its device is declared on, or "" when none does. It
// reads sysfs only; nothing goes on the wire. Like the kernel's own check
// for i2c-dev (the I2C_SLAVE ioctl), it looks at the buses a multiplexer
// joins to this one as well: with a channel selected, a transfer on the
// parent bus reaches the devices behind it, and one on a channel's bus goes
// out on the parent's wires. Only kernel buses can have one; a bus periph
// drives in user space (a USB adapter, numbered -1) never does.
func (b BusInfo) Owner(addr int) (driver string, deviceBus int, err error) {
	if b.Number < 0 {
		return "", -1, nil
	}
	buses, err := muxRelatives(b.Number)
	if err != nil {
		return "", -1, b.cannotTell(addr, err)
	}
	return b.ownerAmong(append([]int{b.Number}, buses...), addr)
}

// cannotTell is the refusal when sysfs cannot say who owns addr.
func (b BusInfo) cannotTell(addr int, err error) error {
	return fmt.Errorf("i2c: cannot tell whether a kernel driver owns 0x%02x on bus %s, so nothing is sent to it: %w", addr, b, err)
}

// ownerAmong returns the first of buses on which a kernel driver owns addr.
func (b BusInfo) ownerAmong(buses []int, addr int) (string, int, error) {
	for _, n := range buses {
		drv, err := driverOf(n, addr)
		if err != nil {
			return "", -1, b.cannotTell(addr, err)
		}
		if drv != "" {
			return drv, n, nil
		}
	}
	return "", -1, nil
}

// driverOf returns the driver bound to the device declared at addr on bus
// n, or "".
func driverOf(n, addr int) (string, error) {
	link := filepath.Join(periphhost.SysDir(), "bus", "i2c", "devices", sysfsName(n, addr), "driver")
	target, err := os.Readlink(link)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// No device declared there, or one without a driver bound: the
		// kernel itself lets i2c-dev at it.
		return "", nil
	case err != nil:
		return "", err
	}
	return filepath.Base(target), nil
}

// muxRelatives returns the buses a multiplexer joins to bus n: the bus a
// muxed bus hangs off and its own parents, then every bus behind n's
// multiplexers, however deep. sysfs keeps a muxed bus's adapter inside its
// parent's (.../i2c-1/i2c-3), so the tree of directories is the tree of
// buses. A bus sysfs does not list has none.
func muxRelatives(n int) ([]int, error) {
	sys := periphhost.SysDir()
	dir, err := filepath.EvalSymlinks(filepath.Join(sys, "bus", "i2c", "devices", "i2c-"+strconv.Itoa(n)))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []int
	root, _ := filepath.EvalSymlinks(sys)
	for p := filepath.Dir(dir); p != root && p != filepath.Dir(p); p = filepath.Dir(p) {
		if m, ok := adapterNumber(filepath.Base(p)); ok {
			out = append(out, m)
		}
	}
	return out, behind(dir, &out)
}

// behind appends the buses whose adapters lie under dir, depth first.
func behind(dir string, out *[]int) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		// Real directories only: sysfs's links (subsystem, device,
		// mux_device) lead back up the tree.
		if !e.IsDir() {
			continue
		}
		if m, ok := adapterNumber(e.Name()); ok {
			*out = append(*out, m)
			if err := behind(filepath.Join(dir, e.Name()), out); err != nil {
				return err
			}
		}
	}
	return nil
}

// adapterNumber reads a bus adapter's sysfs name, "i2c-3".
func adapterNumber(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "i2c-")
	if !ok || rest == "" {
		return 0, false
	}
	m, err := strconv.Atoi(rest)
	return m, err == nil && m >= 0 && strconv.Itoa(m) == rest
}

// CheckFree returns a DriverError (ErrBusy) when a kernel driver owns addr,
// so that op ("read" or "write") must not reach it, or an error when sysfs
// cannot say.
func (b BusInfo) CheckFree(op string, addr int) error {
	drv, on, err := b.Owner(addr)
	if err != nil {
		return err
	}
	if drv != "" {
		return &DriverError{Op: op, Bus: b, Addr: addr, Driver: drv, DeviceBus: on}
	}
	return nil
}

// guardedBus is the bus device drivers get: periph's sysfs bus uses
// I2C_RDWR, which unlike I2C_SLAVE does not refuse an address a kernel
// driver owns, so the check is Perch's to make, before every transfer.
type guardedBus struct {
	i2c.Bus
	info BusInfo
}

func (g guardedBus) Tx(addr uint16, w, r []byte) error {
	op := "read"
	if len(w) > 0 {
		op = "write"
	}
	if err := g.info.CheckFree(op, int(addr)); err != nil {
		return err
	}
	return g.Bus.Tx(addr, w, r)
}
