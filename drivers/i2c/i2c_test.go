package i2c

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"periph.io/x/conn/v3/i2c/i2creg"
	"periph.io/x/conn/v3/i2c/i2ctest"

	"github.com/perchhq/perch/drivers/hwtest"
	"github.com/perchhq/perch/drivers/internal/periphhost"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites it under -update.
func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs (go test -update rewrites it)\ngot:\n%s\nwant:\n%s", name, got, want)
	}
}

func TestCheckArguments(t *testing.T) {
	tests := []struct {
		name string
		err  error
		want string // "" for valid
	}{
		{"address 0x03", CheckAddress(0x03), ""},
		{"address 0x77", CheckAddress(0x77), ""},
		{"address 0x76", CheckAddress(0x76), ""},
		{"address 0x02 reserved", CheckAddress(0x02), "address 0x02 (2) is outside 0x03-0x77"},
		{"address 0x78 reserved", CheckAddress(0x78), "address 0x78 (120) is outside 0x03-0x77"},
		{"address 8-bit form", CheckAddress(0xEC), "give the 7-bit address"},
		{"address negative", CheckAddress(-1), "outside 0x03-0x77"},
		{"register 0", CheckRegister(0), ""},
		{"register 255", CheckRegister(255), ""},
		{"register 256", CheckRegister(256), "register 256 is outside 0-255"},
		{"register -1", CheckRegister(-1), "register -1 is outside 0-255"},
		{"length 1", CheckLength(1), ""},
		{"length max", CheckLength(MaxLength), ""},
		{"length 0", CheckLength(0), "length 0 is outside 1-256"},
		{"length too long", CheckLength(MaxLength + 1), "length 257 is outside 1-256"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want == "" {
				if tt.err != nil {
					t.Fatalf("unexpected error: %v", tt.err)
				}
				return
			}
			if tt.err == nil || !strings.Contains(tt.err.Error(), tt.want) {
				t.Fatalf("error %v, want one containing %q", tt.err, tt.want)
			}
			if !errors.Is(tt.err, ErrInvalid) {
				t.Errorf("error %v does not wrap ErrInvalid", tt.err)
			}
		})
	}
}

