package tools

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/perchhq/perch/drivers/i2c"
	"github.com/perchhq/perch/drivers/sensor"
	"github.com/perchhq/perch/drivers/spi"
	"github.com/perchhq/perch/drivers/usb"
	"github.com/perchhq/perch/store"
)

// NewHardware returns the i2c, spi and sensor tools on Linux and nil
// elsewhere. They are offered even on a board without buses, so the model
// can tell the user how to enable one. sensors may be nil (none configured).
//
// history, when not nil, gives the sensor tool its history action; loc is
// the zone its times are shown in (nil: the system's).
func NewHardware(sensors *sensor.Set, history SensorHistory, loc *time.Location) []Tool {
	if runtime.GOOS != "linux" {
		return nil
	}
	return []Tool{NewI2C(), NewSPI(), NewSensor(sensors, history, loc)}
}

// NewI2C returns the i2c tool: detect buses, scan one, read and
// write bytes. Writes need confirm: true.
func NewI2C() Tool {
	return Func{
		ToolName: "i2c",
		ToolDescription: "Talk to I2C devices on the board's bus. Actions: detect lists the buses; scan lists the " +
			"addresses that answer and the parts usually found there; read reads bytes from a device, optionally " +
			"from a register; write writes bytes and needs confirm true, because it can change a device's settings " +
			"or stored data: ask the user first. A read with a register first writes the register byte to the " +
			"device, which some devices take as a command: on an output expander (PCF8574 relay or LCD boards at " +
			"0x20-0x27) it sets every output, so read those without a register. An address a kernel driver owns " +
			"(UU in a scan) is refused, reads included: the error says how to proceed. For configured sensors prefer " +
			"the sensor tool, which gives values with units.",
		Params: Object(map[string]*Property{
			"action": String("What to do.", "detect", "scan", "read", "write"),
			"bus": String("Bus number or name, such as \"1\" (the Raspberry Pi's header pins) or one detect lists. " +
				"Default: the bus on the board's pin header (where the device tree names it), else the first."),
			"address": Integer("7-bit device address, 3 to 119 (0x03 to 0x77), as scan shows it. Required for read and write.",
				Bound(i2c.MinAddr), Bound(i2c.MaxAddr)),
			"register": Integer("Register index (0 to 255), sent as one byte before reading or writing.", Bound(0), Bound(255)),
			"data":     Array("Bytes to write, 0 to 255 each.", Integer("A byte.", Bound(0), Bound(255))),
			"length": Integer(fmt.Sprintf("Number of bytes to read, 1 to %d. Default 1.", i2c.MaxLength),
				Bound(1), Bound(i2c.MaxLength)),
			"confirm": Boolean("Must be true for write, after the user agreed to it."),
		}, "action"),
		Run: runI2C,
		// The register byte of a read goes on the wire as a write, which a
		// relay board takes as its outputs' new state.
		MutatingCall: func(_ context.Context, a Args) bool {
			return a.String("action") == "write" || a.String("action") == "read" && a.Has("register")
		},
	}
}

func runI2C(ctx context.Context, args Args) Result {
	action := args.String("action")
	bus := strings.TrimSpace(args.String("bus"))
	switch action {
	case "detect":
		buses, err := i2c.Buses()
		if err != nil {
			return Error(err)
		}
		lines := []string{fmt.Sprintf("I2C buses (%d):", len(buses))}
		for _, b := range buses {
			line := "- " + b.String()
			if len(b.Aliases) > 0 {
				line += ", also called " + strings.Join(b.Aliases, ", ")
			}
			if b.Header {
				line += "; on the board's pin header (the default bus)"
			}
			lines = append(lines, line)
		}
		return Text(strings.Join(lines, "\n"))
	case "scan":
		b, err := i2c.Open(bus)
		if err != nil {
			return Error(err)
		}
		defer b.Close()
		res, err := b.Scan(ctx)
		if err != nil {
			return Error(err)
		}
		return Text(ScanReport(res))
	case "read", "write":
		// Everything is checked before the bus is opened.
		if !args.Has("address") {
			return Errorf("i2c %s: address is required: give the 7-bit device address (scan lists them)", action)
		}
		addr := int(args.Int("address", 0))
		if err := i2c.CheckAddress(addr); err != nil {
			return Error(err)
		}
		reg := -1
		if args.Has("register") {
			reg = int(args.Int("register", 0))
			if err := i2c.CheckRegister(reg); err != nil {
				return Error(err)
			}
		}
		if action == "read" {
			n := int(args.Int("length", 1))
			if err := i2c.CheckLength(n); err != nil {
				return Error(err)
			}
			return i2cRead(bus, addr, reg, n)
		}
		data, err := i2c.Bytes(args.Ints("data"))
		if err != nil {
			return Error(err)
		}
		if len(data) == 0 && reg < 0 {
			return Errorf("i2c write: nothing to write: give data (bytes 0-255), a register, or both")
		}
		if !args.Bool("confirm") {
			return Errorf("i2c write refused: writing %s to 0x%02x can change the device's settings or stored data; "+
				"ask the user, then call again with confirm true", describeWrite(reg, data), addr)
		}
		return i2cWrite(bus, addr, reg, data)
	}
	return Errorf("i2c: unknown action %q; use detect, scan, read or write", action)
}

