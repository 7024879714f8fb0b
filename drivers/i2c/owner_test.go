package i2c

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"periph.io/x/conn/v3/i2c/i2ctest"

	"github.com/perchhq/perch/drivers/hwtest"
	"github.com/perchhq/perch/drivers/internal/periphhost"
)

// wire is a Playback that also records every address a transfer reached,
// so a test can tell "refused before the wire" from "sent and failed".
type wire struct {
	*i2ctest.Playback
	mu    sync.Mutex
	addrs []int
}

func (w *wire) Tx(addr uint16, wr, r []byte) error {
	w.mu.Lock()
	w.addrs = append(w.addrs, int(addr))
	w.mu.Unlock()
	return w.Playback.Tx(addr, wr, r)
}

// openBus opens the bus called name until the test ends.
func openBus(t *testing.T, name string) *Bus {
	t.Helper()
	b, err := Open(name)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { b.Close() })
	return b
}

func (w *wire) reached() []int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.addrs)
}

// TestTransfersToADriversAddressAreRefused: every way of reaching a device
// (read, read with a register, write, a periph device driver's Tx) is refused
// at an address sysfs shows a kernel driver bound to, with an error naming
// bus, address and driver and saying what to do instead; nothing reaches the
// wire there, while a free address on the same bus is still read.
func TestTransfersToADriversAddressAreRefused(t *testing.T) {
	w := &wire{Playback: &i2ctest.Playback{DontPanic: true, Ops: []i2ctest.IO{
		{Addr: 0x76, W: []byte{0xd0}, R: []byte{0x60}},
	}}}
	hwtest.I2C(t, "FAKE-I2C46", nil, 46, w)
	hwtest.I2CDriver(t, 46, 0x68, "rtc-ds1307")
	b := openBus(t, "46")
	calls := []struct {
		op  string
		err error
	}{
		{"read", func() error { _, err := b.Read(0x68, 7); return err }()},
		{"read", func() error { _, err := b.ReadRegister(0x68, 0, 7); return err }()},
		{"write", b.Write(0x68, []byte{0, 0x59})},
		{"write", b.WriteRegister(0x68, 0, []byte{0x59})},
		{"write", b.Periph().Tx(0x68, []byte{0}, make([]byte, 7))},
		{"read", b.Periph().Tx(0x68, nil, make([]byte, 1))},
	}
	for i, c := range calls {
		var de *DriverError
		if !errors.Is(c.err, ErrBusy) || !errors.As(c.err, &de) || de.Driver != "rtc-ds1307" {
			t.Errorf("call %d: error %v, want a DriverError naming rtc-ds1307", i, c.err)
			continue
		}
		for _, want := range []string{
			"i2c: " + c.op + " 0x68 on bus 46 (FAKE-I2C46) refused: the address is in use by kernel driver rtc-ds1307",
			"reads included",
			"/dev/rtc0",
			"echo 46-0068 > /sys/bus/i2c/drivers/rtc-ds1307/unbind",
		} {
			if !strings.Contains(c.err.Error(), want) {
				t.Errorf("call %d: error %q lacks %q", i, c.err, want)
			}
		}
	}
	if got, err := b.ReadRegister(0x76, 0xd0, 1); err != nil || got[0] != 0x60 {
		t.Errorf("a free address on the same bus: %x, %v", got, err)
	}
	if got := w.reached(); !slices.Equal(got, []int{0x76}) {
		t.Errorf("transfers reached %#x on the wire, want only 0x76", got)
	}
}

// TestUnreadableOwnershipIsRefused: when sysfs cannot say whether a driver
// owns the address, nothing is sent rather than guessing "free".
func TestUnreadableOwnershipIsRefused(t *testing.T) {
	w := &wire{Playback: &i2ctest.Playback{DontPanic: true}}
	hwtest.I2C(t, "FAKE-I2C48", nil, 48, w)
	sys := t.TempDir()
	t.Cleanup(periphhost.SetSysDir(sys))
	// A driver entry that is not a link: readlink fails with EINVAL.
	if err := os.MkdirAll(filepath.Join(sys, "bus", "i2c", "devices", "48-0050", "driver"), 0o755); err != nil {
		t.Fatal(err)
	}
	b := openBus(t, "48")
	_, err := b.Read(0x50, 1)
	if err == nil || !strings.Contains(err.Error(), "i2c: cannot tell whether a kernel driver owns 0x50 on bus 48 (FAKE-I2C48), so nothing is sent to it") {
		t.Errorf("error %v", err)
	}
	if got := w.reached(); len(got) != 0 {
		t.Errorf("transfers reached %#x on the wire, want none", got)
	}
}

// TestScanReportsDriversWithoutProbingThem: an address a kernel driver owns
// is listed busy with the driver's name and never probed; a bus periph
// drives through I2C_RDWR would otherwise send the probe to it.
func TestScanReportsDriversWithoutProbingThem(t *testing.T) {
	w := &wire{Playback: &i2ctest.Playback{DontPanic: true, Ops: []i2ctest.IO{
		{Addr: 0x23, R: []byte{0}},
		{Addr: 0x76, R: []byte{0}},
	}}}
	hwtest.I2C(t, "FAKE-I2C47", nil, 47, w)
	hwtest.I2CDriver(t, 47, 0x50, "at24")
	hwtest.I2CDriver(t, 47, 0x68, "rtc-ds1307")
	res, err := openBus(t, "47").Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Found, []int{0x23, 0x76}) || !slices.Equal(res.Busy, []int{0x50, 0x68}) {
		t.Errorf("Found %#x Busy %#x, want [0x23 0x76] and [0x50 0x68]", res.Found, res.Busy)
	}
	if res.Drivers[0x50] != "at24" || res.Drivers[0x68] != "rtc-ds1307" || len(res.Drivers) != 2 {
		t.Errorf("Drivers = %v", res.Drivers)
	}
	for _, a := range w.reached() {
		if a == 0x50 || a == 0x68 {
			t.Errorf("0x%02x was probed", a)
		}
	}
	if n := len(w.reached()); n != MaxAddr-MinAddr+1-2 {
		t.Errorf("%d probes, want one per free address (%d)", n, MaxAddr-MinAddr+1-2)
	}
}
