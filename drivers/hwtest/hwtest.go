// Package hwtest puts fake I²C buses and SPI ports where production code
// finds real ones: in periph's registries.
//
// # Concepts
//
// Code under test opens buses by name ("1", "/dev/i2c-1") through i2creg and
// spireg, exactly as on a board; a test registers a periph fake there
// (i2ctest.Playback, spitest.Playback, or any i2c.BusCloser) under a name and
// number of its choosing. A fake under a kernel device's name
// ("/dev/spidev0.0") stays registered although no device node stands behind
// it. The fake stays open across the opens and closes of
// the code under test and is closed once at the end of the test, which for a
// Playback verifies that every expected operation happened.
package hwtest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"periph.io/x/conn/v3/i2c"
	"periph.io/x/conn/v3/i2c/i2creg"
	"periph.io/x/conn/v3/physic"
	"periph.io/x/conn/v3/spi"
	"periph.io/x/conn/v3/spi/spireg"
	"periph.io/x/conn/v3/spi/spitest"

	"github.com/perchhq/perch/drivers/internal/periphhost"
)

// I2CBus is a registered I²C fake.
type I2CBus struct {
	opens atomic.Int32
}

// Opens is how many times the code under test opened the bus.
func (b *I2CBus) Opens() int { return int(b.opens.Load()) }

// I2C registers bus as name, aliases (optional) and number (-1 for none)
// until the test ends, then closes it and reports its error: a Playback with
// operations left over fails the test.
func I2C(t testing.TB, name string, aliases []string, number int, bus i2c.BusCloser) *I2CBus {
	t.Helper()
	reg := &I2CBus{}
	open := func() (i2c.BusCloser, error) {
		reg.opens.Add(1)
		return keepOpenBus{bus}, nil
	}
	if err := i2creg.Register(name, aliases, number, open); err != nil {
		t.Fatalf("hwtest: register I2C bus %s: %v", name, err)
	}
	release := periphhost.Fake(name)
	t.Cleanup(func() {
		defer release()
		if err := i2creg.Unregister(name); err != nil {
			t.Errorf("hwtest: unregister %s: %v", name, err)
		}
		if err := bus.Close(); err != nil {
			t.Errorf("hwtest: I2C bus %s: %v", name, err)
		}
	})
	return reg
}

// keepOpenBus hides Close from the code under test, so one Playback can
// serve several opens; the test closes the real bus at the end.
type keepOpenBus struct{ i2c.BusCloser }

func (keepOpenBus) Close() error { return nil }

// Connect records the parameters one Connect call received.
type Connect struct {
	Freq physic.Frequency
	Mode spi.Mode
	Bits int
}

// SPIPort is a registered SPI fake: a Playback of the expected transfers and
// the log of connection parameters the code under test asked for.
type SPIPort struct {
	pb *spitest.Playback

	opens    atomic.Int32
	mu       sync.Mutex
	connects []Connect
}

// Opens is how many times the code under test opened the port.
func (p *SPIPort) Opens() int { return int(p.opens.Load()) }

// Connects returns the parameters of every Connect so far.
func (p *SPIPort) Connects() []Connect {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]Connect(nil), p.connects...)
}

// SPI registers pb as name (aliases optional) and number (-1 for none) until
// the test ends, then closes it: transfers left over fail the test.
func SPI(t testing.TB, name string, aliases []string, number int, pb *spitest.Playback) *SPIPort {
	t.Helper()
	p := &SPIPort{pb: pb}
	open := func() (spi.PortCloser, error) {
		p.opens.Add(1)
		return &spiHandle{p: p}, nil
	}
	if err := spireg.Register(name, aliases, number, open); err != nil {
		t.Fatalf("hwtest: register SPI port %s: %v", name, err)
	}
	release := periphhost.Fake(name)
	t.Cleanup(func() {
		defer release()
		if err := spireg.Unregister(name); err != nil {
			t.Errorf("hwtest: unregister %s: %v", name, err)
		}
		if err := pb.Close(); err != nil {
			t.Errorf("hwtest: SPI port %s: %v", name, err)
		}
	})
	return p
}

// spiHandle is what one open returns: Connect may be called once per open,
// as on a real port, while the Playback behind it lasts the whole test.
type spiHandle struct {
	p         *SPIPort
	connected bool
}

func (h *spiHandle) String() string                      { return h.p.pb.String() }
func (h *spiHandle) Close() error                        { return nil }
func (h *spiHandle) LimitSpeed(f physic.Frequency) error { return h.p.pb.LimitSpeed(f) }

func (h *spiHandle) Connect(f physic.Frequency, mode spi.Mode, bits int) (spi.Conn, error) {
	if h.connected {
		return nil, errConnectTwice
	}
	h.connected = true
	h.p.mu.Lock()
	h.p.connects = append(h.p.connects, Connect{Freq: f, Mode: mode, Bits: bits})
	h.p.mu.Unlock()
	h.p.pb.Lock()
	h.p.pb.Initialized = false // a new open, a new connection
	h.p.pb.Unlock()
	return h.p.pb.Connect(f, mode, bits)
}

