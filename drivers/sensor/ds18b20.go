package sensor

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
)

// DefaultW1Dir is where the kernel's w1 driver lists 1-wire devices.
const DefaultW1Dir = "/sys/bus/w1/devices"

// errNoW1 says how to turn 1-wire on; a Pi needs the w1-gpio overlay.
var errNoW1 = errors.New("1-wire is not enabled: add dtoverlay=w1-gpio to /boot/firmware/config.txt " +
	"(data on GPIO4, with a 4.7 kΩ pull-up to 3.3 V) and reboot")

// ds18b20Family is the 1-wire family code of the DS18B20.
const ds18b20Family = "28-"

// w1Devices lists the DS18B20 ids present under dir.
func w1Devices(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return nil, errNoW1
		}
		return nil, err
	}
	var ids []string
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), ds18b20Family) {
			ids = append(ids, e.Name())
		}
	}
	sort.Strings(ids)
	return ids, nil
}

// w1Device resolves which DS18B20 a spec means: its device id, or the only
// one present.
func w1Device(dir, id string) (string, error) {
	ids, err := w1Devices(dir)
	if err != nil {
		return "", err
	}
	if id != "" {
		for _, have := range ids {
			if have == id {
				return id, nil
			}
		}
		if len(ids) == 0 {
			return "", fmt.Errorf("ds18b20 %s not found and no other DS18B20 answers: check the wiring and the pull-up", id)
		}
		return "", fmt.Errorf("ds18b20 %s not found; present: %s", id, strings.Join(ids, ", "))
	}
	switch len(ids) {
	case 0:
		return "", errors.New("no DS18B20 found on the 1-wire bus: check the wiring and the 4.7 kΩ pull-up")
	case 1:
		return ids[0], nil
	}
	return "", fmt.Errorf("several DS18B20 are present (%s); set device in the sensor's config to the one meant",
		strings.Join(ids, ", "))
}

// readDS18B20 reads dir/id/w1_slave, which makes the kernel run a
// conversion (up to 750 ms) and print two lines:
//
//	72 01 4b 46 7f ff 0e 10 57 : crc=57 YES
//	72 01 4b 46 7f ff 0e 10 57 t=23125
func readDS18B20(dir, id string) ([]Value, error) {
	f, err := os.Open(filepath.Join(dir, id, "w1_slave"))
	if err != nil {
		return nil, fmt.Errorf("ds18b20 %s: %w", id, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, 4096))
	if err != nil {
		return nil, fmt.Errorf("ds18b20 %s: %w", id, err)
	}
	milli, err := parseW1Slave(string(b))
	if err != nil {
		return nil, fmt.Errorf("ds18b20 %s: %w", id, err)
	}
	return []Value{{Quantity: Temperature, Value: round(float64(milli)/1000, 2), Unit: "°C"}}, nil
}

func parseW1Slave(s string) (int, error) {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) < 2 {
		return 0, fmt.Errorf("unexpected w1_slave content %q", s)
	}
	pad, havePad := scratchpad(lines[0])
	if havePad {
		if err := checkScratchpad(pad); err != nil {
			return 0, err
		}
	}
	if !strings.HasSuffix(strings.TrimSpace(lines[0]), "YES") {
		return 0, errors.New("checksum mismatch: the reading was corrupted on the wire; check wiring and the pull-up")
	}
	_, t, ok := strings.Cut(lines[1], "t=")
	if !ok {
		return 0, fmt.Errorf("no temperature in w1_slave line %q", lines[1])
	}
	milli, err := strconv.Atoi(strings.TrimSpace(t))
	if err != nil {
		return 0, fmt.Errorf("bad temperature %q in w1_slave", t)
	}
	// 85 °C is also a real temperature (a hot-water tank, a solar
	// collector); only the scratchpad's reset contents say no conversion
	// ran. TH, TL and the configuration come from EEPROM, which the owner
	// may have changed, so only the other bytes are compared.
	if milli == 85000 && (!havePad || pad[0] == 0x50 && pad[1] == 0x05 && pad[6] == 0x0c && pad[7] == 0x10) {
		return 0, errors.New("read 85 °C, the power-on value: the conversion did not run; " +
			"check the supply (parasite power needs a strong pull-up)")
	}
	return milli, nil
}

// scratchpad parses the nine bytes the kernel prints before " : crc=".
func scratchpad(line string) ([9]byte, bool) {
	var pad [9]byte
	hex, _, _ := strings.Cut(line, ":")
	f := strings.Fields(hex)
	if len(f) != len(pad) {
		return pad, false
	}
	for i, x := range f {
		v, err := strconv.ParseUint(x, 16, 8)
		if err != nil {
			return pad, false
		}
		pad[i] = byte(v)
	}
	return pad, true
}

// checkScratchpad refuses what no DS18B20 sends. The 1-wire CRC of nine
// zero bytes is zero, so a sensor that lost its supply, or a data line held
// low, passes the kernel's check as 0.000 °C; all 0xff is a line that floats
// high. Byte 4's low five bits always read 1 and byte 5 reads 0xff.
func checkScratchpad(pad [9]byte) error {
	all := func(b byte) bool {
		for _, x := range pad {
			if x != b {
				return false
			}
		}
		return true
	}
	switch {
	case all(0x00):
		return errors.New("the scratchpad read all zeros: the sensor did not answer (no supply, or the data line held low); " +
			"check its VDD and ground, the data line and the 4.7 kΩ pull-up")
	case all(0xff):
		return errors.New("the scratchpad read all 0xff: nothing drove the data line; check the sensor is connected and powered")
	case pad[4]&0x1f != 0x1f || pad[5] != 0xff:
		return fmt.Errorf("the scratchpad's fixed bits are wrong (byte 4 %#02x, byte 5 %#02x): the reading was corrupted "+
			"or the part is not a DS18B20; check the wiring and the pull-up", pad[4], pad[5])
	}
	return nil
}
