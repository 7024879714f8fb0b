package tools_test

import (
	"context"
	"encoding/json"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"periph.io/x/conn/v3/conntest"
	"periph.io/x/conn/v3/i2c/i2creg"
	"periph.io/x/conn/v3/i2c/i2ctest"
	"periph.io/x/conn/v3/physic"
	"periph.io/x/conn/v3/spi"
	"periph.io/x/conn/v3/spi/spireg"
	"periph.io/x/conn/v3/spi/spitest"

	"github.com/perchhq/perch/appliance/tools"
	"github.com/perchhq/perch/drivers/hwtest"
	hwi2c "github.com/perchhq/perch/drivers/i2c"
	"github.com/perchhq/perch/drivers/sensor"
	"github.com/perchhq/perch/drivers/usb"
)

// The -update flag may already be defined by the package's internal tests;
// both rewrite golden files.
func init() {
	if flag.Lookup("update") == nil {
		flag.Bool("update", false, "rewrite golden files in testdata/")
	}
}

func hwUpdating() bool {
	g, ok := flag.Lookup("update").Value.(flag.Getter)
	return ok && g.Get() == true
}

func hwGolden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if hwUpdating() {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from the golden file (run with -update if intended)\n--- got:\n%s\n--- want:\n%s", path, got, want)
	}
}

// hwRegistry holds the hardware tools as the gateway registers them, so
// arguments go through the same schema validation as a model's.
func hwRegistry(set *sensor.Set) *tools.Registry {
	r := tools.NewRegistry(slog.New(slog.NewTextHandler(io.Discard, nil)))
	r.Register(tools.NewI2C())
	r.Register(tools.NewSPI())
	r.Register(tools.NewSensor(set, nil, nil))
	return r
}

func call(t *testing.T, r *tools.Registry, name, args string) tools.Result {
	t.Helper()
	return r.Execute(context.Background(), name, args)
}

func wantText(t *testing.T, res tools.Result, want string) {
	t.Helper()
	if res.IsError() {
		t.Fatalf("error result: %s", res.ForLLM)
	}
	if res.ForLLM != want {
		t.Errorf("result\n%s\nwant\n%s", res.ForLLM, want)
	}
}

func wantError(t *testing.T, res tools.Result, want string) {
	t.Helper()
	if !res.IsError() || !strings.Contains(res.ForLLM, want) {
		t.Errorf("result %v %q, want an error containing %q", res.Kind, res.ForLLM, want)
	}
}

// TestI2CArgumentsAreCheckedBeforeTheBus: every bad call is refused with a
// message naming the argument, and the bus is never opened.
func TestI2CArgumentsAreCheckedBeforeTheBus(t *testing.T) {
	bus := hwtest.I2C(t, "FAKE-I2C50", nil, 50, &i2ctest.Playback{DontPanic: true})
	r := hwRegistry(nil)
	tests := []struct{ name, args, want string }{
		{"no action", `{}`, `missing required argument "action"`},
		{"unknown action", `{"action":"probe"}`, `argument "action" must be one of "detect", "scan", "read", "write"`},
		{"read without address", `{"action":"read","bus":"50"}`, "i2c read: address is required"},
		{"address reserved low", `{"action":"read","bus":"50","address":2}`, `argument "address" must be at least 3`},
		{"address reserved high", `{"action":"read","bus":"50","address":120}`, `argument "address" must be at most 119`},
		{"address as text", `{"action":"read","bus":"50","address":"0x76"}`, `argument "address" must be an integer`},
		{"address fraction", `{"action":"read","bus":"50","address":118.5}`, `argument "address" must be a whole number`},
		{"register too big", `{"action":"read","bus":"50","address":118,"register":256}`, `argument "register" must be at most 255`},
		{"length zero", `{"action":"read","bus":"50","address":118,"length":0}`, `argument "length" must be at least 1`},
		{"length too long", `{"action":"read","bus":"50","address":118,"length":257}`, `argument "length" must be at most 256`},
		{"write without confirm", `{"action":"write","bus":"50","address":64,"register":244,"data":[39]}`,
			"i2c write refused: writing 1 byte (0x27) at register 0xf4 to 0x40 can change the device's settings or stored data; ask the user, then call again with confirm true"},
		{"write confirm false", `{"action":"write","bus":"50","address":64,"data":[1],"confirm":false}`, "i2c write refused"},
		{"write bad byte", `{"action":"write","bus":"50","address":64,"data":[1,256],"confirm":true}`, `argument "data[1]" must be at most 255`},
		{"write nothing", `{"action":"write","bus":"50","address":64,"confirm":true}`, "i2c write: nothing to write"},
		{"write without address", `{"action":"write","bus":"50","data":[1],"confirm":true}`, "i2c write: address is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, call(t, r, "i2c", tt.args), tt.want)
		})
	}
	// Called directly, without the registry's schema check, the tool still
	// checks every range itself.
	direct := []struct {
		args tools.Args
		want string
	}{
		{tools.Args{"action": "read", "address": int64(0x80)}, "address 0x80 (128) is outside 0x03-0x77"},
		{tools.Args{"action": "read", "address": int64(0x40), "register": int64(-1)}, "register -1 is outside 0-255"},
		{tools.Args{"action": "read", "address": int64(0x40), "length": int64(1000)}, "length 1000 is outside 1-256"},
		{tools.Args{"action": "write", "address": int64(0x40), "data": []any{int64(300)}, "confirm": true}, "data[0] = 300 is not a byte"},
		{tools.Args{"action": "write", "address": int64(0x40), "data": []any{int64(1)}}, "i2c write refused"},
	}
	tool := tools.NewI2C()
	for _, d := range direct {
		wantError(t, tool.Execute(context.Background(), d.args), d.want)
	}
	if n := bus.Opens(); n != 0 {
		t.Errorf("the bus was opened %d times", n)
	}
}

