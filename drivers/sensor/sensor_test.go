package sensor

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"periph.io/x/conn/v3/i2c/i2ctest"
	"periph.io/x/conn/v3/physic"

	"github.com/perchhq/perch/drivers/hwtest"
	"github.com/perchhq/perch/drivers/i2c"
	"github.com/perchhq/perch/drivers/internal/periphhost"
)

func TestSpecValidate(t *testing.T) {
	tests := []struct {
		name string
		spec Spec
		want string // "" valid; else the message's start
	}{
		{"bme280", Spec{Name: "kitchen", Type: "bme280", Bus: "1", Address: 0x76}, ""},
		{"bme280 default address", Spec{Name: "kitchen", Type: "bme280"}, ""},
		{"bmp280 alt address", Spec{Name: "attic", Type: "bmp280", Address: 0x77}, ""},
		{"sht3x", Spec{Name: "Living room", Type: "sht3x", Bus: "I2C1", Address: 0x45}, ""},
		{"bh1750", Spec{Name: "desk.light", Type: "bh1750", Address: 0x5c}, ""},
		{"ds18b20", Spec{Name: "tank", Type: "ds18b20"}, ""},
		{"ds18b20 by id", Spec{Name: "tank", Type: "ds18b20", Bus: "w1", Device: "28-0316a2795aff"}, ""},
		{"no name", Spec{Type: "bme280"}, "name: missing"},
		{"blank name", Spec{Name: "  ", Type: "bme280"}, "name: missing"},
		{"odd name", Spec{Name: "a/b", Type: "bme280"}, `name: "a/b" must be`},
		{"trailing space", Spec{Name: "kitchen ", Type: "bme280"}, `name: "kitchen " has spaces at its start or end; write it as "kitchen"`},
		{"leading tab", Spec{Name: "\tkitchen", Type: "bme280"}, `name: "\tkitchen" has spaces at its start or end; write it as "kitchen"`},
		{"long name", Spec{Name: strings.Repeat("x", 41), Type: "bme280"}, "name:"},
		{"unknown type", Spec{Name: "x", Type: "dht22"}, `type: "dht22" is not a supported part; use one of bh1750, bme280, bmp280, ds18b20, sht3x`},
		{"upper-case type", Spec{Name: "x", Type: "BME280"}, `type: "BME280" is not a supported part`},
		{"wrong address", Spec{Name: "x", Type: "bme280", Address: 0x40}, "address: 0x40 (64) is not a bme280 address; use 0x76 or 0x77"},
		{"8-bit address", Spec{Name: "x", Type: "sht3x", Address: 0x88}, "address: 0x88 (136) is not a sht3x address; use 0x44 or 0x45"},
		{"device on i2c part", Spec{Name: "x", Type: "bh1750", Device: "28-0316a2795aff"}, "device: only a 1-wire part"},
		{"address on ds18b20", Spec{Name: "x", Type: "ds18b20", Address: 0x28}, "address: a ds18b20 sits on the 1-wire bus"},
		{"i2c bus on ds18b20", Spec{Name: "x", Type: "ds18b20", Bus: "1"}, "bus: a ds18b20 sits on the kernel's 1-wire bus"},
		{"bad w1 id", Spec{Name: "x", Type: "ds18b20", Device: "28-XYZ"}, `device: "28-XYZ" is not a 1-wire id`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.spec.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
				t.Fatalf("error %v\nwant prefix %q", err, tt.want)
			}
		})
	}
}

func TestValidateSpecsNamesTheEntry(t *testing.T) {
	err := ValidateSpecs([]Spec{
		{Name: "kitchen", Type: "bme280"},
		{Name: "tank", Type: "ds18b20", Address: 5},
	})
	if err == nil || !strings.HasPrefix(err.Error(), "sensors[1].address: ") {
		t.Errorf("error %v", err)
	}
	err = ValidateSpecs([]Spec{{Name: "kitchen", Type: "bme280"}, {Name: "Kitchen", Type: "sht3x"}})
	if err == nil || err.Error() != `sensors[1].name: "Kitchen" is already the name of sensors[0]; names must be unique` {
		t.Errorf("error %v", err)
	}
	err = ValidateSpecs([]Spec{{Name: "kitchen", Type: "bme280"}, {Name: "kitchen ", Type: "sht3x"}})
	if err == nil || !strings.HasPrefix(err.Error(), `sensors[1].name: "kitchen " has spaces at its start or end`) {
		t.Errorf("error %v", err)
	}
	if _, err := NewSet([]Spec{{Name: "x", Type: "nope"}}, Options{}); err == nil || !strings.HasPrefix(err.Error(), "sensors[0].type") {
		t.Errorf("NewSet error %v", err)
	}
}

