package i2c

import (
	"context"
	"errors"
	"fmt"
	"maps"
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
// owns the address, or which buses a multiplexer joins to the bus, nothing
// is sent rather than guessing "free".
func TestUnreadableOwnershipIsRefused(t *testing.T) {
	for i, c := range []struct {
		what  string
		spoil func(devs string, n int) error
	}{
		// A driver entry that is not a link: readlink fails with EINVAL.
		{"driver", func(devs string, n int) error {
			return os.MkdirAll(filepath.Join(devs, fmt.Sprintf("%d-0050", n), "driver"), 0o755)
		}},
		// An adapter link that leads to itself: resolving it fails with ELOOP.
		{"adapter", func(devs string, n int) error {
			name := fmt.Sprintf("i2c-%d", n)
			return os.Symlink(name, filepath.Join(devs, name))
		}},
	} {
		t.Run(c.what, func(t *testing.T) {
			n := 48 + i
			w := &wire{Playback: &i2ctest.Playback{DontPanic: true}}
			hwtest.I2C(t, fmt.Sprintf("FAKE-I2C%d", n), nil, n, w)
			sys := t.TempDir()
			t.Cleanup(periphhost.SetSysDir(sys))
			devs := filepath.Join(sys, "bus", "i2c", "devices")
			if err := os.MkdirAll(devs, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := c.spoil(devs, n); err != nil {
				t.Fatal(err)
			}
			b := openBus(t, fmt.Sprint(n))
			_, err := b.Read(0x50, 1)
			if want := fmt.Sprintf("i2c: cannot tell whether a kernel driver owns 0x50 on bus %d (FAKE-I2C%d), so nothing is sent to it", n, n); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("read: %v", err)
			}
			if _, err := b.Scan(context.Background()); err == nil || !strings.Contains(err.Error(), "cannot tell") {
				t.Errorf("scan: %v", err)
			}
			// The scan may probe the addresses before the one sysfs
			// cannot speak for, never that one.
			if got := w.reached(); slices.Contains(got, 0x50) {
				t.Errorf("transfers reached %#x on the wire, 0x50 among them", got)
			}
		})
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

// TestMultiplexedBusesShareOwners: as the kernel's own check for i2c-dev
// does, an address is refused on a bus when a kernel driver owns it on a
// bus a multiplexer joins to it: behind the bus (a channel, however deep),
// or above it (the parent whose wires a channel's transfers go out on). A
// sibling channel is not joined: the mux connects one channel at a time.
func TestMultiplexedBusesShareOwners(t *testing.T) {
	wires := map[int]*wire{}
	for _, n := range []int{60, 61, 62, 63} {
		wires[n] = &wire{Playback: &i2ctest.Playback{DontPanic: true}}
		hwtest.I2C(t, fmt.Sprintf("FAKE-I2C%d", n), nil, n, wires[n])
	}
	wires[62].Ops = []i2ctest.IO{{Addr: 0x76, R: []byte{1}}, {Addr: 0x50, R: []byte{2}}}
	hwtest.I2CMux(t, 60, 61, 62)
	hwtest.I2CMux(t, 61, 63)
	hwtest.I2CDriver(t, 60, 0x68, "rtc-ds1307")
	hwtest.I2CDriver(t, 61, 0x76, "bme280")
	hwtest.I2CDriver(t, 63, 0x50, "at24")

	cases := []struct {
		bus, addr int
		driver    string // "" when the read goes through
		on        int
	}{
		{60, 0x68, "rtc-ds1307", 60},
		{60, 0x76, "bme280", 61},
		{60, 0x50, "at24", 63},
		{61, 0x68, "rtc-ds1307", 60},
		{61, 0x50, "at24", 63},
		{63, 0x68, "rtc-ds1307", 60},
		{63, 0x76, "bme280", 61},
		{62, 0x68, "rtc-ds1307", 60},
		{62, 0x76, "", 0},
		{62, 0x50, "", 0},
	}
	for _, c := range cases {
		b := openBus(t, fmt.Sprint(c.bus))
		_, err := b.Read(c.addr, 1)
		var de *DriverError
		switch {
		case c.driver == "" && err != nil:
			t.Errorf("bus %d 0x%02x: %v, want the read to go through", c.bus, c.addr, err)
		case c.driver == "":
		case !errors.As(err, &de) || de.Driver != c.driver || de.DeviceBus != c.on:
			t.Errorf("bus %d 0x%02x: error %v, want %s's refusal, its device on bus %d", c.bus, c.addr, err, c.driver, c.on)
		default:
			unbind := fmt.Sprintf("echo %d-%04x > /sys/bus/i2c/drivers/%s/unbind", c.on, c.addr, c.driver)
			if !strings.Contains(err.Error(), unbind) {
				t.Errorf("bus %d 0x%02x: error %q lacks %q", c.bus, c.addr, err, unbind)
			}
			joined := fmt.Sprintf("on bus %d, which a multiplexer joins to this one", c.on)
			if strings.Contains(err.Error(), joined) != (c.on != c.bus) {
				t.Errorf("bus %d 0x%02x: error %q: saying %q is wrong here", c.bus, c.addr, err, joined)
			}
		}
	}
	for n, w := range wires {
		want := []int(nil)
		if n == 62 {
			want = []int{0x76, 0x50}
		}
		if got := w.reached(); !slices.Equal(got, want) {
			t.Errorf("bus %d: transfers reached %#x, want %#x", n, got, want)
		}
	}

	res, err := openBus(t, "60").Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(res.Busy, []int{0x50, 0x68, 0x76}) {
		t.Errorf("Busy %#x, want [0x50 0x68 0x76]", res.Busy)
	}
	if !maps.Equal(res.DriverBus, map[int]int{0x50: 63, 0x76: 61}) {
		t.Errorf("DriverBus %v, want 0x50 on 63 and 0x76 on 61 (and nothing for bus 60's own 0x68)", res.DriverBus)
	}
	for _, a := range wires[60].reached() {
		if a == 0x50 || a == 0x68 || a == 0x76 {
			t.Errorf("scan probed 0x%02x", a)
		}
	}
}
