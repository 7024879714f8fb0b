package sensor

// Part is a chip commonly found at an I²C address.
type Part struct {
	// Type is the sensor type to configure when Perch reads the part by name;
	// empty for parts it only recognises.
	Type string `json:"type,omitempty"`
	// Name is the part, e.g. "BME280".
	Name string `json:"name"`
}

// String returns e.g. "BME280 (type bme280)" or "DS3231 RTC".
func (p Part) String() string {
	if p.Type == "" {
		return p.Name
	}
	return p.Name + " (type " + p.Type + ")"
}

// known maps addresses to the parts hobby boards usually carry there, the
// readable ones first. It is a hint, not an identification: several chips
// share addresses.
var known = map[int][]Part{
	0x18: {{Name: "MCP9808 temperature"}},
	0x1d: {{Name: "ADXL345 accelerometer"}},
	0x20: {{Name: "MCP23017/PCF8574 GPIO expander"}},
	0x23: {{Type: "bh1750", Name: "BH1750 light"}},
	0x27: {{Name: "PCF8574 LCD backpack"}, {Name: "MCP23017 GPIO expander"}},
	0x29: {{Name: "VL53L0X distance"}, {Name: "TSL2591 light"}},
	0x38: {{Name: "AHT20 temperature/humidity"}},
	0x39: {{Name: "APDS9960 gesture/light"}, {Name: "TSL2561 light"}},
	0x3c: {{Name: "SSD1306 OLED display"}},
	0x3d: {{Name: "SSD1306 OLED display"}},
	0x3f: {{Name: "PCF8574 LCD backpack"}},
	0x40: {{Name: "INA219 current"}, {Name: "HTU21D/Si7021 humidity"}, {Name: "PCA9685 PWM"}},
	0x44: {{Type: "sht3x", Name: "SHT3x temperature/humidity"}},
	0x45: {{Type: "sht3x", Name: "SHT3x temperature/humidity"}},
	0x48: {{Name: "ADS1115 ADC"}, {Name: "TMP102 temperature"}},
	0x49: {{Name: "ADS1115 ADC"}, {Name: "TMP102 temperature"}},
	0x50: {{Name: "AT24 EEPROM"}},
	0x57: {{Name: "AT24C32 EEPROM (DS3231 module)"}},
	0x58: {{Name: "SGP30 air quality"}},
	0x5a: {{Name: "CCS811 air quality"}, {Name: "MLX90614 IR temperature"}},
	0x5c: {{Type: "bh1750", Name: "BH1750 light (ADDR high)"}},
	0x62: {{Name: "SCD40/SCD41 CO2"}},
	0x68: {{Name: "DS3231/DS1307 RTC"}, {Name: "MPU6050 IMU"}},
	0x69: {{Name: "MPU6050 IMU (AD0 high)"}},
	0x76: {{Type: "bme280", Name: "BME280"}, {Type: "bmp280", Name: "BMP280"}},
	0x77: {{Type: "bme280", Name: "BME280"}, {Type: "bmp280", Name: "BMP280"}, {Name: "BMP180"}},
}

// Suggest returns the parts likely at addr, readable ones first; nil when
// none is known.
func Suggest(addr int) []Part {
	return append([]Part(nil), known[addr]...)
}
