package sensor

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	periphi2c "periph.io/x/conn/v3/i2c"

	"github.com/perchhq/perch/drivers/i2c"
)

// DefaultReadTimeout bounds one sensor's read. The slowest part, a DS18B20
// at 12 bits, converts in 750 ms; a read still running after this is a part
// that will not finish (a BMx280 whose busy bit never clears).
const DefaultReadTimeout = 2 * time.Second

// Options configure a Set.
type Options struct {
	// W1Dir is where 1-wire devices are listed; empty means DefaultW1Dir.
	W1Dir string
	// ReadTimeout bounds each read (the caller's deadline still applies
	// when sooner); zero means DefaultReadTimeout.
	ReadTimeout time.Duration
}

// Set is the configured sensors. It is safe for concurrent use; reads on
// one bus are serialised, since two of them would interleave their
// transfers, while a sensor on another bus reads meanwhile.
type Set struct {
	specs   []Spec
	w1Dir   string
	timeout time.Duration

	mu    sync.Mutex
	buses map[string]chan struct{} // one per bus, a lock waited for with a context
}

// NewSet validates specs (see ValidateSpecs) and returns the set. It touches
// no hardware: a sensor whose bus is missing is reported by Status and Read,
// never by NewSet, so it cannot stop start-up.
func NewSet(specs []Spec, opts Options) (*Set, error) {
	if err := ValidateSpecs(specs); err != nil {
		return nil, err
	}
	if opts.W1Dir == "" {
		opts.W1Dir = DefaultW1Dir
	}
	if opts.ReadTimeout <= 0 {
		opts.ReadTimeout = DefaultReadTimeout
	}
	return &Set{specs: append([]Spec(nil), specs...), w1Dir: opts.W1Dir, timeout: opts.ReadTimeout,
		buses: map[string]chan struct{}{}}, nil
}

// Specs returns the configured sensors in config order.
func (s *Set) Specs() []Spec { return append([]Spec(nil), s.specs...) }

// Len is the number of configured sensors.
func (s *Set) Len() int { return len(s.specs) }

// Find returns the sensor called name (case-insensitive).
func (s *Set) Find(name string) (Spec, bool) {
	for _, sp := range s.specs {
		if strings.EqualFold(sp.Name, strings.TrimSpace(name)) {
			return sp, true
		}
	}
	return Spec{}, false
}

// Where describes where a sensor sits, e.g. "0x76 on I2C bus 1" or
// "1-wire 28-0316a2795aff".
func (sp Spec) Where() string {
	if parts[sp.Type].oneWire {
		if sp.Device != "" {
			return "1-wire " + sp.Device
		}
		return "1-wire"
	}
	bus := string(sp.Bus)
	if bus == "" {
		bus = "(default)"
	}
	return fmt.Sprintf("%s on I2C bus %s", Address(sp.address()), bus)
}

// Reading is one sensor's measurement, or why there is none.
type Reading struct {
	Name  string `json:"name"`
	Type  string `json:"type"`
	Where string `json:"where"`
	// Chip is the part the driver found, when it can tell ("BMP280").
	Chip   string  `json:"chip,omitempty"`
	Values []Value `json:"values,omitempty"`
	// Error is why there are no values.
	Error string `json:"error,omitempty"`
}

// String returns one line: "kitchen: temperature 23.72 °C, pressure
// 1009.43 hPa, humidity 65.3 %", or "garage (sht3x, 0x44 on I2C bus 1):
// <why not>".
func (r Reading) String() string {
	if r.Error != "" {
		return fmt.Sprintf("%s (%s, %s): %s", r.Name, r.Type, r.Where, r.Error)
	}
	vals := make([]string, len(r.Values))
	for i, v := range r.Values {
		vals[i] = v.String()
	}
	return r.Name + ": " + strings.Join(vals, ", ")
}

// UnknownSensorError is returned by Read for a name not in the config.
type UnknownSensorError struct {
	Name  string
	Known []string
}

func (e *UnknownSensorError) Error() string {
	if len(e.Known) == 0 {
		return fmt.Sprintf("sensor: no sensor named %q; none is configured (add one to \"sensors\" in the config)", e.Name)
	}
	return fmt.Sprintf("sensor: no sensor named %q; configured: %s", e.Name, strings.Join(e.Known, ", "))
}

