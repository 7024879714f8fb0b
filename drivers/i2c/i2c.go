package i2c

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"periph.io/x/conn/v3/i2c"
	"periph.io/x/conn/v3/i2c/i2creg"

	"github.com/perchhq/perch/drivers/internal/periphhost"
)

// Limits of the arguments every operation checks.
const (
	// MinAddr and MaxAddr bound the 7-bit addresses a device may use; the
	// ones outside are reserved by the I²C specification.
	MinAddr = 0x03
	MaxAddr = 0x77
	// MaxLength caps one read or write. Sensors move a few bytes; 256 covers
	// an EEPROM page or a display line without letting a model request
	// megabytes.
	MaxLength = 256
)

// BusInfo describes one bus.
type BusInfo struct {
	// Name is periph's name for the bus, e.g. "/dev/i2c-1".
	Name string `json:"name"`
	// Number is the bus number, or -1 for buses without one (USB adapters).
	Number int `json:"number"`
	// Aliases are other names the bus answers to, e.g. "I2C1".
	Aliases []string `json:"aliases,omitempty"`
	// Header says the bus is wired to the board's pin header (the device
	// tree says so; see headerBus): the default when no bus is named.
	Header bool `json:"header,omitempty"`
}

// String returns "1 (/dev/i2c-1)" or the name alone for unnumbered buses.
func (b BusInfo) String() string {
	if b.Number < 0 {
		return b.Name
	}
	return strconv.Itoa(b.Number) + " (" + b.Name + ")"
}

// Buses lists the buses present: the pin header's first where the device
// tree names it (see headerBus), then by number. It returns ErrNoBus when
// there is none.
func Buses() ([]BusInfo, error) {
	refs, err := refs()
	if err != nil {
		return nil, err
	}
	h := headerBus()
	out := make([]BusInfo, len(refs))
	for i, r := range refs {
		out[i] = infoOf(r, h)
	}
	return out, nil
}

// Lookup returns the bus called name without opening it: "" is the pin
// header's bus where the device tree names it, else the lowest-numbered, and
// a number, an alias or a device path name one. Errors: ErrNoBus,
// ErrUnknownBus.
func Lookup(name string) (BusInfo, error) {
	r, err := lookup(name)
	if err != nil {
		return BusInfo{}, err
	}
	return infoOf(r, headerBus()), nil
}

// infoOf describes r, given the number of the header's bus (or -1).
func infoOf(r *i2creg.Ref, header int) BusInfo {
	return BusInfo{Name: r.Name, Number: r.Number, Aliases: r.Aliases, Header: header >= 0 && r.Number == header}
}

// refs loads the drivers once, brings the registry in line with the
// /dev/i2c-* present now (an adapter plugged in or out since), and returns
// the registered buses, the header's first, then by number.
func refs() ([]*i2creg.Ref, error) {
	initErr := periphhost.Init()
	periphhost.SyncI2C()
	all := i2creg.All()
	if len(all) == 0 {
		if initErr != nil {
			return nil, fmt.Errorf("%w (driver error: %v)", ErrNoBus, initErr)
		}
		return nil, ErrNoBus
	}
	sort.SliceStable(all, func(i, j int) bool {
		// Numbered buses first, in order, as i2creg.Open("") picks them.
		ni, nj := all[i].Number, all[j].Number
		if (ni < 0) != (nj < 0) {
			return ni >= 0
		}
		return ni < nj
	})
	// The header's bus first: it is what "" means, and what a person
	// wiring a sensor to the pins means by "the" bus.
	if h := headerBus(); h >= 0 {
		for i, r := range all {
			if r.Number == h {
				copy(all[1:i+1], all[:i])
				all[0] = r
				break
			}
		}
	}
	return all, nil
}

func lookup(name string) (*i2creg.Ref, error) {
	all, err := refs()
	if err == nil {
		var r *i2creg.Ref
		r, err = periphhost.Lookup(all, name, "buses",
			func(r *i2creg.Ref) periphhost.Ref {
				return periphhost.Ref{Name: r.Name, Aliases: r.Aliases, Number: r.Number}
			},
			func(r *i2creg.Ref) string { return BusInfo{Name: r.Name, Number: r.Number}.String() },
			normalize, ErrUnknownBus)
		if err == nil {
			return r, nil
		}
	}
	// A bus that was here and went is an unplugged adapter: "enable I2C
	// with raspi-config" would send the user the wrong way.
	if n, convErr := strconv.Atoi(normalize(name)); convErr == nil && periphhost.GoneI2C(n) {
		return nil, fmt.Errorf("%w %q: /dev/i2c-%d is gone: its adapter was unplugged or its driver unloaded; "+
			"plug it back in (the kernel may give it another number: detect lists the buses present)", ErrUnknownBus, strings.TrimSpace(name), n)
	}
	return nil, err
}

// normalize maps the spellings people use for a kernel bus ("I2C1", "i2c-1",
// "/dev/i2c-1", "1") to one form.
func normalize(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	s = strings.TrimPrefix(s, "/dev/")
	if rest, ok := strings.CutPrefix(s, "i2c-"); ok {
		return rest
	}
	if rest, ok := strings.CutPrefix(s, "i2c"); ok {
		if _, err := strconv.Atoi(rest); err == nil {
			return rest
		}
	}
	return s
}

// Bus is an open bus. It is safe for concurrent use, though a multi-step
// exchange with one device needs the caller's own lock.
type Bus struct {
	info BusInfo
	bus  i2c.BusCloser
	// dev is the kernel device node ("/dev/i2c-1") when the bus is one; Scan
	// then probes through it with SMBus ioctls.
	dev string
}