func i2cRead(bus string, addr, reg, n int) Result {
	b, err := i2c.Open(bus)
	if err != nil {
		return Error(err)
	}
	defer b.Close()
	var got []byte
	where := fmt.Sprintf("0x%02x", addr)
	if reg >= 0 {
		got, err = b.ReadRegister(addr, reg, n)
		where += fmt.Sprintf(" register 0x%02x", reg)
	} else {
		got, err = b.Read(addr, n)
	}
	if err != nil {
		return Error(err)
	}
	return Text(fmt.Sprintf("Read %d byte%s from %s on bus %s: %s", n, plural(n), where, b.Info(), hexBytes(got)))
}

func i2cWrite(bus string, addr, reg int, data []byte) Result {
	b, err := i2c.Open(bus)
	if err != nil {
		return Error(err)
	}
	defer b.Close()
	if reg >= 0 {
		err = b.WriteRegister(addr, reg, data)
	} else {
		err = b.Write(addr, data)
	}
	if err != nil {
		return Error(err)
	}
	return Text(fmt.Sprintf("Wrote %s to 0x%02x on bus %s.", describeWrite(reg, data), addr, b.Info()))
}

func describeWrite(reg int, data []byte) string {
	s := fmt.Sprintf("%d byte%s", len(data), plural(len(data)))
	if len(data) > 0 {
		s += " (" + hexBytes(data) + ")"
	}
	if reg >= 0 {
		s += fmt.Sprintf(" at register 0x%02x", reg)
	}
	return s
}

// ScanReport is the i2cdetect table plus, for each answer, the parts
// commonly found there.
func ScanReport(r i2c.ScanResult) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "Bus %s, probed with %s:\n%s\n", r.Bus, r.Method, i2c.FormatScan(r))
	if len(r.Found)+len(r.Busy) == 0 {
		sb.WriteString("No device answered. Check the wiring (SDA, SCL, 3.3 V, ground) and that the device is powered.")
		return sb.String()
	}
	readable := false
	describe := func(addr int) string {
		parts := sensor.Suggest(addr)
		if len(parts) == 0 {
			return fmt.Sprintf("0x%02x (%d): unknown part", addr, addr)
		}
		names := make([]string, len(parts))
		for i, p := range parts {
			names[i] = p.String()
			readable = readable || p.Type != ""
		}
		return fmt.Sprintf("0x%02x (%d): likely %s", addr, addr, strings.Join(names, " or "))
	}
	if len(r.Found) > 0 {
		sb.WriteString("Devices:\n")
		for _, a := range r.Found {
			sb.WriteString("- " + describe(a) + "\n")
		}
	}
	if len(r.Busy) > 0 {
		sb.WriteString("In use by a kernel driver (UU), not probed; reads and writes there are refused, " +
			"so use the kernel's interface for the device (an RTC as /dev/rtc0, sensors under /sys/class/hwmon) " +
			"or unbind the driver first:\n")
		for _, a := range r.Busy {
			line := "- " + describe(a)
			if drv := r.Drivers[a]; drv != "" {
				if on, ok := r.DriverBus[a]; ok {
					line += fmt.Sprintf("; kernel driver %s of the device on bus %d, behind a multiplexer on this bus (to unbind it: %s)",
						drv, on, r.UnbindCommand(a))
				} else {
					line += fmt.Sprintf("; kernel driver %s (to unbind it: %s)", drv, r.UnbindCommand(a))
				}
			}
			sb.WriteString(line + "\n")
		}
	}
	if len(r.Skipped) > 0 {
		fmt.Fprintf(&sb, "%d addresses were not probed: the adapter cannot do the safe probe there.\n", len(r.Skipped))
	}
	if readable {
		sb.WriteString("Parts with a type can be read by name once listed under \"sensors\" in the config, e.g. " +
			`{"name": "climate", "type": "bme280", "bus": "1", "address": 118}.`)
	}
	return strings.TrimRight(sb.String(), "\n")
}

