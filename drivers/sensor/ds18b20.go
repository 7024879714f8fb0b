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
	return []Value{{Temperature, round(float64(milli)/1000, 2), "°C"}}, nil
}

func parseW1Slave(s string) (int, error) {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) < 2 {
		return 0, fmt.Errorf("unexpected w1_slave content %q", s)
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
	if milli == 85000 {
		// The scratchpad's power-on value: the conversion did not run.
		return 0, errors.New("read 85 °C, the power-on value: the conversion did not run; " +
			"check the supply (parasite power needs a strong pull-up)")
	}
	return milli, nil
}
