package i2c

import "errors"

// Sentinel errors; callers branch on them with errors.Is.
var (
	// ErrNoBus means the machine has no I²C bus at all. Its text says how to
	// enable one on a Raspberry Pi.
	ErrNoBus = errors.New("i2c: no I2C bus found: enable it with raspi-config (Interface Options, I2C) " +
		"or dtparam=i2c_arm=on in /boot/firmware/config.txt, then reboot")
	// ErrUnknownBus means buses exist but none has the requested name.
	ErrUnknownBus = errors.New("i2c: unknown bus")
	// ErrBusy means a kernel driver has claimed the address ("UU" in
	// i2cdetect); the device is present but owned by the kernel.
	ErrBusy = errors.New("i2c: address in use by a kernel driver")
	// ErrInvalid marks an argument out of range.
	ErrInvalid = errors.New("i2c: invalid argument")
)