// NewSPI returns the spi tool: list devices, full-duplex
// transfer (needs confirm: true), read.
func NewSPI() Tool {
	return Func{
		ToolName: "spi",
		ToolDescription: "Talk to SPI devices. Actions: list shows the SPI devices; transfer sends bytes and returns " +
			"the bytes clocked in at the same time, and needs confirm true because the bytes may be commands that " +
			"change the device: ask the user first; read clocks in bytes while sending zeros.",
		Params: Object(map[string]*Property{
			"action": String("What to do.", "list", "transfer", "read"),
			"device": String("SPI device as bus.chip-select, such as \"0.0\" (/dev/spidev0.0), or a name list shows. " +
				"Default: the first."),
			"speed": withDefault(Integer(fmt.Sprintf("Clock in Hz, %d to %d. Default 1000000 (1 MHz).", spi.MinSpeed, spi.MaxSpeed),
				Bound(spi.MinSpeed), Bound(spi.MaxSpeed)), spi.DefaultSpeed),
			"mode": withDefault(Integer("SPI mode 0 to 3 (clock polarity and phase, from the datasheet). Default 0.",
				Bound(0), Bound(3)), 0),
			"bits": withDefault(Integer("Bits per word, 1 to 32. Default 8.", Bound(1), Bound(spi.MaxBits)), spi.DefaultBits),
			"data": Array("Bytes to send for transfer, 0 to 255 each.", Integer("A byte.", Bound(0), Bound(255))),
			"length": Integer(fmt.Sprintf("Number of bytes to read, 1 to %d.", spi.MaxLength),
				Bound(1), Bound(spi.MaxLength)),
			"confirm": Boolean("Must be true for transfer, after the user agreed to it."),
		}, "action"),
		Run: runSPI,
		// A read clocks zeros out while it clocks bytes in: to an LED strip
		// that is "all off", to many chips a command.
		MutatingCall: func(_ context.Context, a Args) bool {
			return a.String("action") == "transfer" || a.String("action") == "read"
		},
	}
}

func withDefault(p *Property, v int) *Property {
	p.Default = v
	return p
}

func runSPI(_ context.Context, args Args) Result {
	action := args.String("action")
	device := strings.TrimSpace(args.String("device"))
	switch action {
	case "list":
		devs, err := spi.Devices()
		if err != nil {
			return Error(err)
		}
		lines := []string{fmt.Sprintf("SPI devices (%d):", len(devs))}
		for _, d := range devs {
			lines = append(lines, "- "+d.String())
		}
		return Text(strings.Join(lines, "\n"))
	case "transfer", "read":
		// Everything is checked before the device is opened.
		cfg := spi.Config{
			Speed: args.Int("speed", spi.DefaultSpeed),
			Mode:  int(args.Int("mode", 0)),
			Bits:  int(args.Int("bits", spi.DefaultBits)),
		}
		if err := cfg.Validate(); err != nil {
			return Error(err)
		}
		cfg = cfg.WithDefaults()
		params := fmt.Sprintf("%d Hz, mode %d, %d bits", cfg.Speed, cfg.Mode, cfg.Bits)
		if action == "read" {
			if !args.Has("length") {
				return Errorf("spi read: length is required: give the number of bytes to read (1-%d)", spi.MaxLength)
			}
			n := int(args.Int("length", 0))
			if err := cfg.CheckLength(n); err != nil {
				return Error(err)
			}
			got, err := spi.Read(device, cfg, n)
			if err != nil {
				return Error(err)
			}
			return Text(fmt.Sprintf("Read %d byte%s (%s): %s", n, plural(n), params, hexBytes(got)))
		}
		data, err := spi.Bytes(args.Ints("data"))
		if err != nil {
			return Error(err)
		}
		if err := cfg.CheckLength(len(data)); err != nil {
			return Errorf("spi transfer: data: %v", err)
		}
		if !args.Bool("confirm") {
			return Errorf("spi transfer refused: sending %d byte%s (%s) may be commands that change the device; "+
				"ask the user, then call again with confirm true", len(data), plural(len(data)), hexBytes(data))
		}
		got, err := spi.Transfer(device, cfg, data)
		if err != nil {
			return Error(err)
		}
		return Text(fmt.Sprintf("Sent %s, received %s (%s).", hexBytes(data), hexBytes(got), params))
	}
	return Errorf("spi: unknown action %q; use list, transfer or read", action)
}