// TestI2CActionsPlayback runs every action against a fake bus registered
// where the kernel's would be, opened by number as the model names it.
func TestI2CActionsPlayback(t *testing.T) {
	pb := &i2ctest.Playback{DontPanic: true, Ops: []i2ctest.IO{
		// scan: every address gets a read byte on a bus periph drives.
		{Addr: 0x23, R: []byte{0}},
		{Addr: 0x44, R: []byte{0}},
		{Addr: 0x76, R: []byte{0}},
		// read register
		{Addr: 0x76, W: []byte{0xd0}, R: []byte{0x60}},
		// read 2 bytes
		{Addr: 0x23, R: []byte{0x01, 0x90}},
		// write register + data
		{Addr: 0x40, W: []byte{0xf4, 0x27}},
		// write a bare command byte
		{Addr: 0x23, W: []byte{0x01}},
	}}
	hwtest.I2C(t, "FAKE-I2C51", []string{"SENSORBUS"}, 51, pb)
	r := hwRegistry(nil)

	det := call(t, r, "i2c", `{"action":"detect"}`)
	if det.IsError() || !strings.Contains(det.ForLLM, "- 51 (FAKE-I2C51), also called SENSORBUS") || strings.Contains(det.ForLLM, "pin header") {
		t.Errorf("detect: %s", det.ForLLM)
	}
	// A bus the device tree puts on the pin header says so.
	hwtest.I2CHeader(t, 51)
	if det := call(t, r, "i2c", `{"action":"detect"}`); !strings.Contains(det.ForLLM, "- 51 (FAKE-I2C51), also called SENSORBUS; on the board's pin header (the default bus)") {
		t.Errorf("detect with the header's bus: %s", det.ForLLM)
	}
	scan := call(t, r, "i2c", `{"action":"scan","bus":"51"}`)
	if scan.IsError() {
		t.Fatal(scan.ForLLM)
	}
	hwGolden(t, "hw_i2c_scan.golden", scan.ForLLM+"\n")

	wantText(t, call(t, r, "i2c", `{"action":"read","bus":"sensorbus","address":118,"register":208}`),
		"Read 1 byte from 0x76 register 0xd0 on bus 51 (FAKE-I2C51): 0x60")
	wantText(t, call(t, r, "i2c", `{"action":"read","bus":"51","address":35,"length":2}`),
		"Read 2 bytes from 0x23 on bus 51 (FAKE-I2C51): 0x01 0x90")
	wantText(t, call(t, r, "i2c", `{"action":"write","bus":"51","address":64,"register":244,"data":[39],"confirm":true}`),
		"Wrote 1 byte (0x27) at register 0xf4 to 0x40 on bus 51 (FAKE-I2C51).")
	wantText(t, call(t, r, "i2c", `{"action":"write","bus":"I2C51","address":35,"register":1,"confirm":true}`),
		"Wrote 0 bytes at register 0x01 to 0x23 on bus 51 (FAKE-I2C51).")
	wantError(t, call(t, r, "i2c", `{"action":"read","bus":"7","address":35}`), `i2c: unknown bus "7"; buses present: `)
}

