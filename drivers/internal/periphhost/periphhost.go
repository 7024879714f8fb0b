// Package periphhost loads periph.io's Linux bus drivers once, on first use,
// and holds what drivers/i2c and drivers/spi share: finding a registered bus
// by the names people use for it, and checking byte arguments.
//
// # Concepts
//
// periph.io finds buses by running its registered drivers (driverreg.Init).
// Perch needs only the kernel's character devices, /dev/i2c-* and
// /dev/spidev*, which periph's sysfs drivers cover on every Linux board, the
// Raspberry Pi included; the SoC register drivers that host.Init would also
// load (bcm283x, allwinner, …) drive GPIO and PWM, which Perch does not use,
// and cost about 0.7 MB on arm64. Init runs on the first hardware call rather
// than at process start, so a gateway that never touches a bus pays nothing
// for it at start-up. periph's drivers look for device nodes only then;
// SyncI2C and SyncSPI follow the ones that come and go after (a USB adapter
// plugged in or out).
package periphhost

import (
	"sync"

	"periph.io/x/conn/v3/driver/driverreg"
	// sysfs-gpio, loaded with the sysfs package, needs the gpio character
	// device driver; without it Init reports an unsatisfied dependency.
	_ "periph.io/x/host/v3/gpioioctl"
	// The sysfs drivers register /dev/i2c-* and /dev/spidev* buses.
	_ "periph.io/x/host/v3/sysfs"
)

var initOnce = sync.OnceValue(func() error {
	// A driver that finds nothing (no /dev/i2c-*) is "skipped", not an
	// error; Init fails only when a driver is broken, and the buses that did
	// register are still usable, so callers report the error beside
	// "no bus found" rather than instead of it.
	_, err := driverreg.Init()
	return err
})

// Init loads the bus drivers the first time it is called and returns the same
// result every time after.
func Init() error { return initOnce() }
