package usb

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
)

const piPCI = "/devices/platform/scb/fd500000.pcie/pci0000:00/0000:00:00.0/0000:01:00.0"

// scenario parses the recorded uevents of testdata/uevents/name, in order.
func scenario(t *testing.T, name string) []Event {
	t.Helper()
	files, err := filepath.Glob(filepath.Join("testdata", "uevents", name, "*.uevent"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no recordings for %s: %v", name, err)
	}
	sort.Strings(files)
	var out []Event
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := ParseUevent(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, ev)
	}
	return out
}

func TestParseUeventKeyboardAdd(t *testing.T) {
	evs := scenario(t, "keyboard-add")
	got := evs[0]
	want := Event{
		Action:    "add",
		DevPath:   piPCI + "/usb1/1-1/1-1.3",
		Subsystem: "usb",
		DevType:   "usb_device",
		Seq:       2071,
	}
	if got.Action != want.Action || got.DevPath != want.DevPath || got.Subsystem != want.Subsystem ||
		got.DevType != want.DevType || got.Seq != want.Seq {
		t.Errorf("event %+v\nwant %+v", got, want)
	}
	if got.Env["PRODUCT"] != "46d/c31c/6400" || got.Env["DEVNAME"] != "bus/usb/001/003" || len(got.Env) != 12 {
		t.Errorf("env %v", got.Env)
	}
	var kinds []string
	for _, ev := range evs {
		kinds = append(kinds, ev.Action+" "+ev.Subsystem+"/"+ev.DevType)
	}
	wantKinds := []string{
		"add usb/usb_device", "add usb/usb_interface", "add hid/", "bind usb/usb_interface",
		"add usb/usb_interface", "bind usb/usb_interface", "bind usb/usb_device",
	}
	if !reflect.DeepEqual(kinds, wantKinds) {
		t.Errorf("sequence %q\nwant %q", kinds, wantKinds)
	}
}

func TestParseUeventRejects(t *testing.T) {
	tests := map[string]string{
		"udev-format.uevent":       "udev's, not the kernel's",
		"bad-header.uevent":        "is not ACTION@DEVPATH",
		"mismatched-action.uevent": `header says "add" but ACTION="remove"`,
	}
	for file, want := range tests {
		t.Run(file, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join("testdata", "uevents", "other", file))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ParseUevent(b); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v, want %q", err, want)
			}
		})
	}
	for name, b := range map[string][]byte{
		"empty":       nil,
		"no equals":   []byte("add@/devices/x\x00ACTION=add\x00DEVPATH=/devices/x\x00garbage\x00"),
		"empty key":   []byte("add@/devices/x\x00=v\x00"),
		"oversized":   append([]byte("add@/devices/x\x00"), make([]byte, maxUevent)...),
		"bad devpath": []byte("add@devices\x00ACTION=add\x00DEVPATH=devices\x00"),
		"other path":  []byte("add@/devices/x\x00ACTION=add\x00DEVPATH=/devices/y\x00"),
	} {
		if _, err := ParseUevent(b); err == nil {
			t.Errorf("%s: parsed without error", name)
		}
	}
}

func TestParseUeventNetChange(t *testing.T) {
	b, err := os.ReadFile("testdata/uevents/other/net-lo-change.uevent")
	if err != nil {
		t.Fatal(err)
	}
	ev, err := ParseUevent(b)
	if err != nil {
		t.Fatal(err)
	}
	if ev.Action != "change" || ev.Subsystem != "net" || ev.DevPath != "/devices/virtual/net/lo" || ev.Env["INTERFACE"] != "lo" {
		t.Errorf("event %+v", ev)
	}
	if _, ok := DeviceFromEvent(ev, "testdata/sys"); ok {
		t.Error("a net event was taken for a USB device")
	}
}

// TestDeviceFromEventPicksDevicesNotInterfaces: of the 17 events a hub with
// two devices produces, three adds and three binds are about USB devices;
// the rest (interfaces, tty, usb-serial) are not.
func TestDeviceFromEventPicksDevicesNotInterfaces(t *testing.T) {
	var adds []Device
	binds := 0
	for _, ev := range scenario(t, "hub-burst") {
		d, ok := DeviceFromEvent(ev, "testdata/sys")
		if !ok {
			continue
		}
		switch ev.Action {
		case "add":
			adds = append(adds, d)
		case "bind":
			binds++
		}
	}
	if binds != 3 {
		t.Errorf("%d device binds, want 3", binds)
	}
	want := []Device{
		{Path: piPCI + "/usb1/1-1/1-1.2", Port: "1-1.2", Bus: 1, Dev: 4, VendorID: "05e3", ProductID: "0610",
			Manufacturer: "GenesysLogic", Product: "USB2.1 Hub", Class: "hub"},
		{Path: piPCI + "/usb1/1-1/1-1.2/1-1.2.1", Port: "1-1.2.1", Bus: 1, Dev: 5, VendorID: "2341", ProductID: "0043",
			Manufacturer: "Arduino (www.arduino.cc)", Serial: "85736323838351F0B1C1", Class: "communications device"},
		{Path: piPCI + "/usb1/1-1/1-1.2/1-1.2.3", Port: "1-1.2.3", Bus: 1, Dev: 6, VendorID: "0403", ProductID: "6001",
			Manufacturer: "FTDI", Product: "FT232R USB UART", Serial: "A50285BI"},
	}
	if !reflect.DeepEqual(adds, want) {
		t.Errorf("devices\n%+v\nwant\n%+v", adds, want)
	}
}