// TestI2CRefusesAnAddressAKernelDriverOwns: with rtc-ds1307 bound at 0x68,
// as on a board with an RTC HAT, a confirmed write, a read with a register
// (which writes the register byte) and a plain read are refused with the
// driver's name and what to do instead, and the scan lists the address as
// the driver's without probing it. The Playback holds only the probes of the
// free addresses that answer, so any transfer to 0x68 would fail the call
// with its own error, or leave an operation over.
func TestI2CRefusesAnAddressAKernelDriverOwns(t *testing.T) {
	hwtest.I2C(t, "FAKE-I2C52", nil, 52, &i2ctest.Playback{DontPanic: true, Ops: []i2ctest.IO{
		{Addr: 0x23, R: []byte{0}},
	}})
	hwtest.I2CDriver(t, 52, 0x68, "rtc-ds1307")
	r := hwRegistry(nil)
	const refused = " 0x68 on bus 52 (FAKE-I2C52) refused: the address is in use by kernel driver rtc-ds1307 (UU in a scan). " +
		"Perch refuses every transfer to it, reads included: one can land between the driver's own and corrupt what " +
		"the device holds (an RTC's time, an EEPROM's contents, a power chip's settings). Use the kernel's interface " +
		"for the device instead (an RTC as /dev/rtc0, a sensor under /sys/class/hwmon or /sys/bus/iio/devices, an " +
		"EEPROM as /sys/bus/i2c/devices/52-0068/eeprom), or, if nothing on the board needs the driver, unbind it " +
		"first: echo 52-0068 > /sys/bus/i2c/drivers/rtc-ds1307/unbind"
	wantError(t, call(t, r, "i2c", `{"action":"write","bus":"52","address":104,"register":0,"data":[0],"confirm":true}`),
		"i2c: write"+refused)
	wantError(t, call(t, r, "i2c", `{"action":"read","bus":"52","address":104,"register":0,"length":7}`), "i2c: read"+refused)
	wantError(t, call(t, r, "i2c", `{"action":"read","bus":"52","address":104}`), "i2c: read"+refused)
	scan := call(t, r, "i2c", `{"action":"scan","bus":"52"}`)
	if scan.IsError() {
		t.Fatal(scan.ForLLM)
	}
	hwGolden(t, "hw_i2c_scan_driver.golden", scan.ForLLM+"\n")
}

// TestHardwareToolsWithoutBuses: on a board with I2C and SPI disabled (this
// machine) the tools answer how to enable them.
func TestHardwareToolsWithoutBuses(t *testing.T) {
	hwi2c.Buses() // loads the bus drivers
	if len(i2creg.All()) > 0 || len(spireg.All()) > 0 {
		t.Logf("this machine has buses; checking only that detect lists them")
		res := call(t, hwRegistry(nil), "i2c", `{"action":"detect"}`)
		if len(i2creg.All()) > 0 && res.IsError() {
			t.Errorf("detect: %s", res.ForLLM)
		}
		return
	}
	r := hwRegistry(nil)
	for _, args := range []string{`{"action":"detect"}`, `{"action":"scan"}`, `{"action":"read","address":118,"bus":"1"}`} {
		wantError(t, call(t, r, "i2c", args),
			"i2c: no I2C bus found: enable it with raspi-config (Interface Options, I2C) or dtparam=i2c_arm=on in /boot/firmware/config.txt, then reboot")
	}
	for _, args := range []string{`{"action":"list"}`, `{"action":"read","length":2}`} {
		wantError(t, call(t, r, "spi", args),
			"spi: no SPI device found: enable it with raspi-config (Interface Options, SPI) or dtparam=spi=on in /boot/firmware/config.txt, then reboot")
	}
	report := tools.DevicesReport(nil, "")
	if !strings.Contains(report, "I2C: no I2C bus found: enable it") || !strings.Contains(report, "SPI: no SPI device found") {
		t.Errorf("devices report:\n%s", report)
	}
}

