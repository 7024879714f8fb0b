package spi

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"periph.io/x/conn/v3/conntest"
	"periph.io/x/conn/v3/physic"
	"periph.io/x/conn/v3/spi"
	"periph.io/x/conn/v3/spi/spireg"
	"periph.io/x/conn/v3/spi/spitest"

	"github.com/perchhq/perch/drivers/hwtest"
	"github.com/perchhq/perch/drivers/internal/periphhost"
)

func playback(ops ...conntest.IO) *spitest.Playback {
	return &spitest.Playback{Playback: conntest.Playback{DontPanic: true, Ops: ops}}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name string
		c    Config
		want string // "" valid
	}{
		{"defaults", Config{}, ""},
		{"slowest", Config{Speed: MinSpeed}, ""},
		{"fastest", Config{Speed: MaxSpeed, Mode: 3, Bits: 32}, ""},
		{"too slow", Config{Speed: 999}, "speed 999 Hz is outside 1000-125000000 Hz"},
		{"too fast", Config{Speed: 200_000_000}, "speed 200000000 Hz is outside"},
		{"negative speed", Config{Speed: -1}, "speed -1 Hz"},
		{"mode 4", Config{Mode: 4}, "mode 4 is not 0-3"},
		{"mode -1", Config{Mode: -1}, "mode -1 is not 0-3"},
		{"bits 33", Config{Bits: 33}, "bits 33 is outside 1-32"},
		{"bits -8", Config{Bits: -8}, "bits -8 is outside 1-32"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Validate()
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want ErrInvalid with %q", err, tt.want)
			}
		})
	}
}

func TestCheckLength(t *testing.T) {
	tests := []struct {
		name string
		bits int
		n    int
		want string
	}{
		{"one byte", 8, 1, ""},
		{"max", 8, MaxLength, ""},
		{"zero", 8, 0, "length 0 is outside 1-4096"},
		{"too long", 8, MaxLength + 1, "length 4097"},
		{"16-bit words", 16, 4, ""},
		{"half a 16-bit word", 16, 3, "3 bytes is not a whole number of 16-bit words (2 bytes each)"},
		{"12-bit words take 2 bytes", 12, 1, "(2 bytes each)"},
		{"24-bit words take 4 bytes", 24, 6, "(4 bytes each)"},
		{"9-bit words", 9, 2, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Config{Bits: tt.bits}.CheckLength(tt.n)
			if tt.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error %v, want %q", err, tt.want)
			}
		})
	}
}

func TestBytes(t *testing.T) {
	if b, err := Bytes([]int64{0x9f, 0, 255}); err != nil || !bytes.Equal(b, []byte{0x9f, 0, 0xff}) {
		t.Errorf("Bytes = %x, %v", b, err)
	}
	if _, err := Bytes([]int64{1, 300}); err == nil || !strings.Contains(err.Error(), "data[1] = 300 is not a byte") {
		t.Errorf("error %v", err)
	}
	if _, err := Bytes(make([]int64, MaxLength+1)); !errors.Is(err, ErrInvalid) {
		t.Errorf("error %v", err)
	}
}