// Read measures the sensor called name. The error of a failed measurement
// is also in the Reading, so callers listing several can show it in place.
func (s *Set) Read(ctx context.Context, name string) (Reading, error) {
	sp, ok := s.Find(name)
	if !ok {
		known := make([]string, len(s.specs))
		for i, x := range s.specs {
			known[i] = x.Name
		}
		err := &UnknownSensorError{Name: name, Known: known}
		return Reading{Name: name, Error: err.Error()}, err
	}
	return s.read(ctx, sp)
}

// ReadAll measures every sensor in config order; failures are in the
// readings' Error fields.
func (s *Set) ReadAll(ctx context.Context) []Reading {
	out := make([]Reading, 0, len(s.specs))
	for _, sp := range s.specs {
		r, _ := s.read(ctx, sp)
		out = append(out, r)
	}
	return out
}

func (s *Set) read(ctx context.Context, sp Spec) (Reading, error) {
	r := Reading{Name: sp.Name, Type: sp.Type, Where: sp.Where()}
	vals, chip, err := s.measure(ctx, sp)
	if err != nil {
		r.Error = err.Error()
		return r, fmt.Errorf("sensor %s (%s, %s): %w", sp.Name, sp.Type, sp.Where(), err)
	}
	r.Values, r.Chip = vals, chip
	return r, nil
}

func (s *Set) measure(ctx context.Context, sp Spec) ([]Value, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	// A part that never finishes must not hold its bus, the sampler or a
	// chat turn: every read ends by the timeout.
	bound := s.timeout
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) < bound {
		bound = time.Until(dl).Round(time.Millisecond)
	}
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	vals, chip, err := s.measureBounded(ctx, sp)
	if err == nil || ctx.Err() == nil {
		return vals, chip, err
	}
	switch {
	case !errors.Is(ctx.Err(), context.DeadlineExceeded):
		return nil, "", ctx.Err()
	case errors.Is(err, errQueued):
		return nil, "", fmt.Errorf("no reading within %s: %w", bound, err)
	}
	return nil, "", fmt.Errorf("no reading within %s: the part did not finish its measurement; "+
		"power-cycle it and check its supply and wiring: %w", bound, ctx.Err())
}

func (s *Set) measureBounded(ctx context.Context, sp Spec) ([]Value, string, error) {
	p := parts[sp.Type]
	if p.oneWire {
		// The kernel's w1 read cannot be interrupted: it runs on, holding
		// the 1-wire lock, while the caller gets its timeout.
		unlock, err := s.lock(ctx, "w1")
		if err != nil {
			return nil, "", err
		}
		type result struct {
			vals []Value
			err  error
		}
		done := make(chan result, 1)
		go func() {
			defer unlock()
			id, err := w1Device(s.w1Dir, sp.Device)
			if err != nil {
				done <- result{err: err}
				return
			}
			vals, err := readDS18B20(s.w1Dir, id)
			done <- result{vals, err}
		}()
		select {
		case r := <-done:
			return r.vals, "DS18B20", r.err
		case <-ctx.Done():
			return nil, "", ctx.Err()
		}
	}
	info, err := i2c.Lookup(string(sp.Bus))
	if err != nil {
		return nil, "", err
	}
	unlock, err := s.lock(ctx, "i2c:"+info.Name)
	if err != nil {
		return nil, "", err
	}
	defer unlock()
	bus, err := i2c.Open(string(sp.Bus))
	if err != nil {
		return nil, "", err
	}
	defer bus.Close()
	// Checked here as well as on every transfer: periph's drivers flatten
	// the bus's errors to text behind their own prefixes, and the refusal
	// must reach the user whole, naming the driver.
	if err := bus.Info().CheckFree("read", sp.address()); err != nil {
		return nil, "", err
	}
	vals, chip, err := p.readI2C(ctx, ctxBus{bus.Periph(), ctx}, sp.address())
	if err != nil {
		return nil, "", i2cError(sp, err)
	}
	return vals, chip, nil
}

// i2cError names the part in a driver's error and, when nothing answered,
// says where to look, as the i2c tool does.
func i2cError(sp Spec, err error) error {
	switch msg := err.Error(); {
	case strings.HasPrefix(msg, ": "):
		// periph's BMx280 driver names the chip it found, and before the
		// chip id is read it has none: ": sysfs-i2c: …".
		err = fmt.Errorf("%s%w", sp.Type, err)
	case strings.HasPrefix(msg, "sysfs-i2c:"):
		// The BH1750 driver passes the bus's error on bare.
		err = fmt.Errorf("%s: %w", sp.Type, err)
	}
	if i2c.NoAck(err) {
		return fmt.Errorf("%w; no device acknowledged at %s: check the wiring and the address "+
			"(the i2c tool's scan lists what answers)", err, Address(sp.address()))
	}
	return err
}

