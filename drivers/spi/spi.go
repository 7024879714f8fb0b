package spi

import (
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"periph.io/x/conn/v3/physic"
	"periph.io/x/conn/v3/spi"
	"periph.io/x/conn/v3/spi/spireg"

	"github.com/perchhq/perch/drivers/internal/periphhost"
)

// Limits and defaults of Config and of transfer lengths.
const (
	DefaultSpeed = 1_000_000   // Hz
	MinSpeed     = 1_000       // Hz; slower clocks are below what controllers divide to
	MaxSpeed     = 125_000_000 // Hz; the fastest a Raspberry Pi's controller runs
	DefaultBits  = 8
	MaxBits      = 32
	// MaxLength is spidev's default buffer size (its bufsiz parameter): one
	// transfer cannot be longer.
	MaxLength = 4096
)

// Sentinel errors; callers branch on them with errors.Is.
var (
	// ErrNoDevice means the machine has no SPI device at all.
	ErrNoDevice = errors.New("spi: no SPI device found: enable it with raspi-config (Interface Options, SPI) " +
		"or dtparam=spi=on in /boot/firmware/config.txt, then reboot")
	// ErrUnknownDevice means SPI devices exist but none has the requested name.
	ErrUnknownDevice = errors.New("spi: unknown device")
	// ErrInvalid marks an argument out of range.
	ErrInvalid = errors.New("spi: invalid argument")
)

// DeviceInfo describes one SPI device (bus and chip select).
type DeviceInfo struct {
	// Name is periph's name for it, e.g. "/dev/spidev0.0".
	Name string `json:"name"`
	// Number is the bus number for chip select 0, else -1.
	Number int `json:"number"`
	// Aliases are other names it answers to, e.g. "SPI0.0".
	Aliases []string `json:"aliases,omitempty"`
}

// String returns the name and its aliases.
func (d DeviceInfo) String() string {
	if len(d.Aliases) == 0 {
		return d.Name
	}
	return d.Name + " (" + strings.Join(d.Aliases, ", ") + ")"
}

// Devices lists the SPI devices present, sorted by name. It returns
// ErrNoDevice when there is none.
func Devices() ([]DeviceInfo, error) {
	refs, err := refs()
	if err != nil {
		return nil, err
	}
	out := make([]DeviceInfo, len(refs))
	for i, r := range refs {
		out[i] = DeviceInfo{Name: r.Name, Number: r.Number, Aliases: r.Aliases}
	}
	return out, nil
}

// Lookup returns the device called name without opening it. Errors:
// ErrNoDevice, ErrUnknownDevice.
func Lookup(name string) (DeviceInfo, error) {
	r, err := lookup(name)
	if err != nil {
		return DeviceInfo{}, err
	}
	return DeviceInfo{Name: r.Name, Number: r.Number, Aliases: r.Aliases}, nil
}

// refs loads the drivers once, brings the registry in line with the
// /dev/spidev* present now, and returns the registered devices.
func refs() ([]*spireg.Ref, error) {
	initErr := periphhost.Init()
	periphhost.SyncSPI()
	all := spireg.All()
	if len(all) == 0 {
		if initErr != nil {
			return nil, fmt.Errorf("%w (driver error: %v)", ErrNoDevice, initErr)
		}
		return nil, ErrNoDevice
	}
	sort.SliceStable(all, func(i, j int) bool { return all[i].Name < all[j].Name })
	return all, nil
}

func lookup(name string) (*spireg.Ref, error) {
	all, err := refs()
	if err != nil {
		return nil, err
	}
	return periphhost.Lookup(all, name, "devices",
		func(r *spireg.Ref) periphhost.Ref {
			return periphhost.Ref{Name: r.Name, Aliases: r.Aliases, Number: r.Number}
		},
		func(r *spireg.Ref) string { return r.Name },
		normalize, ErrUnknownDevice)
}

// normalize maps "SPI0.0", "spidev0.0", "/dev/spidev0.0" and "0.0" to "0.0".
func normalize(s string) string {
	s = strings.ToLower(strings.TrimSpace(s))
	s = strings.TrimPrefix(s, "/dev/")
	for _, p := range []string{"spidev", "spi"} {
		if rest, ok := strings.CutPrefix(s, p); ok && isBusCS(rest) {
			return rest
		}
	}
	return s
}