func TestSPIArgumentsAreCheckedBeforeTheDevice(t *testing.T) {
	port := hwtest.SPI(t, "/dev/spidev8.0", []string{"SPI8.0"}, 8, &spitest.Playback{Playback: conntest.Playback{DontPanic: true}})
	r := hwRegistry(nil)
	tests := []struct{ name, args, want string }{
		{"unknown action", `{"action":"write"}`, `argument "action" must be one of "list", "transfer", "read"`},
		{"speed too low", `{"action":"read","device":"8.0","length":1,"speed":999}`, `argument "speed" must be at least 1000`},
		{"speed too high", `{"action":"read","device":"8.0","length":1,"speed":200000000}`, `argument "speed" must be at most`},
		{"mode 4", `{"action":"read","device":"8.0","length":1,"mode":4}`, `argument "mode" must be at most 3`},
		{"bits 0", `{"action":"read","device":"8.0","length":1,"bits":0}`, `argument "bits" must be at least 1`},
		{"bits 64", `{"action":"read","device":"8.0","length":1,"bits":64}`, `argument "bits" must be at most 32`},
		{"read without length", `{"action":"read","device":"8.0"}`, "spi read: length is required"},
		{"read too long", `{"action":"read","device":"8.0","length":5000}`, `argument "length" must be at most 4096`},
		{"odd 16-bit read", `{"action":"read","device":"8.0","length":3,"bits":16}`, "3 bytes is not a whole number of 16-bit words"},
		{"transfer without data", `{"action":"transfer","device":"8.0","confirm":true}`, "spi transfer: data: spi: invalid argument: length 0"},
		{"transfer bad byte", `{"action":"transfer","device":"8.0","data":[-1],"confirm":true}`, `argument "data[0]" must be at least 0`},
		{"transfer without confirm", `{"action":"transfer","device":"8.0","data":[159,0,0,0]}`,
			"spi transfer refused: sending 4 bytes (0x9f 0x00 0x00 0x00) may be commands that change the device; ask the user, then call again with confirm true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wantError(t, call(t, r, "spi", tt.args), tt.want)
		})
	}
	tool := tools.NewSPI()
	wantError(t, tool.Execute(context.Background(), tools.Args{"action": "read", "length": int64(1), "speed": int64(10)}),
		"speed 10 Hz is outside 1000-125000000 Hz")
	wantError(t, tool.Execute(context.Background(), tools.Args{"action": "transfer", "data": []any{int64(1)}}), "spi transfer refused")
	if n := port.Opens(); n != 0 {
		t.Errorf("the device was opened %d times", n)
	}
}

func TestSPIActionsPlayback(t *testing.T) {
	pb := &spitest.Playback{Playback: conntest.Playback{DontPanic: true, Ops: []conntest.IO{
		{W: []byte{0x9f, 0, 0, 0}, R: []byte{0xff, 0xef, 0x40, 0x18}}, // JEDEC id of a W25Q128
		{R: []byte{0x01, 0xf4}},
	}}}
	port := hwtest.SPI(t, "/dev/spidev8.1", []string{"SPI8.1"}, -1, pb)
	r := hwRegistry(nil)
	list := call(t, r, "spi", `{"action":"list"}`)
	if list.IsError() || !strings.Contains(list.ForLLM, "- /dev/spidev8.1 (SPI8.1)") {
		t.Errorf("list: %s", list.ForLLM)
	}
	wantText(t, call(t, r, "spi", `{"action":"transfer","device":"8.1","data":[159,0,0,0],"confirm":true}`),
		"Sent 0x9f 0x00 0x00 0x00, received 0xff 0xef 0x40 0x18 (1000000 Hz, mode 0, 8 bits).")
	wantText(t, call(t, r, "spi", `{"action":"read","device":"spidev8.1","length":2,"speed":500000,"mode":3,"bits":16}`),
		"Read 2 bytes (500000 Hz, mode 3, 16 bits): 0x01 0xf4")
	got := port.Connects()
	want := []hwtest.Connect{
		{Freq: physic.MegaHertz, Mode: spi.Mode0, Bits: 8},
		{Freq: 500 * physic.KiloHertz, Mode: spi.Mode3, Bits: 16},
	}
	if len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Errorf("connections %+v, want %+v", got, want)
	}
}

