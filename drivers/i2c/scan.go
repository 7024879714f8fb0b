package i2c

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"periph.io/x/conn/v3/i2c"
)

// Probe is the SMBus command used to ask whether a device is at an address.
type Probe int

const (
	// ProbeQuick is an SMBus quick write: the address with the write bit and
	// no data. Harmless to most chips, but it can corrupt some EEPROMs.
	ProbeQuick Probe = iota
	// ProbeRead is an SMBus receive byte. Harmless to EEPROMs, but it can
	// lock up some write-only chips.
	ProbeRead
)

func (p Probe) String() string {
	if p == ProbeRead {
		return "read byte"
	}
	return "quick write"
}

// ProbeFor returns the probe i2cdetect uses by default for addr: read byte
// where EEPROMs and similar memories live (0x30-0x37, 0x50-0x5F), quick write
// elsewhere.
func ProbeFor(addr int) Probe {
	if (addr >= 0x30 && addr <= 0x37) || (addr >= 0x50 && addr <= 0x5F) {
		return ProbeRead
	}
	return ProbeQuick
}

// ScanResult is what a scan found on one bus.
type ScanResult struct {
	Bus BusInfo `json:"bus"`
	// Found lists the addresses that acknowledged.
	Found []int `json:"found"`
	// Busy lists the addresses a kernel driver has claimed ("UU"): a device
	// is there, owned by the kernel.
	Busy []int `json:"busy,omitempty"`
	// Drivers names the kernel driver of each Busy address sysfs names one
	// for (JSON keys are the addresses in decimal).
	Drivers map[int]string `json:"drivers,omitempty"`
	// DriverBus is, for a Busy address whose device is declared on another
	// bus that a multiplexer joins to this one, that bus's number.
	DriverBus map[int]int `json:"driver_bus,omitempty"`
	// Skipped lists the addresses not probed because the adapter cannot do
	// the command that is safe there.
	Skipped []int `json:"skipped,omitempty"`
	// Method says how the addresses were probed.
	Method string `json:"method"`
}

// UnbindCommand is the shell command that detaches the driver of Busy
// address addr from its device, on this bus or the one DriverBus names.
func (r ScanResult) UnbindCommand(addr int) string {
	bus := r.Bus.Number
	if on, ok := r.DriverBus[addr]; ok {
		bus = on
	}
	return unbindCommand(bus, addr, r.Drivers[addr])
}

// prober sends the probes of one scan.
type prober interface {
	// probeFor returns how addr is probed, or false to skip it.
	probeFor(addr int) (Probe, bool)
	// probe returns nil when a device acknowledged and ErrBusy when a kernel
	// driver owns the address; any other error means nothing answered,
	// unless it wraps errAbort.
	probe(addr int, p Probe) error
	method() string
	close() error
}

// errAbort marks a probe failure that is not "nothing there" but a broken
// bus, ending the scan as i2cdetect does.
var errAbort = errors.New("scan aborted")

// Scan probes every address from MinAddr to MaxAddr as i2cdetect does (see
// the package documentation) and returns what answered.
func (b *Bus) Scan(ctx context.Context) (ScanResult, error) {
	var p prober
	if b.dev != "" {
		kp, err := openSMBus(b.dev)
		if err != nil {
			return ScanResult{}, fmt.Errorf("i2c: scan bus %s: %w", b.info, err)
		}
		p = kp
	} else {
		p = txProber{b.bus}
	}
	defer p.close()
	owner, err := b.info.scanOwner()
	if err != nil {
		return ScanResult{Bus: b.info}, fmt.Errorf("i2c: scan bus %s: %w", b.info, err)
	}
	res, err := scan(ctx, p, b.info.Number, owner)
	res.Bus = b.info
	if err != nil {
		return res, fmt.Errorf("i2c: scan bus %s: %w", b.info, err)
	}
	return res, nil
}

// scanOwner is BusInfo.Owner for the addresses of one scan: the buses a
// multiplexer joins to this one are looked up once.
func (b BusInfo) scanOwner() (func(addr int) (string, int, error), error) {
	if b.Number < 0 {
		return b.Owner, nil
	}
	buses, err := muxRelatives(b.Number)
	if err != nil {
		return nil, fmt.Errorf("cannot tell which addresses kernel drivers own: %w", err)
	}
	buses = append([]int{b.Number}, buses...)
	return func(addr int) (string, int, error) { return b.ownerAmong(buses, addr) }, nil
}

// scan probes every address of bus but those owner (BusInfo.Owner) names a
// kernel driver for: a probe there, even a quick write, is a transfer in the middle
// of the driver's, and on a bus periph drives through I2C_RDWR nothing else
// would keep it off them.
func scan(ctx context.Context, p prober, bus int, owner func(addr int) (string, int, error)) (ScanResult, error) {
	res := ScanResult{Found: []int{}, Method: p.method()}
	for addr := MinAddr; addr <= MaxAddr; addr++ {
		if err := ctx.Err(); err != nil {
			return res, err
		}
		drv, on, err := owner(addr)
		if err != nil {
			return res, err
		}
		if drv != "" {
			res.Busy = append(res.Busy, addr)
			if res.Drivers == nil {
				res.Drivers = map[int]string{}
			}
			res.Drivers[addr] = drv
			if on != bus {
				if res.DriverBus == nil {
					res.DriverBus = map[int]int{}
				}
				res.DriverBus[addr] = on
			}
			continue
		}
		how, ok := p.probeFor(addr)
		if !ok {
			res.Skipped = append(res.Skipped, addr)
			continue
		}
		err = p.probe(addr, how)
		switch {
		case err == nil:
			res.Found = append(res.Found, addr)
		case errors.Is(err, ErrBusy):
			res.Busy = append(res.Busy, addr)
		case errors.Is(err, errAbort):
			return res, err
		}
	}
	return res, nil
}

// txProber probes a bus periph drives in user space. periph's Tx cannot send
// a zero-length write (it returns success without touching the bus), so
// every address gets "read byte", like i2cdetect -r.
type txProber struct{ bus i2c.Bus }

func (txProber) probeFor(int) (Probe, bool) { return ProbeRead, true }

func (t txProber) probe(addr int, _ Probe) error {
	var b [1]byte
	return t.bus.Tx(uint16(addr), nil, b[:])
}

func (txProber) method() string { return "read byte at every address (bus driven in user space)" }
func (txProber) close() error   { return nil }

// FormatScan draws the result as i2cdetect's table: "--" nothing, "UU" kernel
// driver, the address where a device answered, blank where not probed.
func FormatScan(r ScanResult) string {
	state := map[int]string{}
	for _, a := range r.Found {
		state[a] = fmt.Sprintf("%02x", a)
	}
	for _, a := range r.Busy {
		state[a] = "UU"
	}
	for _, a := range r.Skipped {
		state[a] = "  "
	}
	lines := []string{"     0  1  2  3  4  5  6  7  8  9  a  b  c  d  e  f"}
	for row := 0; row < 0x80; row += 0x10 {
		line := fmt.Sprintf("%02x:", row)
		for col := 0; col < 0x10; col++ {
			a := row + col
			cell := "  "
			if a >= MinAddr && a <= MaxAddr {
				cell = "--"
				if s, ok := state[a]; ok {
					cell = s
				}
			}
			line += " " + cell
		}
		lines = append(lines, strings.TrimRight(line, " "))
	}
	return strings.Join(lines, "\n")
}