func isBusCS(s string) bool {
	b, c, ok := strings.Cut(s, ".")
	if !ok {
		return false
	}
	_, err1 := strconv.Atoi(b)
	_, err2 := strconv.Atoi(c)
	return err1 == nil && err2 == nil
}

// Config holds the connection parameters; zero fields take the defaults.
type Config struct {
	Speed int64 // clock in Hz
	Mode  int   // 0-3: clock polarity (CPOL) and phase (CPHA)
	Bits  int   // bits per word
}

// WithDefaults fills the zero fields.
func (c Config) WithDefaults() Config {
	if c.Speed == 0 {
		c.Speed = DefaultSpeed
	}
	if c.Bits == 0 {
		c.Bits = DefaultBits
	}
	return c
}

// Validate checks every field (after defaults).
func (c Config) Validate() error {
	c = c.WithDefaults()
	if c.Speed < MinSpeed || c.Speed > MaxSpeed {
		return fmt.Errorf("%w: speed %d Hz is outside %d-%d Hz (1 kHz-125 MHz); most devices are fine at the default 1 MHz",
			ErrInvalid, c.Speed, MinSpeed, MaxSpeed)
	}
	if c.Mode < 0 || c.Mode > 3 {
		return fmt.Errorf("%w: mode %d is not 0-3 (CPOL*2 + CPHA; the device's datasheet names it)", ErrInvalid, c.Mode)
	}
	if c.Bits < 1 || c.Bits > MaxBits {
		return fmt.Errorf("%w: bits %d is outside 1-%d; almost every device uses 8", ErrInvalid, c.Bits, MaxBits)
	}
	return nil
}

// wordSize is how many bytes one word takes in spidev's buffers.
func (c Config) wordSize() int {
	switch c = c.WithDefaults(); {
	case c.Bits <= 8:
		return 1
	case c.Bits <= 16:
		return 2
	}
	return 4
}

// CheckLength reports whether n bytes may be transferred with c.
func (c Config) CheckLength(n int) error {
	if n < 1 || n > MaxLength {
		return fmt.Errorf("%w: length %d is outside 1-%d bytes", ErrInvalid, n, MaxLength)
	}
	if w := c.wordSize(); n%w != 0 {
		return fmt.Errorf("%w: %d bytes is not a whole number of %d-bit words (%d bytes each)", ErrInvalid, n, c.WithDefaults().Bits, w)
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

// Transfer sends w to device and returns the len(w) bytes clocked in.
func Transfer(device string, c Config, w []byte) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := c.CheckLength(len(w)); err != nil {
		return nil, err
	}
	r := make([]byte, len(w))
	return r, tx(device, c, w, r)
}

// Read clocks n bytes in while sending zeros.
func Read(device string, c Config, n int) ([]byte, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if err := c.CheckLength(n); err != nil {
		return nil, err
	}
	r := make([]byte, n)
	return r, tx(device, c, nil, r)
}

func tx(device string, c Config, w, r []byte) error {
	c = c.WithDefaults()
	ref, err := lookup(device)
	if err != nil {
		return err
	}
	p, err := ref.Open()
	if err != nil {
		return fmt.Errorf("spi: open %s: %w%s", ref.Name, err, permissionHint(err))
	}
	defer p.Close()
	conn, err := p.Connect(physic.Frequency(c.Speed)*physic.Hertz, spi.Mode(c.Mode), c.Bits)
	if err != nil {
		return fmt.Errorf("spi: configure %s (speed %d Hz, mode %d, %d bits): %w", ref.Name, c.Speed, c.Mode, c.Bits, err)
	}
	if err := conn.Tx(w, r); err != nil {
		return fmt.Errorf("spi: transfer on %s: %w", ref.Name, err)
	}
	return nil
}

func permissionHint(err error) string {
	if strings.Contains(err.Error(), "permission denied") {
		return "; run as root or add the user to group 'spi'"
	}
	return ""
}