// lock takes the lock of one bus, or gives up with the context: a read stuck
// on the bus fails the reads queued behind it by their own deadlines, never
// later.
func (s *Set) lock(ctx context.Context, bus string) (func(), error) {
	s.mu.Lock()
	l, ok := s.buses[bus]
	if !ok {
		l = make(chan struct{}, 1)
		s.buses[bus] = l
	}
	s.mu.Unlock()
	select {
	case l <- struct{}{}:
		return func() { <-l }, nil
	case <-ctx.Done():
		return nil, fmt.Errorf("%w: %w", errQueued, ctx.Err())
	}
}

var errQueued = errors.New("another sensor's read on the same bus has not finished")

// ctxBus fails every transfer once ctx is done. periph's drivers take no
// context, and the BMx280's Sense polls its status register until the busy
// bit clears, forever on a part where it never does; a failing transfer is
// what ends that loop.
type ctxBus struct {
	periphi2c.Bus
	ctx context.Context
}

func (b ctxBus) Tx(addr uint16, w, r []byte) error {
	if err := b.ctx.Err(); err != nil {
		return err
	}
	return b.Bus.Tx(addr, w, r)
}

// Status is whether a sensor's bus and device are there, checked without a
// measurement.
type Status struct {
	Name    string `json:"name"`
	Type    string `json:"type"`
	Where   string `json:"where"`
	OK      bool   `json:"ok"`
	Message string `json:"message"`
}

// Status checks every sensor's bus (I²C) or device (1-wire) is present, and
// that no kernel driver owns an I²C sensor's address. It sends nothing on
// the wire.
func (s *Set) Status() []Status {
	var busy *i2c.DriverError
	out := make([]Status, 0, len(s.specs))
	for _, sp := range s.specs {
		st := Status{Name: sp.Name, Type: sp.Type, Where: sp.Where(), OK: true}
		if parts[sp.Type].oneWire {
			id, err := w1Device(s.w1Dir, sp.Device)
			if err != nil {
				st.OK, st.Message = false, err.Error()
			} else {
				st.Where = "1-wire " + id
				st.Message = "device present"
				if _, err := os.Stat(filepath.Join(s.w1Dir, id, "w1_slave")); err != nil {
					st.OK, st.Message = false, err.Error()
				}
			}
		} else if info, err := i2c.Lookup(string(sp.Bus)); err != nil {
			st.OK, st.Message = false, err.Error()
		} else if err := info.CheckFree("read", sp.address()); errors.As(err, &busy) {
			where := ""
			if busy.DeviceBus != info.Number {
				where = fmt.Sprintf(" (its device is declared on bus %d, behind a multiplexer on this one)", busy.DeviceBus)
			}
			st.OK, st.Message = false, fmt.Sprintf("bus %s present, but %s is in use by kernel driver %s%s, "+
				"so it is not read; read it through the kernel's interface, or unbind the driver: %s",
				info, Address(sp.address()), busy.Driver, where, busy.UnbindCommand())
		} else if err != nil {
			st.OK, st.Message = false, err.Error()
		} else {
			st.Message = "bus " + info.String() + " present"
		}
		out = append(out, st)
	}
	return out
}

// Check is a readiness check for /ready: always ok, since sensors never stop
// the gateway serving chat; the message says how many are ready and why the
// others are not.
func (s *Set) Check() (bool, string) {
	if len(s.specs) == 0 {
		return true, "no sensors configured"
	}
	st := s.Status()
	ready := 0
	var problems []string
	for _, x := range st {
		if x.OK {
			ready++
		} else {
			problems = append(problems, x.Name+": "+x.Message)
		}
	}
	if len(problems) == 0 {
		return true, countSensors(ready) + " ready"
	}
	msg := fmt.Sprintf("%d of %s ready", ready, countSensors(len(st)))
	if len(st) == 1 {
		msg = "the sensor is not ready"
	}
	return true, msg + "; " + strings.Join(problems, "; ")
}

// countSensors says "1 sensor" or "3 sensors": the check's message is read by
// people on the page, not parsed.
func countSensors(n int) string {
	if n == 1 {
		return "1 sensor"
	}
	return fmt.Sprintf("%d sensors", n)
}
