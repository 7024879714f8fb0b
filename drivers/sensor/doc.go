// Package sensor reads common sensor parts by name, with units.
//
// # Concepts
//
// A Spec (one entry of the config's "sensors" list) says which part sits
// where: {name, type, bus, address} for I²C parts, and an optional device id
// for 1-wire ones. Types are lower-case part names:
//
//	bme280   temperature °C, pressure hPa, humidity %   (I²C 0x76/0x77)
//	bmp280   temperature °C, pressure hPa               (I²C 0x76/0x77)
//	sht3x    temperature °C, humidity %                 (I²C 0x44/0x45)
//	bh1750   illuminance lx                             (I²C 0x23/0x5c)
//	ds18b20  temperature °C                             (kernel 1-wire)
//
// A Set holds the validated specs and measures on demand: each Read opens the
// bus, runs one measurement and closes it, so nothing is held open between
// questions and a sensor unplugged and plugged back simply works again. The
// BMx280 and BH1750 drivers are periph.io's (periph.io/x/devices); the SHT3x
// is a single-shot command and two CRC-checked words, written here; the
// DS18B20 is read through the kernel's w1 driver in sysfs, as on a Raspberry
// Pi with dtoverlay=w1-gpio.
//
// Missing hardware never fails construction: NewSet only validates the
// config, and Status reports, without touching the wire, which sensors have
// their bus or device present. Suggest names the parts commonly found at an
// address, for an I²C scan's answer.
package sensor