func TestBytes(t *testing.T) {
	tests := []struct {
		name string
		in   []int64
		want []byte
		err  string
	}{
		{"bytes", []int64{0, 0x7f, 255}, []byte{0, 0x7f, 0xff}, ""},
		{"empty", nil, []byte{}, ""},
		{"too big", []int64{1, 256}, nil, "data[1] = 256 is not a byte"},
		{"negative", []int64{-1}, nil, "data[0] = -1 is not a byte"},
		{"too many", make([]int64, MaxLength+1), nil, "257 data bytes; at most 256"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Bytes(tt.in)
			if tt.err != "" {
				if err == nil || !strings.Contains(err.Error(), tt.err) {
					t.Fatalf("error %v, want %q", err, tt.err)
				}
				return
			}
			if err != nil || !bytes.Equal(got, tt.want) {
				t.Fatalf("Bytes = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestNormalizeBusNames(t *testing.T) {
	for in, want := range map[string]string{
		"1": "1", "I2C1": "1", "i2c1": "1", "i2c-1": "1", "/dev/i2c-1": "1", " I2C-22 ": "22",
		"FAKE-I2C": "fake-i2c", "i2cx": "i2cx",
	} {
		if got := normalize(in); got != want {
			t.Errorf("normalize(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestNoBusSaysHowToEnableOne: on a machine without I²C (this build machine)
// every call names the cause and the fix instead of periph's "no bus found".
func TestNoBusSaysHowToEnableOne(t *testing.T) {
	if err := periphhost.Init(); err != nil {
		t.Logf("driver init: %v", err)
	}
	if real := i2creg.All(); len(real) > 0 {
		// On a board with buses the listing must show them instead.
		got, err := Buses()
		if err != nil || len(got) != len(real) {
			t.Fatalf("Buses() = %v, %v; registry has %d", got, err, len(real))
		}
		return
	}
	_, err := Buses()
	if !errors.Is(err, ErrNoBus) {
		t.Fatalf("Buses() error %v, want ErrNoBus", err)
	}
	for _, want := range []string{"no I2C bus found", "raspi-config", "dtparam=i2c_arm=on", "/boot/firmware/config.txt"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if _, err := Open("1"); !errors.Is(err, ErrNoBus) {
		t.Errorf("Open error %v, want ErrNoBus", err)
	}
	if _, err := Lookup(""); !errors.Is(err, ErrNoBus) {
		t.Errorf("Lookup error %v, want ErrNoBus", err)
	}
}

func TestLookupByEverySpelling(t *testing.T) {
	hwtest.I2C(t, "FAKE-I2C41", []string{"SENSORS"}, 41, &i2ctest.Playback{DontPanic: true})
	hwtest.I2C(t, "FAKE-I2C40", nil, 40, &i2ctest.Playback{DontPanic: true})
	hwtest.I2C(t, "FAKE-USB", nil, -1, &i2ctest.Playback{DontPanic: true})
	tests := []struct{ name, want string }{
		{"41", "FAKE-I2C41"},
		{"FAKE-I2C41", "FAKE-I2C41"},
		{"fake-i2c41", "FAKE-I2C41"},
		{"sensors", "FAKE-I2C41"},
		{"i2c-40", "FAKE-I2C40"},
		{"I2C40", "FAKE-I2C40"},
		{"FAKE-USB", "FAKE-USB"},
		{"", ""}, // the lowest numbered bus; a real board's may sort first
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Lookup(tt.name)
			if err != nil {
				t.Fatal(err)
			}
			if tt.want != "" && got.Name != tt.want {
				t.Errorf("Lookup(%q) = %s, want %s", tt.name, got.Name, tt.want)
			}
			if tt.want == "" && got.Number < 0 {
				t.Errorf("Lookup(\"\") = %s, want a numbered bus", got)
			}
		})
	}
	_, err := Lookup("7")
	if !errors.Is(err, ErrUnknownBus) || !strings.Contains(err.Error(), "40 (FAKE-I2C40), 41 (FAKE-I2C41)") {
		t.Errorf("Lookup(7) error %v, want ErrUnknownBus listing the buses", err)
	}
	buses, err := Buses()
	if err != nil {
		t.Fatal(err)
	}
	last := buses[len(buses)-1]
	if last.Name != "FAKE-USB" {
		t.Errorf("unnumbered bus sorts last; got order %v", buses)
	}
}

// TestReadWritePlayback drives every data operation through a registered
// fake bus, opened by number as a tool would.
func TestReadWritePlayback(t *testing.T) {
	pb := &i2ctest.Playback{DontPanic: true, Ops: []i2ctest.IO{
		{Addr: 0x76, W: []byte{0xD0}, R: []byte{0x60}}, // ReadRegister: chip id
		{Addr: 0x23, R: []byte{0x01, 0x90}},            // Read: 2 bytes
		{Addr: 0x40, W: []byte{0xF4, 0x27}},            // WriteRegister
		{Addr: 0x40, W: []byte{0x01}},                  // WriteRegister, bare command
		{Addr: 0x50, W: []byte{0x00, 0x10, 'h', 'i'}},  // Write
		{Addr: 0x44, W: []byte{0x24}, R: []byte{1, 2}}, // ReadRegister is one Tx
	}}
	hwtest.I2C(t, "FAKE-I2C42", nil, 42, pb)
	b, err := Open("42")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if got := b.Info().String(); got != "42 (FAKE-I2C42)" {
		t.Errorf("Info = %q", got)
	}
	if got, err := b.ReadRegister(0x76, 0xD0, 1); err != nil || !bytes.Equal(got, []byte{0x60}) {
		t.Errorf("ReadRegister = %x, %v", got, err)
	}
	if got, err := b.Read(0x23, 2); err != nil || !bytes.Equal(got, []byte{0x01, 0x90}) {
		t.Errorf("Read = %x, %v", got, err)
	}
	if err := b.WriteRegister(0x40, 0xF4, []byte{0x27}); err != nil {
		t.Errorf("WriteRegister: %v", err)
	}
	if err := b.WriteRegister(0x40, 0x01, nil); err != nil {
		t.Errorf("WriteRegister bare: %v", err)
	}
	if err := b.Write(0x50, []byte{0x00, 0x10, 'h', 'i'}); err != nil {
		t.Errorf("Write: %v", err)
	}
	// A read of the wrong length is what a broken driver would send; the
	// Playback refuses it, and the error names address and bus.
	_, err = b.ReadRegister(0x44, 0x24, 3)
	if err == nil || !strings.Contains(err.Error(), "i2c: read 0x44 on bus 42 (FAKE-I2C42)") {
		t.Errorf("mismatched read error = %v", err)
	}
	if got, err := b.ReadRegister(0x44, 0x24, 2); err != nil || !bytes.Equal(got, []byte{1, 2}) {
		t.Errorf("ReadRegister = %x, %v", got, err)
	}
}

// TestOperationsRefuseBadArgumentsBeforeTheBus: nothing reaches the wire
// when an argument is out of range (the Playback has no operations, so any
// Tx would fail the test at Close).
func TestOperationsRefuseBadArgumentsBeforeTheBus(t *testing.T) {
	hwtest.I2C(t, "FAKE-I2C43", nil, 43, &i2ctest.Playback{DontPanic: true})
	b, err := Open("43")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	calls := map[string]error{
		"read address":        func() error { _, err := b.Read(0x80, 1); return err }(),
		"read length":         func() error { _, err := b.Read(0x40, 0); return err }(),
		"read register":       func() error { _, err := b.ReadRegister(0x40, 300, 1); return err }(),
		"read register addr":  func() error { _, err := b.ReadRegister(0x01, 1, 1); return err }(),
		"read register len":   func() error { _, err := b.ReadRegister(0x40, 1, 1000); return err }(),
		"write empty":         b.Write(0x40, nil),
		"write address":       b.Write(0x00, []byte{1}),
		"write too long":      b.Write(0x40, make([]byte, MaxLength+1)),
		"write register":      b.WriteRegister(0x40, -2, []byte{1}),
		"write register long": b.WriteRegister(0x40, 1, make([]byte, MaxLength)),
	}
	for name, err := range calls {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: error %v, want ErrInvalid", name, err)
		}
	}
}

func TestMissingDeviceErrorHints(t *testing.T) {
	b := &Bus{info: BusInfo{Name: "/dev/i2c-1", Number: 1}}
	err := b.wrap("read", 0x76, errors.New("sysfs-i2c: remote I/O error"))
	want := "i2c: read 0x76 on bus 1 (/dev/i2c-1): sysfs-i2c: remote I/O error; no device acknowledged: check the wiring"
	if !strings.HasPrefix(err.Error(), want) {
		t.Errorf("got %q\nwant prefix %q", err, want)
	}
}

// TestScanPlaybackOnUserSpaceBus: on a bus periph drives itself every
// address gets one "read byte"; those that answer are listed, the others
// (the Playback refuses them) are not.
func TestScanPlaybackOnUserSpaceBus(t *testing.T) {
	pb := &i2ctest.Playback{DontPanic: true, Ops: []i2ctest.IO{
		{Addr: 0x23, R: []byte{0}},
		{Addr: 0x50, R: []byte{0xff}},
		{Addr: 0x76, R: []byte{0}},
	}}
	hwtest.I2C(t, "FAKE-I2C44", nil, 44, pb)
	res, err := openBus(t, "44").Scan(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if want := []int{0x23, 0x50, 0x76}; !slices.Equal(res.Found, want) {
		t.Errorf("Found = %#x, want %#x", res.Found, want)
	}
	if len(res.Busy) != 0 || len(res.Skipped) != 0 {
		t.Errorf("Busy %v Skipped %v, want none", res.Busy, res.Skipped)
	}
	if !strings.Contains(res.Method, "read byte") || res.Bus.Number != 44 {
		t.Errorf("result = %+v", res)
	}
}

func TestScanStopsWhenCancelled(t *testing.T) {
	hwtest.I2C(t, "FAKE-I2C45", nil, 45, &i2ctest.Playback{DontPanic: true})
	b, err := Open("45")
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Scan(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Scan error %v, want context.Canceled", err)
	}
}

func TestProbeForFollowsI2cdetect(t *testing.T) {
	reads := map[int]bool{}
	for a := 0x30; a <= 0x37; a++ {
		reads[a] = true
	}
	for a := 0x50; a <= 0x5F; a++ {
		reads[a] = true
	}
	for a := MinAddr; a <= MaxAddr; a++ {
		want := ProbeQuick
		if reads[a] {
			want = ProbeRead
		}
		if got := ProbeFor(a); got != want {
			t.Errorf("ProbeFor(0x%02x) = %v, want %v", a, got, want)
		}
	}
}

func TestFormatScanGolden(t *testing.T) {
	res := ScanResult{Found: []int{0x23, 0x44, 0x76}, Busy: []int{0x68}, Skipped: []int{0x50, 0x51}}
	golden(t, "scan.golden", FormatScan(res)+"\n")
}

// TestBusesFollowTheDeviceNodes: a USB adapter's /dev/i2c-N appearing after
// the first hardware call is found, and one unplugged is no longer listed;
// asking for it then says it is gone, not to enable I2C with raspi-config.
func TestBusesFollowTheDeviceNodes(t *testing.T) {
	dev := t.TempDir()
	t.Cleanup(periphhost.SetDevDir(dev))
	if _, err := Buses(); !errors.Is(err, ErrNoBus) {
		t.Fatalf("empty /dev: Buses() error %v, want ErrNoBus", err)
	}
	node := filepath.Join(dev, "i2c-97")
	if err := os.WriteFile(node, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	buses, err := Buses()
	if err != nil || len(buses) != 1 || buses[0].String() != "97 (/dev/i2c-97)" || !slices.Equal(buses[0].Aliases, []string{"I2C97"}) {
		t.Fatalf("after plugging in: Buses() = %+v, %v", buses, err)
	}
	if info, err := Lookup("i2c97"); err != nil || info.Number != 97 {
		t.Errorf("Lookup(i2c97) = %+v, %v", info, err)
	}

	if err := os.Remove(node); err != nil {
		t.Fatal(err)
	}
	if buses, err := Buses(); !errors.Is(err, ErrNoBus) {
		t.Errorf("after unplugging: Buses() = %+v, %v", buses, err)
	}
	for _, name := range []string{"97", "/dev/i2c-97"} {
		_, err = Lookup(name)
		if !errors.Is(err, ErrUnknownBus) || strings.Contains(err.Error(), "raspi-config") ||
			!strings.Contains(err.Error(), "i2c: unknown bus \""+name+"\": /dev/i2c-97 is gone: its adapter was unplugged or its driver unloaded; plug it back in") {
			t.Errorf("Lookup(%s) after unplugging: %v", name, err)
		}
	}
	if _, err := Open("5"); !errors.Is(err, ErrNoBus) {
		t.Errorf("a bus never seen, none present: %v, want ErrNoBus with the raspi-config hint", err)
	}
}
