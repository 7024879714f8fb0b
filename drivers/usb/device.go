package usb

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// DefaultSysRoot is where sysfs is mounted.
const DefaultSysRoot = "/sys"

// Device is one USB device (not one of its interfaces).
type Device struct {
	// Path is the device's sysfs path below the sysfs root, e.g.
	// /devices/platform/scb/fd500000.pcie/pci0000:00/0000:00:00.0/0000:01:00.0/usb1/1-1/1-1.3;
	// it identifies the device while it is plugged in.
	Path string `json:"path"`
	// Port is the kernel's name for where it is plugged: bus 1, port 1, then
	// port 3 of the hub there.
	Port string `json:"port"`
	Bus  int    `json:"bus,omitempty"`
	Dev  int    `json:"dev,omitempty"`
	// VendorID and ProductID are four lower-case hex digits, as lsusb shows.
	VendorID  string `json:"vendor_id"`
	ProductID string `json:"product_id"`
	// Manufacturer, Product and Serial come from the device's string
	// descriptors (sysfs) or, in the udev build, udev's hardware database.
	Manufacturer string `json:"manufacturer,omitempty"`
	Product      string `json:"product,omitempty"`
	Serial       string `json:"serial,omitempty"`
	// Class is the device class when the device declares one (hub,
	// communications, …); most devices declare it per interface instead.
	Class string `json:"class,omitempty"`
}

// ID returns "vendor:product", e.g. "046d:c31c".
func (d Device) ID() string { return d.VendorID + ":" + d.ProductID }

// Name returns what a person would call the device: "Logitech USB
// Keyboard", or "USB hub", or "USB device 1a86:7523".
func (d Device) Name() string {
	m, p := strings.TrimSpace(d.Manufacturer), strings.TrimSpace(d.Product)
	switch {
	case m != "" && p != "" && !strings.HasPrefix(strings.ToLower(p), strings.ToLower(m)):
		return m + " " + p
	case p != "":
		return p
	case m != "":
		return m + " device"
	case d.Class != "":
		return "USB " + d.Class
	}
	return "USB device " + d.ID()
}

// String returns one line describing the device: name, ids, serial and port.
func (d Device) String() string {
	name := d.Name()
	var facts []string
	if !strings.Contains(name, d.ID()) {
		facts = append(facts, d.ID())
	}
	if d.Serial != "" {
		facts = append(facts, "serial "+d.Serial)
	}
	facts = append(facts, "port "+d.Port)
	return name + " [" + strings.Join(facts, ", ") + "]"
}

// IsRootHub reports whether d is a host controller's root hub (usb1, usb2,
// …): always present, never plugged.
func (d Device) IsRootHub() bool { return strings.HasPrefix(d.Port, "usb") }

// DeviceFromEvent returns the USB device an event is about, or false when
// the event is about something else (an interface, a network card, …).
// For add, bind and change events the device's sysfs attributes under
// sysRoot supply the strings; on remove they are gone, so callers keep the
// record from the add.
func DeviceFromEvent(ev Event, sysRoot string) (Device, bool) {
	if ev.Subsystem != "usb" || ev.DevType != "usb_device" || ev.DevPath == "" {
		return Device{}, false
	}
	d := Device{Path: ev.DevPath, Port: path.Base(ev.DevPath)}
	d.Bus, _ = strconv.Atoi(ev.Env["BUSNUM"])
	d.Dev, _ = strconv.Atoi(ev.Env["DEVNUM"])
	// PRODUCT=46d/c31c/6400: vendor, product, bcdDevice in hex without
	// leading zeros.
	if f := strings.Split(ev.Env["PRODUCT"], "/"); len(f) >= 2 {
		d.VendorID, d.ProductID = hex4(f[0]), hex4(f[1])
	}
	// TYPE=9/0/1: device class, subclass, protocol in decimal.
	if f := strings.Split(ev.Env["TYPE"], "/"); len(f) == 3 {
		if c, err := strconv.Atoi(f[0]); err == nil {
			d.Class = classNames[c]
		}
	}
	if ev.Action != "remove" && sysRoot != "" {
		dir := filepath.Join(sysRoot, filepath.FromSlash(ev.DevPath))
		d.Manufacturer = attr(dir, "manufacturer")
		d.Product = attr(dir, "product")
		d.Serial = attr(dir, "serial")
		if d.VendorID == "" {
			d.VendorID, d.ProductID = attr(dir, "idVendor"), attr(dir, "idProduct")
		}
	}
	// udev's properties, where the event came through udev: the hardware
	// database names devices that carry no strings.
	if d.Manufacturer == "" {
		d.Manufacturer = ev.Env["ID_VENDOR_FROM_DATABASE"]
	}
	if d.Product == "" {
		d.Product = ev.Env["ID_MODEL_FROM_DATABASE"]
	}
	if d.Serial == "" {
		d.Serial = ev.Env["ID_SERIAL_SHORT"]
	}
	return d, true
}