// TestSpecJSONStrict: the config decodes sensors strictly; an address may be
// a number or a hex string, and reads back as a number.
func TestSpecJSONStrict(t *testing.T) {
	in := `[{"name":"kitchen","type":"bme280","bus":"1","address":"0x76"},
	        {"name":"desk","type":"bh1750","bus":3,"address":35},
	        {"name":"tank","type":"ds18b20","device":"28-0316a2795aff"}]`
	dec := json.NewDecoder(strings.NewReader(in))
	dec.DisallowUnknownFields()
	var specs []Spec
	if err := dec.Decode(&specs); err != nil {
		t.Fatal(err)
	}
	want := []Spec{
		{Name: "kitchen", Type: "bme280", Bus: "1", Address: 0x76},
		{Name: "desk", Type: "bh1750", Bus: "3", Address: 0x23},
		{Name: "tank", Type: "ds18b20", Device: "28-0316a2795aff"},
	}
	if !reflect.DeepEqual(specs, want) {
		t.Errorf("decoded %+v\nwant %+v", specs, want)
	}
	out, _ := json.Marshal(specs[0])
	if string(out) != `{"name":"kitchen","type":"bme280","bus":"1","address":118}` {
		t.Errorf("marshalled %s", out)
	}
	for _, bad := range []string{
		`[{"name":"x","type":"bme280","address":"sixty"}]`,
		`[{"name":"x","type":"bme280","address":118.5}]`,
		`[{"name":"x","type":"bme280","address":true}]`,
		`[{"name":"x","type":"bme280","adress":118}]`,
		`[{"name":"x","type":"bme280","bus":1.5}]`,
		`[{"name":"x","type":"bme280","bus":-1}]`,
		`[{"name":"x","type":"bme280","bus":true}]`,
	} {
		dec := json.NewDecoder(strings.NewReader(bad))
		dec.DisallowUnknownFields()
		var s []Spec
		if err := dec.Decode(&s); err == nil {
			t.Errorf("%s decoded without error", bad)
		}
	}
}

// bme280Ops is a real BME280 exchange (periph's recording): chip id,
// calibration, configuration, a forced measurement with one busy poll, and
// the result, 23.72 °C, 1009.43 hPa, 65.3 %.
func bme280Ops(addr uint16, chipID byte) []i2ctest.IO {
	ops := []i2ctest.IO{
		{Addr: addr, W: []byte{0xd0}, R: []byte{chipID}},
		{Addr: addr, W: []byte{0x88}, R: []byte{0x10, 0x6e, 0x6c, 0x66, 0x32, 0x0, 0x5d, 0x95, 0xb8, 0xd5, 0xd0, 0xb, 0x77, 0x1e, 0x9d, 0xff, 0xf9, 0xff, 0xac, 0x26, 0xa, 0xd8, 0xbd, 0x10, 0x0, 0x4b}},
	}
	if chipID == 0x60 {
		ops = append(ops,
			i2ctest.IO{Addr: addr, W: []byte{0xe1}, R: []byte{0x6e, 0x1, 0x0, 0x13, 0x5, 0x0, 0x1e}},
			i2ctest.IO{Addr: addr, W: []byte{0xf4, 0x6c, 0xf2, 0x3, 0xf5, 0xa0, 0xf4, 0x6c}},
			i2ctest.IO{Addr: addr, W: []byte{0xF4, 0x6d}},
			i2ctest.IO{Addr: addr, W: []byte{0xF3}, R: []byte{8}},
			i2ctest.IO{Addr: addr, W: []byte{0xF3}, R: []byte{0}},
			i2ctest.IO{Addr: addr, W: []byte{0xf7}, R: []byte{0x4a, 0x52, 0xc0, 0x80, 0x96, 0xc0, 0x7a, 0x76}})
		return ops
	}
	return append(ops,
		i2ctest.IO{Addr: addr, W: []byte{0xf4, 0x6c, 0xf5, 0xa0, 0xf4, 0x6c}},
		i2ctest.IO{Addr: addr, W: []byte{0xF4, 0x6d}},
		i2ctest.IO{Addr: addr, W: []byte{0xF3}, R: []byte{0}},
		i2ctest.IO{Addr: addr, W: []byte{0xf7}, R: []byte{0x4a, 0x52, 0xc0, 0x80, 0x96, 0xc0}})
}

