package i2c

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"
)

// i2c-dev ioctls and SMBus constants, from <linux/i2c-dev.h> and <linux/i2c.h>.
const (
	ioctlSlave = 0x0703 // I2C_SLAVE: set the address; EBUSY if a driver owns it
	ioctlFuncs = 0x0705 // I2C_FUNCS: the adapter's functionality mask
	ioctlSMBus = 0x0720 // I2C_SMBUS: one SMBus transfer

	smbusWrite = 0 // I2C_SMBUS_WRITE
	smbusRead  = 1 // I2C_SMBUS_READ

	smbusQuick = 0 // I2C_SMBUS_QUICK
	smbusByte  = 1 // I2C_SMBUS_BYTE

	funcSMBusQuick    = 0x00010000 // I2C_FUNC_SMBUS_QUICK
	funcSMBusReadByte = 0x00020000 // I2C_FUNC_SMBUS_READ_BYTE
)

// smbusIoctlData is struct i2c_smbus_ioctl_data. data points to a union
// i2c_smbus_data (34 bytes); Go lays the fields out as C does, on 32- and
// 64-bit alike (checked by a test).
type smbusIoctlData struct {
	readWrite uint8
	command   uint8
	size      uint32
	data      unsafe.Pointer
}

// ioctler is the device file; tests stand in for the kernel here, since no
// machine without an I²C adapter has /dev/i2c-*.
type ioctler interface {
	ioctlValue(req, val uintptr) error
	ioctlPointer(req uintptr, arg unsafe.Pointer) error
	Close() error
}

// smbusProber probes a kernel bus with the SMBus commands i2cdetect uses.
type smbusProber struct {
	f     ioctler
	funcs uintptr
	// Kept on the heap with the prober: the kernel reads them through
	// pointers during the ioctl.
	req  smbusIoctlData
	data [34]byte
}

func openSMBus(path string) (prober, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, unix.EACCES) {
			return nil, fmt.Errorf("open %s: %w; run as root or add the user to group 'i2c'", path, err)
		}
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	return newSMBusProber(devFile(fd))
}

func newSMBusProber(f ioctler) (*smbusProber, error) {
	p := &smbusProber{f: f}
	if err := f.ioctlPointer(ioctlFuncs, unsafe.Pointer(&p.funcs)); err != nil {
		f.Close()
		return nil, fmt.Errorf("query adapter functions: %w", err)
	}
	if p.funcs&(funcSMBusQuick|funcSMBusReadByte) == 0 {
		f.Close()
		return nil, errors.New("the adapter can do neither SMBus quick write nor read byte, so it cannot be scanned safely")
	}
	return p, nil
}

func (p *smbusProber) probeFor(addr int) (Probe, bool) {
	how := ProbeFor(addr)
	if how == ProbeQuick && p.funcs&funcSMBusQuick == 0 {
		return how, false
	}
	if how == ProbeRead && p.funcs&funcSMBusReadByte == 0 {
		return how, false
	}
	return how, true
}

func (p *smbusProber) probe(addr int, how Probe) error {
	if err := p.f.ioctlValue(ioctlSlave, uintptr(addr)); err != nil {
		if errors.Is(err, unix.EBUSY) {
			return ErrBusy
		}
		return fmt.Errorf("%w: set address 0x%02x: %v", errAbort, addr, err)
	}
	p.req = smbusIoctlData{readWrite: smbusWrite, size: smbusQuick}
	if how == ProbeRead {
		p.req = smbusIoctlData{readWrite: smbusRead, size: smbusByte, data: unsafe.Pointer(&p.data)}
	}
	return p.f.ioctlPointer(ioctlSMBus, unsafe.Pointer(&p.req))
}

func (p *smbusProber) method() string {
	return "i2cdetect default: quick write, read byte at 0x30-0x37 and 0x50-0x5f"
}

func (p *smbusProber) close() error { return p.f.Close() }

// devFile is an open /dev/i2c-N.
type devFile int

func (d devFile) ioctlValue(req, val uintptr) error {
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(d), req, val); e != 0 {
		return e
	}
	return nil
}

func (d devFile) ioctlPointer(req uintptr, arg unsafe.Pointer) error {
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(d), req, uintptr(arg)); e != 0 {
		return e
	}
	return nil
}

func (d devFile) Close() error { return unix.Close(int(d)) }