// classNames names the device classes a device declares for itself (USB-IF
// class codes); 0 means "see the interfaces".
var classNames = map[int]string{
	0x02: "communications device",
	0x07: "printer",
	0x08: "mass storage device",
	0x09: "hub",
	0x0e: "video device",
	0xe0: "wireless controller",
	0xef: "composite device",
	0xff: "vendor-specific device",
}

func hex4(s string) string {
	v, err := strconv.ParseUint(s, 16, 16)
	if err != nil {
		return ""
	}
	return fmt.Sprintf("%04x", v)
}

// attr reads a short sysfs attribute; absent or unreadable is "".
func attr(dir, name string) string {
	f, err := os.Open(filepath.Join(dir, name))
	if err != nil {
		return ""
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 256))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// Enumerate lists the USB devices present under sysRoot (root hubs
// excluded), sorted by port. It reads each device's uevent file, so the
// records are built exactly as from a hot-plug event.
func Enumerate(sysRoot string) ([]Device, error) {
	if sysRoot == "" {
		sysRoot = DefaultSysRoot
	}
	dir := filepath.Join(sysRoot, "bus", "usb", "devices")
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil // no USB controller, or USB support not built
		}
		return nil, fmt.Errorf("usb: list devices: %w", err)
	}
	root, err := filepath.EvalSymlinks(sysRoot)
	if err != nil {
		return nil, fmt.Errorf("usb: %w", err)
	}
	var out []Device
	for _, e := range entries {
		if strings.Contains(e.Name(), ":") {
			continue // an interface: "1-1.3:1.0"
		}
		real, err := filepath.EvalSymlinks(filepath.Join(dir, e.Name()))
		if err != nil {
			continue // unplugged while we looked
		}
		rel, err := filepath.Rel(root, real)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		env, err := readUeventFile(filepath.Join(real, "uevent"))
		if err != nil {
			continue
		}
		env["ACTION"] = "add"
		env["DEVPATH"] = "/" + filepath.ToSlash(rel)
		env["SUBSYSTEM"] = "usb"
		d, ok := DeviceFromEvent(eventFromEnv(env), sysRoot)
		if ok && !d.IsRootHub() {
			out = append(out, d)
		}
	}
	SortDevices(out)
	return out, nil
}

// readUeventFile reads a sysfs uevent attribute: KEY=VALUE lines.
func readUeventFile(name string) (map[string]string, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	env := map[string]string{}
	sc := bufio.NewScanner(io.LimitReader(f, maxUevent))
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), "="); ok {
			env[k] = v
		}
	}
	return env, sc.Err()
}

// SortDevices orders devices by bus, then port, as lsusb -t would.
func SortDevices(ds []Device) {
	sort.Slice(ds, func(i, j int) bool {
		if ds[i].Bus != ds[j].Bus {
			return ds[i].Bus < ds[j].Bus
		}
		return ds[i].Port < ds[j].Port
	})
}