// NewSensor returns the sensor tool: the configured sensors by name, with
// units, and their history when history is not nil. sensors may be nil
// (none configured); loc is the zone of the times it shows (nil: the
// system's).
func NewSensor(sensors *sensor.Set, history SensorHistory, loc *time.Location) Tool {
	if sensors == nil {
		sensors, _ = sensor.NewSet(nil, sensor.Options{})
	}
	if loc == nil {
		loc = time.Local
	}
	return Func{
		ToolName: "sensor",
		ToolDescription: "Read the configured sensors (temperature, humidity, pressure, light) with units. " +
			"Actions: list shows each sensor, where it is connected and whether its bus is present; read measures " +
			"one sensor by name, or all of them when name is omitted; history summarises what a sensor measured " +
			"over a time range (lowest, highest, mean, and a value per step), from readings sampled every few " +
			"minutes and kept for a year (full detail for 48 hours, hourly before), e.g. for \"how cold did it get " +
			"last night?\" use since \"18h\" or an RFC 3339 time.",
		Params: Object(map[string]*Property{
			"action": String("What to do.", "list", "read", "history"),
			"name":   String("Sensor name, as list shows it. Omit to read every sensor; required for history."),
			"since": String("history: start of the range, an RFC 3339 time (2026-03-01T18:00:00+01:00) or a span " +
				"back from now (12h, 7d, 1y). Default 24h."),
			"until": String("history: end of the range, same forms. Default now."),
			"step": String("history: width of each point (30m, 1h, 1d). Default: one giving at most " +
				strconv.Itoa(maxHistoryRows) + " points."),
		}, "action"),
		Run: func(ctx context.Context, args Args) Result { return runSensor(ctx, sensors, history, loc, args) },
	}
}

// SensorHistory is the store's sensor history (*store.DB).
type SensorHistory interface {
	SensorHistory(q store.SensorQuery) ([]store.SensorSeries, error)
}

// noSensors explains how to configure one.
const noSensors = "No sensors are configured. List them under \"sensors\" in the config, e.g. " +
	`[{"name": "climate", "type": "bme280", "bus": "1", "address": 118}]` +
	"; types: bme280, bmp280, sht3x, bh1750, ds18b20. The i2c tool's scan shows which addresses answer."

func runSensor(ctx context.Context, set *sensor.Set, history SensorHistory, loc *time.Location, args Args) Result {
	switch args.String("action") {
	case "list":
		if set.Len() == 0 {
			return Text(noSensors)
		}
		lines := []string{fmt.Sprintf("Sensors (%d):", set.Len())}
		for _, st := range set.Status() {
			state := "ready"
			if !st.OK {
				state = "unavailable"
			}
			lines = append(lines, fmt.Sprintf("- %s: %s, %s; %s: %s", st.Name, sensor.Description(st.Type), st.Where, state, st.Message))
		}
		return Text(strings.Join(lines, "\n"))
	case "read":
		if set.Len() == 0 {
			return Text(noSensors)
		}
		if name := strings.TrimSpace(args.String("name")); name != "" {
			r, err := set.Read(ctx, name)
			if err != nil {
				return Error(err)
			}
			return Text(r.String())
		}
		return Text(readingsText(set.ReadAll(ctx)))
	case "history":
		return sensorHistory(set, history, loc, args, time.Now())
	}
	return Errorf("sensor: unknown action %q; use list, read or history", args.String("action"))
}

func readingsText(rs []sensor.Reading) string {
	lines := make([]string, len(rs))
	for i, r := range rs {
		lines[i] = "- " + r.String()
	}
	return strings.Join(lines, "\n")
}

// SensorsReport is the answer to the offline /sensors command: every
// configured sensor read now, or how to configure one.
func SensorsReport(ctx context.Context, sensors *sensor.Set) string {
	if sensors == nil || sensors.Len() == 0 {
		return noSensors
	}
	return "Sensors:\n" + readingsText(sensors.ReadAll(ctx))
}

// DevicesReport is the answer to the offline /devices command: the USB
// devices connected (from the device service), what the service monitors,
// and the I²C buses and SPI devices present.
func DevicesReport(devices []usb.Device, monitoring string) string {
	var sb strings.Builder
	if len(devices) == 0 {
		sb.WriteString("USB devices: none")
	} else {
		fmt.Fprintf(&sb, "USB devices (%d):", len(devices))
		for _, d := range devices {
			sb.WriteString("\n- " + d.String())
		}
	}
	if monitoring != "" {
		sb.WriteString("\n(" + monitoring + ")")
	}
	sb.WriteString("\nI2C: ")
	if buses, err := i2c.Buses(); err != nil {
		sb.WriteString(strings.TrimPrefix(err.Error(), "i2c: "))
	} else {
		names := make([]string, len(buses))
		for i, b := range buses {
			names[i] = "bus " + b.String()
		}
		sb.WriteString(strings.Join(names, ", "))
	}
	sb.WriteString("\nSPI: ")
	if devs, err := spi.Devices(); err != nil {
		sb.WriteString(strings.TrimPrefix(err.Error(), "spi: "))
	} else {
		names := make([]string, len(devs))
		for i, d := range devs {
			names[i] = d.Name
		}
		sb.WriteString(strings.Join(names, ", "))
	}
	return sb.String()
}

func hexBytes(b []byte) string {
	if len(b) == 0 {
		return "(none)"
	}
	parts := make([]string, len(b))
	for i, v := range b {
		parts[i] = fmt.Sprintf("0x%02x", v)
	}
	return strings.Join(parts, " ")
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
