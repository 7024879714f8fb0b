package periphhost

import (
	"fmt"
	"maps"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"

	"periph.io/x/conn/v3/i2c"
	"periph.io/x/conn/v3/i2c/i2creg"
	"periph.io/x/conn/v3/spi"
	"periph.io/x/conn/v3/spi/spireg"
	"periph.io/x/host/v3/sysfs"
)

// periph's sysfs drivers list /dev/i2c-* and /dev/spidev* once, in Init: a
// USB I²C adapter plugged in later was never found, and one unplugged stayed
// listed. SyncI2C and SyncSPI bring the registries in line with the device
// nodes present now, on every listing and open; a glob of /dev costs
// microseconds.

var (
	syncMu sync.Mutex
	devDir = "/dev"
	// seenI2C holds the kernel bus numbers found present since start, so a
	// bus that went away is told apart from one that never was.
	seenI2C = map[int]bool{}
	// fakes are tests' buses registered under kernel names; no device node
	// stands behind them, and the syncs leave them be.
	fakes = map[string]bool{}
)

// Fake keeps the syncs from unregistering name, a test's fake bus or port
// registered under a kernel device's name, until release is called.
func Fake(name string) (release func()) {
	syncMu.Lock()
	fakes[name] = true
	syncMu.Unlock()
	return func() {
		syncMu.Lock()
		delete(fakes, name)
		syncMu.Unlock()
	}
}

// SetDevDir points the syncs at a fake device tree and returns what undoes
// it (and drops the buses found there); for tests.
func SetDevDir(dir string) (restore func()) {
	syncMu.Lock()
	old := devDir
	devDir = dir
	syncMu.Unlock()
	return func() {
		syncMu.Lock()
		devDir = old
		seenI2C = map[int]bool{}
		syncMu.Unlock()
		SyncI2C()
		SyncSPI()
	}
}

// kernelI2C returns N of periph's name for a kernel bus, "/dev/i2c-N".
func kernelI2C(name string) (int, bool) {
	rest, ok := strings.CutPrefix(name, "/dev/i2c-")
	if !ok {
		return 0, false
	}
	n, err := strconv.Atoi(rest)
	return n, err == nil && n >= 0
}

// SyncI2C registers the /dev/i2c-N nodes present and unregisters those gone.
// Buses registered under other names (tests' fakes, other drivers) are left
// alone.
func SyncI2C() {
	_ = Init()
	syncMu.Lock()
	defer syncMu.Unlock()
	var registered []string
	for _, r := range i2creg.All() {
		registered = append(registered, r.Name)
	}
	isKernel := func(name string) bool { _, ok := kernelI2C(name); return ok }
	byNumber := func(a, b string) int {
		na, _ := kernelI2C(a)
		nb, _ := kernelI2C(b)
		return na - nb
	}
	syncNodes("i2c-*", isKernel, byNumber, registered, i2creg.Unregister, func(name string) {
		n, _ := kernelI2C(name)
		open := func() (i2c.BusCloser, error) { return sysfs.NewI2C(n) }
		// A failure means the number is taken by a bus of another name;
		// that bus keeps it.
		_ = i2creg.Register(name, []string{fmt.Sprintf("I2C%d", n)}, n, open)
	})
	for _, r := range i2creg.All() {
		if n, ok := kernelI2C(r.Name); ok {
			seenI2C[n] = true
		}
	}
}

// syncNodes brings a registry in line with the device nodes under devDir
// that match pattern: of the registered names that are kernel nodes'
// (isKernel) and not tests' fakes, those whose node is gone are
// unregistered; nodes not registered yet are registered, in order. The
// caller holds syncMu.
func syncNodes(pattern string, isKernel func(name string) bool, order func(a, b string) int,
	registered []string, unregister func(name string) error, register func(name string)) {
	nodes, _ := filepath.Glob(filepath.Join(devDir, pattern))
	present := map[string]bool{}
	for _, p := range nodes {
		if name := "/dev/" + filepath.Base(p); isKernel(name) {
			present[name] = true
		}
	}
	for _, name := range registered {
		if !isKernel(name) || fakes[name] {
			continue
		}
		if present[name] {
			delete(present, name)
		} else {
			_ = unregister(name)
		}
	}
	for _, name := range slices.SortedFunc(maps.Keys(present), order) {
		register(name)
	}
}

// GoneI2C reports whether kernel bus n was present earlier in this process
// and is not now: an adapter unplugged, not I²C never enabled.
func GoneI2C(n int) bool {
	syncMu.Lock()
	defer syncMu.Unlock()
	if !seenI2C[n] {
		return false
	}
	for _, r := range i2creg.All() {
		if r.Number == n {
			return false
		}
	}
	return true
}

// kernelSPI returns bus and chip select of periph's name for a spidev node,
// "/dev/spidevB.C".
func kernelSPI(name string) (bus, cs int, ok bool) {
	rest, ok := strings.CutPrefix(name, "/dev/spidev")
	if !ok {
		return 0, 0, false
	}
	b, c, ok := strings.Cut(rest, ".")
	if !ok {
		return 0, 0, false
	}
	bus, err1 := strconv.Atoi(b)
	cs, err2 := strconv.Atoi(c)
	return bus, cs, err1 == nil && err2 == nil && bus >= 0 && cs >= 0
}

// SyncSPI does for /dev/spidevB.C what SyncI2C does for I²C buses.
func SyncSPI() {
	_ = Init()
	syncMu.Lock()
	defer syncMu.Unlock()
	var registered []string
	for _, r := range spireg.All() {
		registered = append(registered, r.Name)
	}
	isKernel := func(name string) bool { _, _, ok := kernelSPI(name); return ok }
	syncNodes("spidev*", isKernel, strings.Compare, registered, spireg.Unregister, func(name string) {
		bus, cs, _ := kernelSPI(name)
		// periph numbers a port by its bus only at chip select 0.
		number := -1
		if cs == 0 {
			number = bus
		}
		open := func() (spi.PortCloser, error) { return sysfs.NewSPI(bus, cs) }
		_ = spireg.Register(name, []string{fmt.Sprintf("SPI%d.%d", bus, cs)}, number, open)
	})
}