// Open opens the bus called name (see Lookup). Close it when done.
func Open(name string) (*Bus, error) {
	r, err := lookup(name)
	if err != nil {
		return nil, err
	}
	b, err := r.Open()
	if err != nil {
		return nil, fmt.Errorf("i2c: open bus %s: %w", BusInfo{Name: r.Name, Number: r.Number}, err)
	}
	bus := &Bus{info: infoOf(r, headerBus()), bus: b}
	if strings.HasPrefix(r.Name, "/dev/i2c-") {
		bus.dev = r.Name
	}
	return bus, nil
}

// Info describes the bus.
func (b *Bus) Info() BusInfo { return b.info }

// Periph returns the bus for periph's device drivers. Like Read and Write it
// refuses any transfer to an address a kernel driver owns (a DriverError).
func (b *Bus) Periph() i2c.Bus { return guardedBus{b.bus, b.info} }

// Close releases the bus.
func (b *Bus) Close() error { return b.bus.Close() }

// CheckAddress reports whether addr is a usable 7-bit device address.
func CheckAddress(addr int) error {
	if addr < MinAddr || addr > MaxAddr {
		return fmt.Errorf("%w: address 0x%02x (%d) is outside 0x03-0x77; "+
			"give the 7-bit address i2cdetect shows, e.g. 0x76 (118)", ErrInvalid, addr, addr)
	}
	return nil
}

// CheckRegister reports whether reg fits the one-byte register index sent
// before a read or write.
func CheckRegister(reg int) error {
	if reg < 0 || reg > 0xFF {
		return fmt.Errorf("%w: register %d is outside 0-255 (0x00-0xff)", ErrInvalid, reg)
	}
	return nil
}

// CheckLength reports whether n bytes may be read in one operation.
func CheckLength(n int) error {
	if n < 1 || n > MaxLength {
		return fmt.Errorf("%w: length %d is outside 1-%d", ErrInvalid, n, MaxLength)
	}
	return nil
}

// Bytes converts integer values (as a model sends them) to bytes, refusing
// any outside 0-255 and more than MaxLength of them.
func Bytes(vals []int64) ([]byte, error) {
	b, err := periphhost.Bytes(vals, MaxLength)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrInvalid, err)
	}
	return b, nil
}

// Read reads n bytes from the device at addr.
//
// Read, ReadRegister, Write and WriteRegister refuse an address a kernel
// driver owns with a DriverError, before anything goes on the wire.
func (b *Bus) Read(addr, n int) ([]byte, error) {
	if err := CheckAddress(addr); err != nil {
		return nil, err
	}
	if err := CheckLength(n); err != nil {
		return nil, err
	}
	r := make([]byte, n)
	if err := b.tx("read", addr, nil, r); err != nil {
		return nil, err
	}
	return r, nil
}

// ReadRegister writes the register index reg, then reads n bytes, in one
// transaction (a repeated start, as most sensors expect).
func (b *Bus) ReadRegister(addr, reg, n int) ([]byte, error) {
	if err := CheckAddress(addr); err != nil {
		return nil, err
	}
	if err := CheckRegister(reg); err != nil {
		return nil, err
	}
	if err := CheckLength(n); err != nil {
		return nil, err
	}
	r := make([]byte, n)
	if err := b.tx("read", addr, []byte{byte(reg)}, r); err != nil {
		return nil, err
	}
	return r, nil
}

// Write writes data to the device at addr.
func (b *Bus) Write(addr int, data []byte) error {
	if err := CheckAddress(addr); err != nil {
		return err
	}
	if len(data) == 0 || len(data) > MaxLength {
		return fmt.Errorf("%w: %d data bytes; give 1-%d", ErrInvalid, len(data), MaxLength)
	}
	return b.tx("write", addr, data, nil)
}

// WriteRegister writes the register index reg followed by data (which may be
// empty: some devices take a bare command byte).
func (b *Bus) WriteRegister(addr, reg int, data []byte) error {
	if err := CheckRegister(reg); err != nil {
		return err
	}
	if len(data) >= MaxLength {
		return fmt.Errorf("%w: %d data bytes after the register; at most %d", ErrInvalid, len(data), MaxLength-1)
	}
	return b.Write(addr, append([]byte{byte(reg)}, data...))
}

// tx is every transfer Read and Write make: refused before the wire when a
// kernel driver owns addr (see CheckFree).
func (b *Bus) tx(op string, addr int, w, r []byte) error {
	if err := b.info.CheckFree(op, addr); err != nil {
		return err
	}
	if err := b.bus.Tx(uint16(addr), w, r); err != nil {
		return b.wrap(op, addr, err)
	}
	return nil
}

func (b *Bus) wrap(op string, addr int, err error) error {
	hint := ""
	if NoAck(err) {
		hint = "; no device acknowledged: check the wiring and the address (scan lists what answers)"
	}
	return fmt.Errorf("i2c: %s 0x%02x on bus %s: %w%s", op, addr, b.info, err, hint)
}

// NoAck reports whether err is the kernel's answer when no device
// acknowledged its address (ENXIO or EREMOTEIO): unplugged, miswired, or
// another address. periph passes only the text on, through drivers that
// format it with %v.
func NoAck(err error) bool {
	msg := err.Error()
	return strings.Contains(msg, "remote I/O error") || strings.Contains(msg, "no such device or address")
}