var errConnectTwice = errors.New("hwtest: Connect called twice on one open port")

// I2CDriver makes the kernel's driver called driver own addr on kernel bus
// number bus until the test ends, as sysfs shows it on a board:
// bus/i2c/devices/<bus>-00<addr>/driver, a link to bus/i2c/drivers/<driver>,
// in a fake sysfs tree of the test's own (one per test, whatever the number
// of calls). Nothing on the bus itself changes: the fake bus still answers
// whatever reaches it, which is what a refusal must prevent.
func I2CDriver(t testing.TB, bus, addr int, driver string) {
	t.Helper()
	sys := fakeSysfs(t)
	drv := filepath.Join(sys, "bus", "i2c", "drivers", driver)
	dev := filepath.Join(sys, "bus", "i2c", "devices", fmt.Sprintf("%d-%04x", bus, addr))
	for _, dir := range []string{drv, dev} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatalf("hwtest: %v", err)
		}
	}
	if err := os.Symlink(filepath.Join("..", "..", "..", "bus", "i2c", "drivers", driver), filepath.Join(dev, "driver")); err != nil {
		t.Fatalf("hwtest: %v", err)
	}
}

// I2CMux makes the fake sysfs say, as a board's does, that a multiplexer on
// kernel bus parent joins buses children to it: each adapter directory
// lies inside its parent's (devices/.../i2c-<parent>/i2c-<child>), and
// bus/i2c/devices/i2c-<n> links to it. Call it once per parent, parents
// first, for a tree several levels deep.
func I2CMux(t testing.TB, parent int, children ...int) {
	t.Helper()
	sys := fakeSysfs(t)
	devs := filepath.Join(sys, "bus", "i2c", "devices")
	link := filepath.Join(devs, fmt.Sprintf("i2c-%d", parent))
	dir, err := filepath.EvalSymlinks(link)
	if err != nil {
		// A bus seen for the first time: a controller's adapter.
		dir = filepath.Join(sys, "devices", "platform", fmt.Sprintf("%d.i2c", parent), fmt.Sprintf("i2c-%d", parent))
		mkAdapter(t, dir, link)
	}
	for _, c := range children {
		mkAdapter(t, filepath.Join(dir, fmt.Sprintf("i2c-%d", c)), filepath.Join(devs, fmt.Sprintf("i2c-%d", c)))
	}
}

// mkAdapter makes an adapter's directory, with the links that lead back
// up the tree and the i2c-dev class device's directory (i2c-dev/i2c-<n>,
// not a bus) as sysfs has them, and the bus/i2c/devices link to it.
func mkAdapter(t testing.TB, dir, link string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "i2c-dev", filepath.Base(dir)), 0o755); err != nil {
		t.Fatalf("hwtest: %v", err)
	}
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatalf("hwtest: %v", err)
	}
	rel, err := filepath.Rel(filepath.Dir(link), dir)
	if err != nil {
		t.Fatalf("hwtest: %v", err)
	}
	for name, target := range map[string]string{link: rel, filepath.Join(dir, "subsystem"): "../../../bus/i2c", filepath.Join(dir, "device"): ".."} {
		if err := os.Symlink(target, name); err != nil {
			t.Fatalf("hwtest: %v", err)
		}
	}
}

// I2CHeader makes the fake sysfs say, as a Raspberry Pi's device tree
// does, that bus is the one on the pin header: the tree's i2c_arm label
// names a controller node, and the bus's adapter links to it (of_node).
func I2CHeader(t testing.TB, bus int) {
	t.Helper()
	sys := fakeSysfs(t)
	base := filepath.Join(sys, "firmware", "devicetree", "base")
	node := filepath.Join(base, "soc", "i2c@7e804000")
	adapter := filepath.Join(sys, "bus", "i2c", "devices", fmt.Sprintf("i2c-%d", bus))
	for _, dir := range []string{node, filepath.Join(base, "__symbols__"), adapter} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatalf("hwtest: %v", err)
		}
	}
	if err := os.WriteFile(filepath.Join(base, "__symbols__", "i2c_arm"), []byte("/soc/i2c@7e804000\x00"), 0o444); err != nil {
		t.Fatalf("hwtest: %v", err)
	}
	if err := os.Symlink(filepath.Join("..", "..", "..", "..", "firmware", "devicetree", "base", "soc", "i2c@7e804000"), filepath.Join(adapter, "of_node")); err != nil {
		t.Fatalf("hwtest: %v", err)
	}
}

var (
	sysfsMu sync.Mutex
	sysfs   = map[testing.TB]string{}
)

// fakeSysfs returns the test's fake sysfs root, creating it and pointing
// the drivers at it on the first call.
func fakeSysfs(t testing.TB) string {
	sysfsMu.Lock()
	defer sysfsMu.Unlock()
	if dir, ok := sysfs[t]; ok {
		return dir
	}
	dir := t.TempDir()
	sysfs[t] = dir
	restore := periphhost.SetSysDir(dir)
	t.Cleanup(func() {
		restore()
		sysfsMu.Lock()
		delete(sysfs, t)
		sysfsMu.Unlock()
	})
	return dir
}
