package periphhost

import "sync"

// The kernel's view of which driver owns which I²C address is in sysfs, not
// in periph: the sysfs bus's I2C_RDWR transfers reach an address a kernel
// driver owns without complaint. drivers/i2c reads it there; tests point it
// at a fake tree.
var (
	sysMu  sync.Mutex
	sysDir = "/sys"
)

// SysDir is where sysfs is mounted: "/sys", or a test's fake tree.
func SysDir() string {
	sysMu.Lock()
	defer sysMu.Unlock()
	return sysDir
}

// SetSysDir points SysDir at a fake tree and returns what undoes it; for
// tests.
func SetSysDir(dir string) (restore func()) {
	sysMu.Lock()
	old := sysDir
	sysDir = dir
	sysMu.Unlock()
	return func() {
		sysMu.Lock()
		sysDir = old
		sysMu.Unlock()
	}
}