// TestRemoveCarriesIDsButNoStrings: on remove sysfs is gone, so only what
// the event carries is known; the service keeps the add's record for names.
func TestRemoveCarriesIDsButNoStrings(t *testing.T) {
	evs := scenario(t, "keyboard-remove")
	last := evs[len(evs)-1]
	d, ok := DeviceFromEvent(last, "testdata/sys")
	if !ok || last.Action != "remove" {
		t.Fatalf("last event %+v not a device removal", last)
	}
	want := Device{Path: piPCI + "/usb1/1-1/1-1.3", Port: "1-1.3", Bus: 1, Dev: 3, VendorID: "046d", ProductID: "c31c"}
	if d != want {
		t.Errorf("device %+v\nwant %+v", d, want)
	}
	if d.Name() != "USB device 046d:c31c" {
		t.Errorf("Name() = %q", d.Name())
	}
}

func TestEnumerateSkipsRootHubsAndInterfaces(t *testing.T) {
	got, err := Enumerate("testdata/sys")
	if err != nil {
		t.Fatal(err)
	}
	want := []Device{
		{Path: piPCI + "/usb1/1-1", Port: "1-1", Bus: 1, Dev: 2, VendorID: "2109", ProductID: "3431",
			Product: "USB2.0 Hub", Class: "hub"},
		{Path: piPCI + "/usb1/1-1/1-1.4", Port: "1-1.4", Bus: 1, Dev: 7, VendorID: "0781", ProductID: "5583",
			Manufacturer: "USB", Product: "SanDisk 3.2Gen1", Serial: "0401a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Enumerate\n%+v\nwant\n%+v", got, want)
	}
	none, err := Enumerate(t.TempDir())
	if err != nil || none != nil {
		t.Errorf("Enumerate of a tree without USB = %v, %v", none, err)
	}
}

func TestDeviceNames(t *testing.T) {
	tests := []struct {
		d    Device
		name string
		str  string
	}{
		{Device{Manufacturer: "Logitech", Product: "USB Keyboard", VendorID: "046d", ProductID: "c31c", Port: "1-1.3"},
			"Logitech USB Keyboard", "Logitech USB Keyboard [046d:c31c, port 1-1.3]"},
		{Device{Manufacturer: "FTDI", Product: "FTDI FT232R", Serial: "A5", VendorID: "0403", ProductID: "6001", Port: "1-2"},
			"FTDI FT232R", "FTDI FT232R [0403:6001, serial A5, port 1-2]"},
		{Device{Manufacturer: "Arduino (www.arduino.cc)", VendorID: "2341", ProductID: "0043", Port: "1-1.2.1"},
			"Arduino (www.arduino.cc) device", ""},
		{Device{Class: "hub", VendorID: "05e3", ProductID: "0610", Port: "1-1.2"}, "USB hub", ""},
		{Device{VendorID: "1a86", ProductID: "7523", Port: "1-4"}, "USB device 1a86:7523", ""},
	}
	for _, tt := range tests {
		if got := tt.d.Name(); got != tt.name {
			t.Errorf("Name() = %q, want %q", got, tt.name)
		}
		if tt.str != "" && tt.d.String() != tt.str {
			t.Errorf("String() = %q, want %q", tt.d.String(), tt.str)
		}
	}
	if !(Device{Port: "usb1"}).IsRootHub() || (Device{Port: "1-1"}).IsRootHub() {
		t.Error("IsRootHub wrong")
	}
}

// TestUdevPropertiesFillMissingStrings: events that came through udev carry
// the hardware database's names; they fill what sysfs lacks.
func TestUdevPropertiesFillMissingStrings(t *testing.T) {
	ev := eventFromEnv(map[string]string{
		"ACTION": "add", "DEVPATH": "/devices/pci0000:00/0000:00:14.0/usb1/1-4", "SUBSYSTEM": "usb",
		"DEVTYPE": "usb_device", "PRODUCT": "1a86/7523/264", "TYPE": "255/0/0", "BUSNUM": "001", "DEVNUM": "009",
		"ID_VENDOR_FROM_DATABASE": "QinHeng Electronics", "ID_MODEL_FROM_DATABASE": "CH340 serial converter",
		"ID_SERIAL_SHORT": "0001",
	})
	d, ok := DeviceFromEvent(ev, t.TempDir())
	if !ok {
		t.Fatal("not a device")
	}
	if d.Name() != "QinHeng Electronics CH340 serial converter" || d.Serial != "0001" || d.Class != "vendor-specific device" {
		t.Errorf("device %+v", d)
	}
}