// bh1750Ops is what periph's driver sends for one reading at 0x23: power
// on, continuous high resolution, reset, the mode again, then the count.
func bh1750Ops(hi, lo byte) []i2ctest.IO {
	return []i2ctest.IO{
		{Addr: 0x23, W: []byte{0x07}},
		{Addr: 0x23, W: []byte{0x10}},
		{Addr: 0x23, W: []byte{0x07}},
		{Addr: 0x23, W: []byte{0x10}},
		{Addr: 0x23, W: []byte{0x10}, R: []byte{hi, lo}},
	}
}

func TestReadPlayback(t *testing.T) {
	tests := []struct {
		name  string
		spec  Spec
		ops   []i2ctest.IO
		chip  string
		want  []Value
		lines string
	}{
		{
			name:  "bme280",
			spec:  Spec{Name: "kitchen", Type: "bme280", Address: 0x76},
			ops:   bme280Ops(0x76, 0x60),
			chip:  "BME280",
			want:  []Value{{Quantity: Temperature, Value: 23.72, Unit: "°C"}, {Quantity: Pressure, Value: 1009.43, Unit: "hPa"}, {Quantity: Humidity, Value: 65.3, Unit: "%"}},
			lines: "kitchen: temperature 23.72 °C, pressure 1009.43 hPa, humidity 65.3 %",
		},
		{
			name: "bmp280 at the alternate address",
			spec: Spec{Name: "attic", Type: "bmp280", Address: 0x77},
			ops:  bme280Ops(0x77, 0x58),
			chip: "BMP280",
			want: []Value{{Quantity: Temperature, Value: 23.72, Unit: "°C"}, {Quantity: Pressure, Value: 1009.43, Unit: "hPa"}},
		},
		{
			// A board sold as BME280 that carries a BMP280: no humidity,
			// and the chip says why.
			name: "bme280 entry finds a bmp280",
			spec: Spec{Name: "cheap", Type: "bme280"},
			ops:  bme280Ops(0x76, 0x58),
			chip: "BMP280",
			want: []Value{{Quantity: Temperature, Value: 23.72, Unit: "°C"}, {Quantity: Pressure, Value: 1009.43, Unit: "hPa"}},
		},
		{
			// Single shot, high repeatability, no clock stretching; the
			// words carry Sensirion CRCs (0x6666 -> 0x93, 0x8000 -> 0xa2).
			name: "sht3x",
			spec: Spec{Name: "bath", Type: "sht3x", Address: 0x45},
			ops: []i2ctest.IO{
				{Addr: 0x45, W: []byte{0x24, 0x00}},
				{Addr: 0x45, R: []byte{0x66, 0x66, 0x93, 0x80, 0x00, 0xa2}},
			},
			chip:  "SHT3x",
			want:  []Value{{Quantity: Temperature, Value: 25.0, Unit: "°C"}, {Quantity: Humidity, Value: 50.0, Unit: "%"}},
			lines: "bath: temperature 25.00 °C, humidity 50.0 %",
		},
		{
			// periph's driver: power on, continuous high resolution, reset,
			// then a measurement of 400 counts = 333.3 lx, which periph
			// truncates to whole lux (the mode's resolution is 1 lx).
			name:  "bh1750",
			spec:  Spec{Name: "desk", Type: "bh1750"},
			ops:   bh1750Ops(0x01, 0x90),
			chip:  "BH1750",
			want:  []Value{{Quantity: Illuminance, Value: 333, Unit: "lx"}},
			lines: "desk: illuminance 333 lx",
		},
		{
			// Direct sun: the counter's highest value, which any
			// brighter light reads too.
			name:  "bh1750 at its ceiling",
			spec:  Spec{Name: "window", Type: "bh1750"},
			ops:   bh1750Ops(0xff, 0xff),
			chip:  "BH1750",
			want:  []Value{{Quantity: Illuminance, Value: 54612, Unit: "lx", AtLeast: true}},
			lines: "window: illuminance at least 54612 lx (the sensor's ceiling: brighter reads the same)",
		},
		{
			// One count below it is a measurement like any other.
			name:  "bh1750 just below its ceiling",
			spec:  Spec{Name: "window", Type: "bh1750"},
			ops:   bh1750Ops(0xff, 0xfd),
			chip:  "BH1750",
			want:  []Value{{Quantity: Illuminance, Value: 54610, Unit: "lx"}},
			lines: "window: illuminance 54610 lx",
		},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			busName := "FAKE-SENSOR-BUS"
			hwtest.I2C(t, busName, nil, 60+i, &i2ctest.Playback{Ops: tt.ops, DontPanic: true})
			tt.spec.Bus = BusName(busName)
			set, err := NewSet([]Spec{tt.spec}, Options{})
			if err != nil {
				t.Fatal(err)
			}
			r, err := set.Read(context.Background(), strings.ToUpper(tt.spec.Name))
			if err != nil {
				t.Fatal(err)
			}
			if r.Chip != tt.chip || !reflect.DeepEqual(r.Values, tt.want) {
				t.Errorf("reading %+v\nwant chip %s values %+v", r, tt.chip, tt.want)
			}
			if tt.lines != "" && r.String() != tt.lines {
				t.Errorf("String() = %q, want %q", r.String(), tt.lines)
			}
		})
	}
}

