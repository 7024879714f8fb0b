// Package i2c finds, scans, reads and writes I²C buses through periph.io.
//
// # Concepts
//
// A bus is named the way the board names it: "1", "I2C1", "/dev/i2c-1" and
// "i2c-1" all mean the kernel's /dev/i2c-1; "" means the bus on the board's
// pin header where the device tree names it (i2c_arm on a Raspberry Pi), else
// the lowest-numbered. Buses are discovered by periph's drivers, which run
// once, on the first call that needs them (see Buses and Open), never at
// process start.
//
// A device is a 7-bit address between MinAddr (0x03) and MaxAddr (0x77), the
// range i2cdetect scans; the others are reserved by the I²C specification.
// Every argument is range-checked before a bus is opened, so a bad request
// never reaches the wire.
//
// Scan probes each address the way i2cdetect does by default: an SMBus "read
// byte" for 0x30–0x37 and 0x50–0x5F, where EEPROMs live and a write could
// change what they hold, and an SMBus "quick write" (address only, no data)
// elsewhere, where a read could lock up some write-only chips. An address a
// kernel driver has claimed is reported busy ("UU" in i2cdetect), with the
// driver's name, and not probed.
// periph cannot send a zero-length write, so on kernel buses Scan issues these
// SMBus commands itself through the i2c-dev ioctls; buses periph drives in user
// space (USB adapters such as the FT232H) are probed with "read byte" only, as
// "i2cdetect -r" would.
//
// # Addresses a kernel driver owns
//
// A device the kernel drives (an RTC bound by rtc-ds1307, a HAT's EEPROM by
// at24, a PMIC, a sensor given to an IIO driver by a dtoverlay) is listed in
// sysfs as /sys/bus/i2c/devices/<bus>-00<addr>/driver. periph's sysfs bus
// transfers with I2C_RDWR, which, unlike the I2C_SLAVE ioctl i2cdetect and
// i2cget use, does not refuse such an address, so Perch checks sysfs itself
// before every transfer: Read, ReadRegister, Write, WriteRegister and the bus
// Periph gives device drivers refuse the address with a DriverError
// (errors.Is ErrBusy) naming bus, address and driver and saying how to
// proceed (the kernel's interface for the device, or unbinding the driver).
// Reads are refused too, not only writes: a read with a register writes the
// register byte first, and even a plain read can fall between the driver's
// own transfers and leave the device or the driver in a state neither
// expects. A multiplexer (a PCA9548 joining eight channels to one bus) makes
// each channel a bus of its own, whose adapter sysfs keeps inside its
// parent's: as the kernel's check for I2C_SLAVE does, an address is refused
// on a bus when a driver owns it on a channel behind that bus (however deep)
// or on a bus above it, whose wires a channel's transfers go out on; the
// error names the bus the device is declared on. Sibling channels are not
// joined (the multiplexer connects one at a time). When sysfs cannot say (an
// unreadable entry), nothing is sent.
// Buses periph drives in user space (USB adapters, numbered -1) have no
// kernel drivers and are not checked.
//
// When the machine has no bus at all, calls return ErrNoBus, whose text tells
// the user how to enable one (raspi-config or dtparam=i2c_arm=on).
package i2c
