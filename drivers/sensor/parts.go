package sensor

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"periph.io/x/conn/v3/i2c"
	"periph.io/x/conn/v3/physic"
	"periph.io/x/devices/v3/bh1750"
	"periph.io/x/devices/v3/bmxx80"
)

// Quantities and their units.
const (
	Temperature = "temperature" // °C
	Pressure    = "pressure"    // hPa
	Humidity    = "humidity"    // % relative humidity
	Illuminance = "illuminance" // lx
)

// part is what Perch knows of one sensor type.
type part struct {
	desc    string
	oneWire bool
	addrs   []int // allowed I²C addresses; the first is the usual one
	// readI2C measures once; chip names the part actually found when the
	// driver can tell (a "bme280" entry may turn out to be a BMP280).
	readI2C func(ctx context.Context, b i2c.Bus, addr int) (vals []Value, chip string, err error)
}

var parts = map[string]part{
	"bme280":  {desc: "Bosch BME280 temperature, pressure and humidity", addrs: []int{0x76, 0x77}, readI2C: readBMx280},
	"bmp280":  {desc: "Bosch BMP280 temperature and pressure", addrs: []int{0x76, 0x77}, readI2C: readBMx280},
	"sht3x":   {desc: "Sensirion SHT30/31/35 temperature and humidity", addrs: []int{0x44, 0x45}, readI2C: readSHT3x},
	"bh1750":  {desc: "Rohm BH1750 ambient light", addrs: []int{0x23, 0x5c}, readI2C: readBH1750},
	"ds18b20": {desc: "Maxim DS18B20 1-wire temperature", oneWire: true},
}

// Types lists the supported part names, sorted.
func Types() []string {
	out := make([]string, 0, len(parts))
	for t := range parts {
		out = append(out, t)
	}
	sort.Strings(out)
	return out
}

// Value is one measured quantity.
type Value struct {
	Quantity string  `json:"quantity"`
	Value    float64 `json:"value"`
	Unit     string  `json:"unit"`
	// AtLeast says the part read its highest value: the quantity is this
	// or more (a light sensor in direct sun).
	AtLeast bool `json:"at_least,omitempty"`
}

// String returns e.g. "temperature 23.72 °C", with the precision the
// parts resolve (whole lux for light).
func (v Value) String() string {
	prec := 2
	switch v.Quantity {
	case Humidity:
		prec = 1
	case Illuminance:
		prec = 0
	}
	if v.AtLeast {
		return fmt.Sprintf("%s at least %.*f %s (the sensor's ceiling: brighter reads the same)", v.Quantity, prec, v.Value, v.Unit)
	}
	return fmt.Sprintf("%s %.*f %s", v.Quantity, prec, v.Value, v.Unit)
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

func readBMx280(_ context.Context, b i2c.Bus, addr int) ([]Value, string, error) {
	dev, err := bmxx80.NewI2C(b, uint16(addr), &bmxx80.DefaultOpts)
	if err != nil {
		return nil, "", err
	}
	var e physic.Env
	if err := dev.Sense(&e); err != nil {
		return nil, "", err
	}
	chip := strings.SplitN(dev.String(), "{", 2)[0] // "BME280{bus(118)}"
	vals := []Value{
		{Quantity: Temperature, Value: round(e.Temperature.Celsius(), 2), Unit: "°C"},
		{Quantity: Pressure, Value: round(float64(e.Pressure)/float64(100*physic.Pascal), 2), Unit: "hPa"},
	}
	if chip == "BME280" {
		vals = append(vals, Value{Quantity: Humidity, Value: round(float64(e.Humidity)/float64(physic.PercentRH), 1), Unit: "%"})
	}
	return vals, chip, nil
}

func readBH1750(_ context.Context, b i2c.Bus, addr int) ([]Value, string, error) {
	dev, err := bh1750.NewI2C(b, uint16(addr))
	if err != nil {
		return nil, "", err
	}
	lux, err := dev.Sense()
	if err != nil {
		return nil, "", err
	}
	v := Value{Quantity: Illuminance, Value: math.Floor(float64(lux) / float64(physic.Lumen)), Unit: "lx"}
	v.AtLeast = v.Value >= bh1750Ceiling
	return []Value{v}, "BH1750", nil
}

// bh1750Ceiling is the highest illuminance the BH1750 reports in the
// high-resolution mode periph's driver uses: 65535 counts / 1.2, whole lux
// as the driver gives it. Direct sunlight (30,000–100,000 lx) reaches it.
const bh1750Ceiling = 54612

// sht3xMeasureTime is the longest a high-repeatability single shot takes
// (datasheet table 4: 15.5 ms).
const sht3xMeasureTime = 16 * time.Millisecond

// readSHT3x runs one single-shot, high-repeatability measurement without
// clock stretching (command 0x2400), waits for it, then reads temperature
// and humidity, each a big-endian word followed by its CRC-8.
func readSHT3x(ctx context.Context, b i2c.Bus, addr int) ([]Value, string, error) {
	d := i2c.Dev{Bus: b, Addr: uint16(addr)}
	if err := d.Tx([]byte{0x24, 0x00}, nil); err != nil {
		return nil, "", fmt.Errorf("sht3x: start measurement: %w", err)
	}
	t := time.NewTimer(sht3xMeasureTime)
	select {
	case <-ctx.Done():
		t.Stop()
		return nil, "", ctx.Err()
	case <-t.C:
	}
	var r [6]byte
	if err := d.Tx(nil, r[:]); err != nil {
		return nil, "", fmt.Errorf("sht3x: read measurement: %w", err)
	}
	if crc8(r[0:2]) != r[2] || crc8(r[3:5]) != r[5] {
		return nil, "", errors.New("sht3x: checksum mismatch: the reading was corrupted on the wire; check wiring and pull-ups")
	}
	rawT := float64(uint16(r[0])<<8 | uint16(r[1]))
	rawH := float64(uint16(r[3])<<8 | uint16(r[4]))
	return []Value{
		{Quantity: Temperature, Value: round(-45+175*rawT/65535, 2), Unit: "°C"},
		{Quantity: Humidity, Value: round(100*rawH/65535, 1), Unit: "%"},
	}, "SHT3x", nil
}

// crc8 is Sensirion's CRC-8: polynomial 0x31, initial value 0xFF.
func crc8(data []byte) byte {
	crc := byte(0xFF)
	for _, b := range data {
		crc ^= b
		for range 8 {
			if crc&0x80 != 0 {
				crc = crc<<1 ^ 0x31
			} else {
				crc <<= 1
			}
		}
	}
	return crc
}

// Description says what a part measures, e.g. "Bosch BME280 temperature,
// pressure and humidity"; "" for an unknown type.
func Description(typ string) string { return parts[typ].desc }
