package mqtt

import (
	"os"
	"runtime"
	"strings"
)

// BoardModel names the hardware for Home Assistant's device page: the
// device tree's model on ARM boards ("Raspberry Pi 4 Model B Rev 1.4"),
// the firmware's vendor and product on PCs, else the architecture.
func BoardModel() string { return boardModel("/") }

func boardModel(root string) string {
	read := func(p string) string {
		b, err := os.ReadFile(root + p)
		if err != nil {
			return ""
		}
		return strings.TrimSpace(strings.TrimRight(string(b), "\x00\n"))
	}
	if m := read("proc/device-tree/model"); m != "" {
		return m
	}
	vendor, product := read("sys/class/dmi/id/sys_vendor"), read("sys/class/dmi/id/product_name")
	switch {
	case product != "" && vendor != "" && !strings.HasPrefix(product, vendor):
		return vendor + " " + product
	case product != "":
		return product
	}
	return "Linux " + runtime.GOARCH
}
