package i2c

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"unsafe"

	"golang.org/x/sys/unix"
)

// fakeAdapter answers the i2c-dev ioctls as the kernel does for an adapter
// with devices at present and kernel drivers at busy.
type fakeAdapter struct {
	funcs    uintptr
	present  map[int]bool
	busy     map[int]bool
	slaveErr error
	addr     int
	log      []string
	closed   bool
}

func (f *fakeAdapter) ioctlValue(req, val uintptr) error {
	if req != ioctlSlave {
		return unix.ENOTTY
	}
	if f.slaveErr != nil {
		return f.slaveErr
	}
	if f.busy[int(val)] {
		return unix.EBUSY
	}
	f.addr = int(val)
	return nil
}

func (f *fakeAdapter) ioctlPointer(req uintptr, arg unsafe.Pointer) error {
	switch req {
	case ioctlFuncs:
		*(*uintptr)(arg) = f.funcs
		return nil
	case ioctlSMBus:
		d := (*smbusIoctlData)(arg)
		switch {
		case d.readWrite == smbusWrite && d.size == smbusQuick && d.data == nil && d.command == 0:
			f.log = append(f.log, fmt.Sprintf("quick %02x", f.addr))
		case d.readWrite == smbusRead && d.size == smbusByte && d.data != nil:
			f.log = append(f.log, fmt.Sprintf("read %02x", f.addr))
			if f.present[f.addr] {
				(*[34]byte)(d.data)[0] = 0x5a
			}
		default:
			return unix.EINVAL
		}
		if !f.present[f.addr] {
			return unix.ENXIO // no ACK
		}
		return nil
	}
	return unix.ENOTTY
}

func (f *fakeAdapter) Close() error { f.closed = true; return nil }

func set(addrs ...int) map[int]bool {
	m := map[int]bool{}
	for _, a := range addrs {
		m[a] = true
	}
	return m
}

// TestKernelScanChoosesTheSafeProbePerAddress: quick write outside the EEPROM
// ranges, read byte inside them, nothing at all where a driver owns the
// address.
func TestKernelScanChoosesTheSafeProbePerAddress(t *testing.T) {
	f := &fakeAdapter{
		funcs:   funcSMBusQuick | funcSMBusReadByte | 0x1, // plus I2C_FUNC_I2C
		present: set(0x23, 0x50, 0x76),
		busy:    set(0x68),
	}
	p, err := newSMBusProber(f)
	if err != nil {
		t.Fatal(err)
	}
	res, err := scan(context.Background(), p, 1, noDriver)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Found, []int{0x23, 0x50, 0x76}) || !slices.Equal(res.Busy, []int{0x68}) || len(res.Skipped) != 0 {
		t.Fatalf("result = %+v", res)
	}
	if len(f.log) != MaxAddr-MinAddr+1-1 { // every address but the busy one
		t.Errorf("%d probes, want %d", len(f.log), MaxAddr-MinAddr)
	}
	for _, want := range []string{"quick 03", "quick 23", "read 30", "read 37", "quick 38", "quick 4f", "read 50", "read 5f", "quick 60", "quick 76", "quick 77"} {
		if !slices.Contains(f.log, want) {
			t.Errorf("probe %q missing", want)
		}
	}
	for _, e := range f.log {
		if strings.HasSuffix(e, " 68") {
			t.Errorf("busy address probed: %s", e)
		}
	}
	if err := p.close(); err != nil || !f.closed {
		t.Errorf("close: %v, closed %v", err, f.closed)
	}
}

// TestKernelScanSkipsWhatTheAdapterCannotDoSafely: an adapter without quick
// write gets no probe outside the EEPROM ranges rather than a risky read.
func TestKernelScanSkipsWhatTheAdapterCannotDoSafely(t *testing.T) {
	f := &fakeAdapter{funcs: funcSMBusReadByte, present: set(0x50, 0x76)}
	p, err := newSMBusProber(f)
	if err != nil {
		t.Fatal(err)
	}
	res, err := scan(context.Background(), p, 1, noDriver)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Found, []int{0x50}) {
		t.Errorf("Found = %#x, want [0x50]", res.Found)
	}
	if len(res.Skipped) != MaxAddr-MinAddr+1-24 || !slices.Contains(res.Skipped, 0x76) {
		t.Errorf("Skipped %d addresses (%#x…), want all %d outside the read ranges", len(res.Skipped), res.Skipped[:3], MaxAddr-MinAddr+1-24)
	}
	for _, e := range f.log {
		if !strings.HasPrefix(e, "read ") {
			t.Errorf("unsupported probe sent: %s", e)
		}
	}
}

func TestKernelScanRefusesAnAdapterItCannotProbe(t *testing.T) {
	f := &fakeAdapter{funcs: 0x1}
	if _, err := newSMBusProber(f); err == nil || !strings.Contains(err.Error(), "cannot be scanned safely") {
		t.Errorf("error %v", err)
	}
	if !f.closed {
		t.Error("device file left open")
	}
}

// TestKernelScanAbortsOnABrokenBus: a failure to select an address is not
// "nothing there"; the scan stops and says so, as i2cdetect does.
func TestKernelScanAbortsOnABrokenBus(t *testing.T) {
	f := &fakeAdapter{funcs: funcSMBusQuick | funcSMBusReadByte, slaveErr: unix.EIO}
	p, err := newSMBusProber(f)
	if err != nil {
		t.Fatal(err)
	}
	_, err = scan(context.Background(), p, 1, noDriver)
	if !errors.Is(err, errAbort) || !strings.Contains(err.Error(), "set address 0x03") {
		t.Errorf("error %v", err)
	}
}

// TestSMBusIoctlDataLayout: the struct must match the kernel's
// struct i2c_smbus_ioctl_data { __u8 read_write; __u8 command; __u32 size;
// union i2c_smbus_data *data; } on every architecture we build for.
func TestSMBusIoctlDataLayout(t *testing.T) {
	var d smbusIoctlData
	ptr := unsafe.Sizeof(uintptr(0))
	if unsafe.Offsetof(d.command) != 1 || unsafe.Offsetof(d.size) != 4 || unsafe.Offsetof(d.data) != 8 {
		t.Errorf("offsets %d %d %d, want 1 4 8", unsafe.Offsetof(d.command), unsafe.Offsetof(d.size), unsafe.Offsetof(d.data))
	}
	if want := 8 + ptr; unsafe.Sizeof(d) != want {
		t.Errorf("size %d, want %d", unsafe.Sizeof(d), want)
	}
}

// TestOpenSMBusMissingNode: the kernel path reports a missing node clearly.
func TestOpenSMBusMissingNode(t *testing.T) {
	_, err := openSMBus("/dev/i2c-nonexistent-99")
	if err == nil || !strings.Contains(err.Error(), "open /dev/i2c-nonexistent-99") {
		t.Errorf("error %v", err)
	}
}

// noDriver is sysfs on a bus where no kernel driver owns an address.
func noDriver(int) (string, int, error) { return "", -1, nil }