// bme280Reading is a recorded BME280 measurement at 0x76: 23.72 °C,
// 1009.43 hPa, 65.3 % (periph's recording).
func bme280Reading() []i2ctest.IO {
	const a = 0x76
	return []i2ctest.IO{
		{Addr: a, W: []byte{0xd0}, R: []byte{0x60}},
		{Addr: a, W: []byte{0x88}, R: []byte{0x10, 0x6e, 0x6c, 0x66, 0x32, 0x0, 0x5d, 0x95, 0xb8, 0xd5, 0xd0, 0xb, 0x77, 0x1e, 0x9d, 0xff, 0xf9, 0xff, 0xac, 0x26, 0xa, 0xd8, 0xbd, 0x10, 0x0, 0x4b}},
		{Addr: a, W: []byte{0xe1}, R: []byte{0x6e, 0x1, 0x0, 0x13, 0x5, 0x0, 0x1e}},
		{Addr: a, W: []byte{0xf4, 0x6c, 0xf2, 0x3, 0xf5, 0xa0, 0xf4, 0x6c}},
		{Addr: a, W: []byte{0xF4, 0x6d}},
		{Addr: a, W: []byte{0xF3}, R: []byte{0}},
		{Addr: a, W: []byte{0xf7}, R: []byte{0x4a, 0x52, 0xc0, 0x80, 0x96, 0xc0, 0x7a, 0x76}},
	}
}

func sensorSet(t *testing.T) *sensor.Set {
	t.Helper()
	set, err := sensor.NewSet([]sensor.Spec{
		{Name: "kitchen", Type: "bme280", Bus: "52", Address: 0x76},
		{Name: "tank", Type: "ds18b20"},
		{Name: "garage", Type: "sht3x", Bus: "9", Address: 0x44},
	}, sensor.Options{W1Dir: "../../drivers/sensor/testdata/w1-one"})
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// TestSensorTool: list says where each sensor is and whether its bus is
// there; read gives values with units, one sensor or all; the missing bus
// is reported in place, not as a failure of the whole call.
func TestSensorTool(t *testing.T) {
	ops := append(bme280Reading(), bme280Reading()...)
	hwtest.I2C(t, "FAKE-I2C52", nil, 52, &i2ctest.Playback{DontPanic: true, Ops: ops})
	r := hwRegistry(sensorSet(t))

	list := call(t, r, "sensor", `{"action":"list"}`)
	if list.IsError() {
		t.Fatal(list.ForLLM)
	}
	hwGolden(t, "hw_sensor_list.golden", list.ForLLM+"\n")

	wantText(t, call(t, r, "sensor", `{"action":"read","name":"Kitchen"}`),
		"kitchen: temperature 23.72 °C, pressure 1009.43 hPa, humidity 65.3 %")
	all := call(t, r, "sensor", `{"action":"read"}`)
	if all.IsError() {
		t.Fatal(all.ForLLM)
	}
	hwGolden(t, "hw_sensor_read_all.golden", all.ForLLM+"\n")
	wantError(t, call(t, r, "sensor", `{"action":"read","name":"attic"}`),
		`sensor: no sensor named "attic"; configured: kitchen, tank, garage`)
	wantError(t, call(t, r, "sensor", `{"action":"read","name":"garage"}`), "sensor garage (sht3x, 0x44 on I2C bus 9): ")
}

func TestSensorToolWithoutSensors(t *testing.T) {
	r := hwRegistry(nil)
	for _, args := range []string{`{"action":"list"}`, `{"action":"read"}`, `{"action":"read","name":"x"}`} {
		res := call(t, r, "sensor", args)
		if res.IsError() || !strings.HasPrefix(res.ForLLM, "No sensors are configured. List them under \"sensors\"") {
			t.Errorf("%s: %s", args, res.ForLLM)
		}
	}
	if got := tools.SensorsReport(context.Background(), nil); !strings.HasPrefix(got, "No sensors are configured.") {
		t.Errorf("SensorsReport(nil) = %q", got)
	}
}

func TestSensorsReport(t *testing.T) {
	hwtest.I2C(t, "FAKE-I2C52", nil, 52, &i2ctest.Playback{DontPanic: true, Ops: bme280Reading()})
	hwGolden(t, "hw_sensors_report.golden", tools.SensorsReport(context.Background(), sensorSet(t))+"\n")
}

func TestDevicesReport(t *testing.T) {
	devs, err := usb.Enumerate("../../drivers/usb/testdata/sys")
	if err != nil {
		t.Fatal(err)
	}
	hwtest.I2C(t, "FAKE-I2C53", nil, 53, &i2ctest.Playback{DontPanic: true})
	hwtest.SPI(t, "/dev/spidev8.2", nil, -1, &spitest.Playback{Playback: conntest.Playback{DontPanic: true}})
	got := tools.DevicesReport(devs, "monitoring USB hot-plug via netlink; 2 USB devices connected")
	for _, want := range []string{
		"USB devices (2):\n" +
			"- USB2.0 Hub [2109:3431, port 1-1]\n" +
			"- USB SanDisk 3.2Gen1 [0781:5583, serial 0401a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8, port 1-1.4]\n" +
			"(monitoring USB hot-plug via netlink; 2 USB devices connected)\n",
		"I2C: ", "bus 53 (FAKE-I2C53)",
		"SPI: ", "/dev/spidev8.2",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %q:\n%s", want, got)
		}
	}
	if none := tools.DevicesReport(nil, ""); !strings.HasPrefix(none, "USB devices: none\nI2C: ") {
		t.Errorf("empty report:\n%s", none)
	}
}

