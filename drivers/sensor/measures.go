package sensor

// Measure is a quantity a part reports, with its unit.
type Measure struct {
	Quantity string `json:"quantity"`
	Unit     string `json:"unit"`
}

// measures lists, per part type, what a reading holds, in reading order.
var measures = map[string][]Measure{
	"bme280":  {{Temperature, "°C"}, {Pressure, "hPa"}, {Humidity, "%"}},
	"bmp280":  {{Temperature, "°C"}, {Pressure, "hPa"}},
	"sht3x":   {{Temperature, "°C"}, {Humidity, "%"}},
	"bh1750":  {{Illuminance, "lx"}},
	"ds18b20": {{Temperature, "°C"}},
}

// Measures returns what a part type reports, so a consumer (Home Assistant
// discovery) can announce a sensor before its first reading. A bme280 entry
// whose board turns out to carry a BMP280 reads no humidity. Nil for an
// unknown type.
func Measures(typ string) []Measure {
	return append([]Measure(nil), measures[typ]...)
}