func TestNormalize(t *testing.T) {
	for in, want := range map[string]string{
		"0.0": "0.0", "SPI0.1": "0.1", "spidev1.2": "1.2", "/dev/spidev0.0": "0.0", " spi10.0 ": "10.0",
		"0": "0", "spi": "spi", "FAKE": "fake",
	} {
		if got := normalize(in); got != want {
			t.Errorf("normalize(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestNoDeviceSaysHowToEnableSPI: on this machine (no spidev) the error names
// the fix.
func TestNoDeviceSaysHowToEnableSPI(t *testing.T) {
	if err := periphhost.Init(); err != nil {
		t.Logf("driver init: %v", err)
	}
	if real := spireg.All(); len(real) > 0 {
		got, err := Devices()
		if err != nil || len(got) != len(real) {
			t.Fatalf("Devices() = %v, %v; registry has %d", got, err, len(real))
		}
		return
	}
	_, err := Devices()
	if !errors.Is(err, ErrNoDevice) {
		t.Fatalf("Devices() error %v, want ErrNoDevice", err)
	}
	for _, want := range []string{"no SPI device found", "raspi-config", "dtparam=spi=on", "/boot/firmware/config.txt"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
	if _, err := Transfer("0.0", Config{}, []byte{1}); !errors.Is(err, ErrNoDevice) {
		t.Errorf("Transfer error %v, want ErrNoDevice", err)
	}
}

// TestTransferPlayback: a JEDEC id read from a flash chip, full duplex, with
// the default connection parameters.
func TestTransferPlayback(t *testing.T) {
	pb := playback(conntest.IO{W: []byte{0x9f, 0, 0, 0}, R: []byte{0xff, 0xef, 0x40, 0x18}})
	port := hwtest.SPI(t, "/dev/spidev9.0", []string{"SPI9.0"}, 9, pb)
	got, err := Transfer("9.0", Config{}, []byte{0x9f, 0, 0, 0})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, []byte{0xff, 0xef, 0x40, 0x18}) {
		t.Errorf("Transfer = %x", got)
	}
	want := hwtest.Connect{Freq: physic.MegaHertz, Mode: spi.Mode0, Bits: 8}
	if c := port.Connects(); len(c) != 1 || c[0] != want {
		t.Errorf("Connects = %+v, want [%+v]", c, want)
	}
}

// TestReadPlayback: Read sends nothing but zeros (a nil write buffer) and
// passes speed, mode and bits through.
func TestReadPlayback(t *testing.T) {
	pb := playback(conntest.IO{R: []byte{0x01, 0xf4, 0x02, 0x10}})
	port := hwtest.SPI(t, "/dev/spidev9.1", []string{"SPI9.1"}, -1, pb)
	got, err := Read("SPI9.1", Config{Speed: 500_000, Mode: 3, Bits: 16}, 4)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, []byte{0x01, 0xf4, 0x02, 0x10}) {
		t.Errorf("Read = %x", got)
	}
	want := hwtest.Connect{Freq: 500 * physic.KiloHertz, Mode: spi.Mode3, Bits: 16}
	if c := port.Connects(); len(c) != 1 || c[0] != want {
		t.Errorf("Connects = %+v, want [%+v]", c, want)
	}
}

// TestBadArgumentsNeverOpenTheDevice: validation comes before lookup and
// open, so the port sees no connection at all.
func TestBadArgumentsNeverOpenTheDevice(t *testing.T) {
	port := hwtest.SPI(t, "/dev/spidev9.2", nil, -1, playback())
	calls := map[string]error{
		"speed":     func() error { _, err := Transfer("/dev/spidev9.2", Config{Speed: 10}, []byte{1}); return err }(),
		"mode":      func() error { _, err := Read("/dev/spidev9.2", Config{Mode: 5}, 1); return err }(),
		"bits":      func() error { _, err := Read("/dev/spidev9.2", Config{Bits: 64}, 1); return err }(),
		"empty":     func() error { _, err := Transfer("/dev/spidev9.2", Config{}, nil); return err }(),
		"too long":  func() error { _, err := Read("/dev/spidev9.2", Config{}, MaxLength+1); return err }(),
		"odd words": func() error { _, err := Transfer("/dev/spidev9.2", Config{Bits: 16}, []byte{1, 2, 3}); return err }(),
	}
	for name, err := range calls {
		if !errors.Is(err, ErrInvalid) {
			t.Errorf("%s: error %v, want ErrInvalid", name, err)
		}
	}
	if c := port.Connects(); len(c) != 0 {
		t.Errorf("device was connected %d times", len(c))
	}
}

func TestUnknownDeviceListsThePresentOnes(t *testing.T) {
	hwtest.SPI(t, "/dev/spidev9.3", []string{"SPI9.3"}, -1, playback())
	_, err := Read("7.7", Config{}, 1)
	if !errors.Is(err, ErrUnknownDevice) || !strings.Contains(err.Error(), "/dev/spidev9.3") {
		t.Errorf("error %v", err)
	}
	info, err := Lookup("spidev9.3")
	if err != nil || info.String() != "/dev/spidev9.3 (SPI9.3)" {
		t.Errorf("Lookup = %v, %v", info, err)
	}
}

// TestDevicesFollowTheDeviceNodes: a /dev/spidev node appearing after the
// first hardware call is listed, and one removed is not.
func TestDevicesFollowTheDeviceNodes(t *testing.T) {
	dev := t.TempDir()
	t.Cleanup(periphhost.SetDevDir(dev))
	node := filepath.Join(dev, "spidev3.1")
	if err := os.WriteFile(node, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	devs, err := Devices()
	if err != nil || len(devs) != 1 || devs[0].String() != "/dev/spidev3.1 (SPI3.1)" {
		t.Fatalf("Devices() = %+v, %v", devs, err)
	}
	if err := os.Remove(node); err != nil {
		t.Fatal(err)
	}
	if devs, err := Devices(); !errors.Is(err, ErrNoDevice) {
		t.Errorf("after removal: Devices() = %+v, %v", devs, err)
	}
}
