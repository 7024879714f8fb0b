package i2c

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/perchhq/perch/drivers/internal/periphhost"
)

// headerBus is the number of the bus wired to the board's pin header, where
// the device tree says which it is, or -1. A Raspberry Pi's tree labels that
// controller i2c_arm, and its adapter links to the tree node (of_node).
// Without this the default would be the lowest-numbered bus, which on a Pi
// with a camera attached, or with the HAT EEPROM's bus enabled, is bus 0:
// a sensor configured without a bus would be looked for on the camera's.
func headerBus() int {
	sys := periphhost.SysDir()
	base := filepath.Join(sys, "firmware", "devicetree", "base")
	label, err := os.ReadFile(filepath.Join(base, "__symbols__", "i2c_arm"))
	if err != nil {
		return -1
	}
	node := strings.TrimRight(string(label), "\x00\n")
	if !strings.HasPrefix(node, "/") || strings.Contains(node, "..") {
		return -1
	}
	want, err := filepath.EvalSymlinks(filepath.Join(base, filepath.FromSlash(node)))
	if err != nil {
		return -1
	}
	adapters, _ := filepath.Glob(filepath.Join(sys, "bus", "i2c", "devices", "i2c-*"))
	for _, a := range adapters {
		n, err := strconv.Atoi(strings.TrimPrefix(filepath.Base(a), "i2c-"))
		if err != nil {
			continue
		}
		if got, err := filepath.EvalSymlinks(filepath.Join(a, "of_node")); err == nil && got == want {
			return n
		}
	}
	return -1
}
