package i2c

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

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
}

func (e *DriverError) Error() string {
	dev := sysfsName(e.Bus.Number, e.Addr)
	return fmt.Sprintf("i2c: %s 0x%02x on bus %s refused: the address is in use by kernel driver %s (UU in a scan). "+
		"Perch refuses every transfer to it, reads included: one can land between the driver's own and corrupt "+
		"what the device holds (an RTC's time, an EEPROM's contents, a power chip's settings). "+
		"Use the kernel's interface for the device instead (an RTC as /dev/rtc0, a sensor under /sys/class/hwmon "+
		"or /sys/bus/iio/devices, an EEPROM as /sys/bus/i2c/devices/%s/eeprom), or, if nothing on the board "+
		"needs the driver, unbind it first: %s",
		e.Op, e.Addr, e.Bus, e.Driver, dev, e.Bus.UnbindCommand(e.Addr, e.Driver))
}

// Is makes errors.Is(err, ErrBusy) hold.
func (e *DriverError) Is(target error) bool { return target == ErrBusy }

// UnbindCommand is the shell command that detaches driver from the device
// at addr, leaving the address to Perch until the next boot.
func (b BusInfo) UnbindCommand(addr int, driver string) string {
	return fmt.Sprintf("echo %s > /sys/bus/i2c/drivers/%s/unbind", sysfsName(b.Number, addr), driver)
}

// sysfsName is the kernel's name for the device at addr on bus n, as in
// /sys/bus/i2c/devices: "1-0068".
func sysfsName(n, addr int) string { return fmt.Sprintf("%d-%04x", n, addr) }

// Driver returns the name of the kernel driver that owns addr on the bus, or
// "" when none does. It reads sysfs only; nothing goes on the wire. Only
// kernel buses can have one; a bus periph drives in user space (a USB
// adapter, numbered -1) never does.
func (b BusInfo) Driver(addr int) (string, error) {
	if b.Number < 0 {
		return "", nil
	}
	link := filepath.Join(periphhost.SysDir(), "bus", "i2c", "devices", sysfsName(b.Number, addr), "driver")
	target, err := os.Readlink(link)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// No device declared there, or one without a driver bound: the
		// kernel itself lets i2c-dev at it.
		return "", nil
	case err != nil:
		return "", fmt.Errorf("i2c: cannot tell whether a kernel driver owns 0x%02x on bus %s, so nothing is sent to it: %w",
			addr, b, err)
	}
	return filepath.Base(target), nil
}

// CheckFree returns a DriverError (ErrBusy) when a kernel driver owns addr,
// so that op ("read" or "write") must not reach it, or an error when sysfs
// cannot say.
func (b BusInfo) CheckFree(op string, addr int) error {
	drv, err := b.Driver(addr)
	if err != nil {
		return err
	}
	if drv != "" {
		return &DriverError{Op: op, Bus: b, Addr: addr, Driver: drv}
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