// TestHardwareToolDefinitionsGolden pins what models read about these tools.
func TestHardwareToolDefinitionsGolden(t *testing.T) {
	r := hwRegistry(nil)
	b, err := json.MarshalIndent(r.ProviderDefinitions(), "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	hwGolden(t, "hw_definitions.golden.json", string(b)+"\n")
	for _, d := range r.Definitions() {
		if !strings.HasSuffix(d.Description, ".") || strings.Contains(d.Description, "  ") {
			t.Errorf("%s: description %q", d.Name, d.Description)
		}
		for name, p := range d.Parameters.Properties {
			if p.Description == "" {
				t.Errorf("%s.%s has no description", d.Name, name)
			}
		}
	}
}

func TestNewHardwareOnLinuxOnly(t *testing.T) {
	got := tools.NewHardware(nil, nil, nil)
	if runtime.GOOS != "linux" {
		if got != nil {
			t.Errorf("NewHardware on %s = %d tools", runtime.GOOS, len(got))
		}
		return
	}
	var names []string
	for _, tool := range got {
		names = append(names, tool.Name())
	}
	if strings.Join(names, " ") != "i2c spi sensor" {
		t.Errorf("NewHardware = %v", names)
	}
}

// TestRestrictedHardwareReadsThatWriteAreRefused: a read with a register
// writes the register byte first (a PCF8574 relay board takes it as its
// outputs), and an SPI read clocks zeros out (an LED strip's "all off"), so
// a sender the owner has not approved gets neither; a plain I2C read is
// still theirs, and the owner's register read needs no confirm.
func TestRestrictedHardwareReadsThatWriteAreRefused(t *testing.T) {
	hwtest.I2C(t, "FAKE-RELAYS", nil, 53, &i2ctest.Playback{DontPanic: true, Ops: []i2ctest.IO{
		{Addr: 0x20, R: []byte{0xff}},
		{Addr: 0x20, W: []byte{0x07}, R: []byte{0xff}},
	}})
	port := hwtest.SPI(t, "/dev/spidev8.2", []string{"SPI8.2"}, -1, &spitest.Playback{Playback: conntest.Playback{DontPanic: true}})
	r := hwRegistry(nil)
	stranger := tools.Call{Channel: "telegram", ChatID: "999", Restricted: true}
	run := func(c tools.Call, tool, args string) tools.Result {
		var m map[string]any
		if err := json.Unmarshal([]byte(args), &m); err != nil {
			t.Fatal(err)
		}
		return r.ExecuteWith(context.Background(), tool, m, c)
	}
	const refused = "refused: this call would change the board, and the sender of this message is not one the owner approved " +
		"(a message on telegram). Tell the user the owner can allow it: add the sender to channels.telegram.allow_from"
	wantError(t, run(stranger, "i2c", `{"action":"read","bus":"53","address":32,"register":0}`), "i2c "+refused)
	wantError(t, run(stranger, "spi", `{"action":"read","device":"8.2","length":3}`), "spi "+refused)
	wantText(t, run(stranger, "i2c", `{"action":"read","bus":"53","address":32}`),
		"Read 1 byte from 0x20 on bus 53 (FAKE-RELAYS): 0xff")
	wantText(t, run(tools.Call{Channel: "telegram", ChatID: "1"}, "i2c", `{"action":"read","bus":"53","address":32,"register":7}`),
		"Read 1 byte from 0x20 register 0x07 on bus 53 (FAKE-RELAYS): 0xff")
	if n := port.Opens(); n != 0 {
		t.Errorf("the SPI device was opened %d times for a refused read", n)
	}
}