func TestSHT3xChecksumMismatch(t *testing.T) {
	hwtest.I2C(t, "FAKE-SHT-BUS", nil, 70, &i2ctest.Playback{DontPanic: true, Ops: []i2ctest.IO{
		{Addr: 0x44, W: []byte{0x24, 0x00}},
		{Addr: 0x44, R: []byte{0x66, 0x66, 0x94, 0x80, 0x00, 0xa2}},
	}})
	set, err := NewSet([]Spec{{Name: "bath", Type: "sht3x", Bus: "70"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r, err := set.Read(context.Background(), "bath")
	if err == nil || !strings.Contains(err.Error(), "sht3x: checksum mismatch") || r.Error == "" || r.Values != nil {
		t.Errorf("reading %+v, error %v", r, err)
	}
}

// TestCRC8DatasheetExample: the SHT3x datasheet's example, 0xBEEF -> 0x92.
func TestCRC8DatasheetExample(t *testing.T) {
	if got := crc8([]byte{0xBE, 0xEF}); got != 0x92 {
		t.Errorf("crc8(BEEF) = %#x, want 0x92", got)
	}
}

func TestDS18B20(t *testing.T) {
	tests := []struct {
		name string
		dir  string
		spec Spec
		want float64
		err  string
	}{
		{"the only one", "testdata/w1-one", Spec{Name: "tank", Type: "ds18b20"}, 23.13, ""},
		{"by id", "testdata/w1-two", Spec{Name: "tank", Type: "ds18b20", Device: "28-000005e2fdc3"}, -10.13, ""},
		{"several without id", "testdata/w1-two", Spec{Name: "tank", Type: "ds18b20"}, 0,
			"several DS18B20 are present (28-000005e2fdc3, 28-0316a2795aff); set device"},
		{"id not present", "testdata/w1-two", Spec{Name: "tank", Type: "ds18b20", Device: "28-111111111111"}, 0,
			"ds18b20 28-111111111111 not found; present: 28-000005e2fdc3, 28-0316a2795aff"},
		{"none on the bus", "testdata/w1-none", Spec{Name: "tank", Type: "ds18b20"}, 0, "no DS18B20 found on the 1-wire bus"},
		{"1-wire off", "testdata/no-such-dir", Spec{Name: "tank", Type: "ds18b20"}, 0, "1-wire is not enabled: add dtoverlay=w1-gpio"},
		{"crc error", "testdata/w1-bad", Spec{Name: "tank", Type: "ds18b20", Device: "28-00000a1b2c3d"}, 0, "checksum mismatch"},
		{"power-on value", "testdata/w1-bad", Spec{Name: "tank", Type: "ds18b20", Device: "28-00000a1b2c3e"}, 0, "read 85 °C, the power-on value"},
		// A conversion that ran: count-remain 0x00, not the reset 0x0c.
		{"a real 85 °C", "testdata/w1-hot", Spec{Name: "tank", Type: "ds18b20"}, 85, ""},
		// The CRC of nine zero bytes is zero: the kernel says YES.
		{"all zeros", "testdata/w1-zero", Spec{Name: "tank", Type: "ds18b20"}, 0,
			"ds18b20 28-00000a1b2c40: the scratchpad read all zeros: the sensor did not answer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			set, err := NewSet([]Spec{tt.spec}, Options{W1Dir: tt.dir})
			if err != nil {
				t.Fatal(err)
			}
			r, err := set.Read(context.Background(), "tank")
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) || !strings.Contains(r.Error, tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := []Value{{Quantity: Temperature, Value: tt.want, Unit: "°C"}}
			if !reflect.DeepEqual(r.Values, want) || r.Chip != "DS18B20" {
				t.Errorf("reading %+v, want %+v", r, want)
			}
		})
	}
}

func TestParseW1Slave(t *testing.T) {
	for in, want := range map[string]string{
		"":                         "unexpected w1_slave content",
		"aa : crc=aa YES\nno temp": "no temperature",
		"aa : crc=aa YES\nt=abc":   `bad temperature "abc"`,
		"ff ff ff ff ff ff ff ff ff : crc=c9 NO\nff ff ff ff ff ff ff ff ff t=-62":    "the scratchpad read all 0xff: nothing drove the data line",
		"72 01 4b 46 60 ff 0e 10 dc : crc=dc YES\n72 01 4b 46 60 ff 0e 10 dc t=23125": "the scratchpad's fixed bits are wrong (byte 4 0x60, byte 5 0xff)",
		"72 01 4b 46 7f 00 0e 10 a5 : crc=a5 YES\n72 01 4b 46 7f 00 0e 10 a5 t=23125": "the scratchpad's fixed bits are wrong (byte 4 0x7f, byte 5 0x00)",
	} {
		if _, err := parseW1Slave(in); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("parseW1Slave(%q) error %v, want %q", in, err, want)
		}
	}
}

// TestMissingBusNeverBlocksTheSet: a sensor on a bus that is not there still
// makes a Set; Status and Read say what is wrong.
func TestMissingBusNeverBlocksTheSet(t *testing.T) {
	set, err := NewSet([]Spec{
		{Name: "kitchen", Type: "bme280", Bus: "99"},
		{Name: "tank", Type: "ds18b20"},
	}, Options{W1Dir: "testdata/w1-one"})
	if err != nil {
		t.Fatal(err)
	}
	st := set.Status()
	if len(st) != 2 {
		t.Fatalf("Status = %+v", st)
	}
	if st[0].OK || !strings.Contains(st[0].Message, "bus") || st[0].Where != "0x76 on I2C bus 99" {
		t.Errorf("missing bus status %+v", st[0])
	}
	if !st[1].OK || st[1].Where != "1-wire 28-0316a2795aff" {
		t.Errorf("ds18b20 status %+v", st[1])
	}
	all := set.ReadAll(context.Background())
	if all[0].Error == "" || !strings.HasPrefix(all[0].String(), "kitchen (bme280, 0x76 on I2C bus 99): i2c: ") {
		t.Errorf("reading %+v", all[0])
	}
	if all[1].Error != "" || len(all[1].Values) != 1 {
		t.Errorf("reading %+v", all[1])
	}
}

func TestStatusOfPresentBus(t *testing.T) {
	hwtest.I2C(t, "FAKE-STATUS-BUS", nil, 71, &i2ctest.Playback{DontPanic: true})
	set, err := NewSet([]Spec{{Name: "kitchen", Type: "bme280", Bus: "71"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	st := set.Status()
	if !st[0].OK || st[0].Message != "bus 71 (FAKE-STATUS-BUS) present" {
		t.Errorf("status %+v", st[0])
	}
}

func TestUnknownSensorListsTheConfiguredOnes(t *testing.T) {
	set, _ := NewSet([]Spec{{Name: "kitchen", Type: "bme280"}, {Name: "tank", Type: "ds18b20"}}, Options{})
	_, err := set.Read(context.Background(), "garage")
	var u *UnknownSensorError
	if !errors.As(err, &u) || err.Error() != `sensor: no sensor named "garage"; configured: kitchen, tank` {
		t.Errorf("error %v", err)
	}
	empty, _ := NewSet(nil, Options{})
	if _, err := empty.Read(context.Background(), "x"); err == nil || !strings.Contains(err.Error(), "none is configured") {
		t.Errorf("error %v", err)
	}
}

func TestReadHonoursCancellation(t *testing.T) {
	set, _ := NewSet([]Spec{{Name: "tank", Type: "ds18b20"}}, Options{W1Dir: "testdata/w1-one"})
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := set.Read(ctx, "tank"); !errors.Is(err, context.Canceled) {
		t.Errorf("error %v", err)
	}
}

func TestSuggest(t *testing.T) {
	got := Suggest(0x76)
	if len(got) != 2 || got[0].String() != "BME280 (type bme280)" || got[1].Type != "bmp280" {
		t.Errorf("Suggest(0x76) = %v", got)
	}
	for _, a := range []int{0x44, 0x45, 0x23, 0x5c, 0x77} {
		if s := Suggest(a); len(s) == 0 || s[0].Type == "" {
			t.Errorf("Suggest(%#x) = %v, want a readable part first", a, s)
		}
	}
	if s := Suggest(0x11); s != nil {
		t.Errorf("Suggest(0x11) = %v", s)
	}
	// Every readable suggestion names a type Perch knows.
	for addr, ps := range known {
		for _, p := range ps {
			if _, ok := parts[p.Type]; p.Type != "" && !ok {
				t.Errorf("known[%#x] suggests unknown type %q", addr, p.Type)
			}
		}
	}
}

func TestValueString(t *testing.T) {
	var b bytes.Buffer
	for _, v := range []Value{{Quantity: Temperature, Value: -3.456, Unit: "°C"}, {Quantity: Humidity, Value: 40.04, Unit: "%"}, {Quantity: Pressure, Value: 1013.25, Unit: "hPa"}} {
		b.WriteString(v.String() + "; ")
	}
	if got := b.String(); got != "temperature -3.46 °C; humidity 40.0 %; pressure 1013.25 hPa; " {
		t.Errorf("got %q", got)
	}
}

func TestNameAndIDSyntax(t *testing.T) {
	for name, want := range map[string]bool{
		"kitchen": true, "Living room": true, "desk.light_2": true, "Küche": true, "温度": true, "a": true,
		"": false, " lead": false, "-x": false, "a/b": false, "a\tb": false,
		strings.Repeat("x", 40): true, strings.Repeat("x", 41): false,
	} {
		if got := validName(name); got != want {
			t.Errorf("validName(%q) = %v, want %v", name, got, want)
		}
	}
	for id, want := range map[string]bool{
		"28-0316a2795aff": true, "10-000802b4f1c2": true,
		"28-0316A2795AFF": false, "28_0316a2795aff": false, "28-0316a2795af": false, "28-0316a2795affe": false, "2g-0316a2795aff": false,
	} {
		if got := validW1ID(id); got != want {
			t.Errorf("validW1ID(%q) = %v, want %v", id, got, want)
		}
	}
}

// TestCheckIsAlwaysOK: a missing bus is news for /ready's message, never a
// reason to report the gateway not ready.
func TestCheckIsAlwaysOK(t *testing.T) {
	hwtest.I2C(t, "FAKE-CHECK-BUS", nil, 72, &i2ctest.Playback{DontPanic: true})
	set, err := NewSet([]Spec{
		{Name: "kitchen", Type: "bme280", Bus: "72"},
		{Name: "garage", Type: "sht3x", Bus: "98"},
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ok, msg := set.Check()
	if !ok || !strings.HasPrefix(msg, "1 of 2 sensors ready; garage: i2c: unknown bus \"98\"") {
		t.Errorf("Check() = %v, %q", ok, msg)
	}
	one, err := NewSet([]Spec{{Name: "kitchen", Type: "bme280", Bus: "72"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if ok, msg := one.Check(); !ok || msg != "1 sensor ready" {
		t.Errorf("one ready: Check() = %v, %q", ok, msg)
	}
	lost, err := NewSet([]Spec{{Name: "garage", Type: "sht3x", Bus: "98"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if ok, msg := lost.Check(); !ok || !strings.HasPrefix(msg, "the sensor is not ready; garage: i2c: unknown bus \"98\"") {
		t.Errorf("one not ready: Check() = %v, %q", ok, msg)
	}
	empty, _ := NewSet(nil, Options{})
	if ok, msg := empty.Check(); !ok || msg != "no sensors configured" {
		t.Errorf("Check() = %v, %q", ok, msg)
	}
}

// stuckBMx280 answers as a BME280 whose status register keeps the measuring
// bit set (a clone part, or one that browned out mid-conversion): periph's
// Sense polls it for as long as every transfer succeeds.
type stuckBMx280 struct {
	polling chan struct{} // closed at the first status poll
	once    sync.Once
}

func (b *stuckBMx280) String() string                  { return "stuck-bme280" }
func (b *stuckBMx280) Close() error                    { return nil }
func (b *stuckBMx280) SetSpeed(physic.Frequency) error { return nil }

func (b *stuckBMx280) Tx(addr uint16, w, r []byte) error {
	for _, op := range bme280Ops(addr, 0x60) {
		if len(w) > 0 && len(op.W) > 0 && op.W[0] == w[0] && len(op.R) == len(r) {
			copy(r, op.R)
			break
		}
	}
	if len(w) == 1 && w[0] == 0xf3 {
		r[0] = 0x08 // measuring
		b.once.Do(func() { close(b.polling) })
	}
	return nil
}

// TestStuckSensorFailsAloneAndInTime: a BMx280 whose busy bit never clears
// fails its read by the read timeout, naming it, even for a caller with no
// deadline; a sensor queued behind it on the same bus fails by its own
// deadline, and sensors on other buses read meanwhile.
func TestStuckSensorFailsAloneAndInTime(t *testing.T) {
	stuck := &stuckBMx280{polling: make(chan struct{})}
	hwtest.I2C(t, "FAKE-STUCK-BUS", nil, 73, stuck)
	hwtest.I2C(t, "FAKE-OTHER-BUS", nil, 74, &i2ctest.Playback{DontPanic: true, Ops: []i2ctest.IO{
		{Addr: 0x44, W: []byte{0x24, 0x00}},
		{Addr: 0x44, R: []byte{0x66, 0x66, 0x93, 0x80, 0x00, 0xa2}},
	}})
	set, err := NewSet([]Spec{
		{Name: "climate", Type: "bme280", Bus: "73"},
		{Name: "attic", Type: "bmp280", Bus: "73", Address: 0x77},
		{Name: "bath", Type: "sht3x", Bus: "74"},
		{Name: "tank", Type: "ds18b20"},
	}, Options{W1Dir: "testdata/w1-one", ReadTimeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	done := make(chan error, 1)
	go func() {
		_, err := set.Read(context.Background(), "climate")
		done <- err
	}()
	<-stuck.polling

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = set.Read(ctx, "attic")
	if err == nil || !regexp.MustCompile(`^sensor attic \(bmp280, 0x77 on I2C bus 73\): no reading within \d+ms: `+
		`another sensor's read on the same bus has not finished`).MatchString(err.Error()) {
		t.Errorf("queued read on the stuck bus: %v", err)
	}
	for _, name := range []string{"bath", "tank"} {
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		if r, err := set.Read(ctx, name); err != nil || len(r.Values) == 0 {
			t.Errorf("%s, on another bus, while climate is stuck: %+v, %v", name, r, err)
		}
	}

	select {
	case err := <-done:
		if !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(),
			"sensor climate (bme280, 0x76 on I2C bus 73): no reading within 500ms: the part did not finish its measurement; power-cycle it") {
			t.Errorf("stuck read: %v", err)
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Errorf("stuck read took %s", took)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a read of a stuck BMx280 never returned")
	}
}

// TestStatusFollowsTheBusNode: a sensor on a USB adapter's bus is ready
// while /dev/i2c-N is there and not once it is unplugged.
func TestStatusFollowsTheBusNode(t *testing.T) {
	dev := t.TempDir()
	t.Cleanup(periphhost.SetDevDir(dev))
	node := filepath.Join(dev, "i2c-97")
	if err := os.WriteFile(node, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	set, err := NewSet([]Spec{{Name: "climate", Type: "bme280", Bus: "97"}}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if st := set.Status()[0]; !st.OK || st.Message != "bus 97 (/dev/i2c-97) present" {
		t.Errorf("plugged in: %+v", st)
	}
	if err := os.Remove(node); err != nil {
		t.Fatal(err)
	}
	if st := set.Status()[0]; st.OK || !strings.HasPrefix(st.Message, `i2c: unknown bus "97": /dev/i2c-97 is gone: its adapter was unplugged`) {
		t.Errorf("unplugged: %+v", st)
	}
}

// nackBus is a bus where no device acknowledges: every transfer fails as
// periph's sysfs bus reports EREMOTEIO.
type nackBus struct{}

func (nackBus) String() string                  { return "nack" }
func (nackBus) Close() error                    { return nil }
func (nackBus) SetSpeed(physic.Frequency) error { return nil }
func (nackBus) Tx(uint16, []byte, []byte) error { return errors.New("sysfs-i2c: remote I/O error") }

// TestSensorThatDoesNotAnswer: each part's error names it and says where to
// look, as the i2c tool's does.
func TestSensorThatDoesNotAnswer(t *testing.T) {
	hwtest.I2C(t, "FAKE-NACK-BUS", nil, 75, nackBus{})
	set, err := NewSet([]Spec{
		{Name: "a", Type: "bme280", Bus: "75"},
		{Name: "b", Type: "sht3x", Bus: "75"},
		{Name: "c", Type: "bh1750", Bus: "75"},
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	const hint = "; no device acknowledged at %s: check the wiring and the address (the i2c tool's scan lists what answers)"
	want := []string{
		"a (bme280, 0x76 on I2C bus 75): bme280: sysfs-i2c: remote I/O error" + fmt.Sprintf(hint, "0x76"),
		"b (sht3x, 0x44 on I2C bus 75): sht3x: start measurement: sysfs-i2c: remote I/O error" + fmt.Sprintf(hint, "0x44"),
		"c (bh1750, 0x23 on I2C bus 75): bh1750: sysfs-i2c: remote I/O error" + fmt.Sprintf(hint, "0x23"),
	}
	for i, r := range set.ReadAll(context.Background()) {
		if r.String() != want[i] {
			t.Errorf("got  %q\nwant %q", r.String(), want[i])
		}
	}
}

// TestSensorAtADriversAddress: a bme280 entry at 0x76 where the kernel's
// bmp280 driver is bound (dtoverlay=i2c-sensor,bme280) gets an error naming
// the driver and what to do, not the part driver's mangled text, and Status
// says so without a read; the sensor beside it on the same bus still reads.
// The Playback holds only the sht3x's transfers: any to 0x76 would fail the
// read with the Playback's own error.
func TestSensorAtADriversAddress(t *testing.T) {
	hwtest.I2C(t, "FAKE-DRIVER-BUS", nil, 76, &i2ctest.Playback{DontPanic: true, Ops: []i2ctest.IO{
		{Addr: 0x44, W: []byte{0x24, 0x00}},
		{Addr: 0x44, R: []byte{0x66, 0x66, 0x93, 0x80, 0x00, 0xa2}},
	}})
	hwtest.I2CDriver(t, 76, 0x76, "bmp280")
	set, err := NewSet([]Spec{
		{Name: "room", Type: "bme280", Bus: "76"},
		{Name: "bath", Type: "sht3x", Bus: "76"},
	}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	rs := set.ReadAll(context.Background())
	const want = "room (bme280, 0x76 on I2C bus 76): i2c: read 0x76 on bus 76 (FAKE-DRIVER-BUS) refused: " +
		"the address is in use by kernel driver bmp280 (UU in a scan)."
	if !strings.HasPrefix(rs[0].String(), want) || !strings.HasSuffix(rs[0].String(), "echo 76-0076 > /sys/bus/i2c/drivers/bmp280/unbind") {
		t.Errorf("got  %q\nwant %q … the unbind command", rs[0].String(), want)
	}
	if rs[1].Error != "" {
		t.Errorf("the sensor beside it: %s", rs[1])
	}
	if _, err := set.Read(context.Background(), "room"); !errors.Is(err, i2c.ErrBusy) {
		t.Errorf("Read error %v, want ErrBusy", err)
	}
	st := set.Status()
	if st[0].OK || st[0].Message != "bus 76 (FAKE-DRIVER-BUS) present, but 0x76 is in use by kernel driver bmp280, "+
		"so it is not read; read it through the kernel's interface, or unbind the driver: echo 76-0076 > /sys/bus/i2c/drivers/bmp280/unbind" {
		t.Errorf("status %+v", st[0])
	}
	if !st[1].OK {
		t.Errorf("status of the sensor beside it %+v", st[1])
	}
	// The sht3x's address owned on a bus a multiplexer joins to this one:
	// a read would reach that device too, so it is not made.
	hwtest.I2CMux(t, 76, 77)
	hwtest.I2CDriver(t, 77, 0x44, "sht3x")
	st = set.Status()
	if st[1].OK || st[1].Message != "bus 76 (FAKE-DRIVER-BUS) present, but 0x44 is in use by kernel driver sht3x "+
		"(its device is declared on bus 77, behind a multiplexer on this one), so it is not read; read it through "+
		"the kernel's interface, or unbind the driver: echo 77-0044 > /sys/bus/i2c/drivers/sht3x/unbind" {
		t.Errorf("status %+v", st[1])
	}
	if _, err := set.Read(context.Background(), "bath"); !errors.Is(err, i2c.ErrBusy) {
		t.Errorf("Read error %v, want ErrBusy", err)
	}
}
