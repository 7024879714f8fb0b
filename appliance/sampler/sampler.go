// Package sampler reads every configured sensor at a fixed interval
// (sensors.sample_seconds) into the store's sensor history, and keeps the
// latest reading of each for the page and the API.
//
// # Concepts
//
// One goroutine, owned by the Sampler between Start and Stop, reads all
// sensors at once (sensor.Set serialises the bus transfers), then hands the
// values to the store, which batches them in memory and writes them
// together every few minutes (see store.AppendReadings), so a sample a
// minute costs the SD card a write every five. Rounds are aligned to
// multiples of the interval on the wall clock, so samples of different
// boots fall on the same seconds. A sensor that fails keeps its last good
// values (with their time) and its error; the others are still stored.
//
// Readings are refused by the store while the clock is not set (a Pi
// without a real-time clock boots in the past until NTP answers): such a
// round is kept as the latest reading but not stored, and Check says why.
package sampler

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/perchhq/perch/appliance/api"
	"github.com/perchhq/perch/drivers/sensor"
	"github.com/perchhq/perch/store"
)

// Store receives the readings; *store.DB implements it.
type Store interface {
	AppendReadings(rs ...store.Reading) error
}

// Options configure a Sampler.
type Options struct {
	Sensors *sensor.Set
	Store   Store
	// Every is the interval between rounds (sensors.sample_seconds).
	Every time.Duration
	// OnSample, when set, is told the latest readings after every round
	// (the page's event stream). It runs on the sampler's goroutine and
	// must not block.
	OnSample func([]Latest)
	Log      *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Latest is a sensor's most recent reading: its values and when they were
// taken, or why the last attempt failed.
type Latest struct {
	sensor.Reading
	// Time is when Values were measured; zero before the first success.
	Time time.Time `json:"time,omitzero"`
	// Tried is when the last attempt was made.
	Tried time.Time `json:"tried,omitzero"`
}

// Sampler is the sampling service.
type Sampler struct {
	opts Options
	log  *slog.Logger

	mu       sync.Mutex
	latest   []Latest
	storeErr error // the last refusal of the store, nil after a success
	rounds   int

	cancel context.CancelFunc
	done   chan struct{}
}

// New returns a sampler; nothing is read until Start.
func New(opts Options) *Sampler {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Every <= 0 {
		opts.Every = time.Minute
	}
	if opts.Sensors == nil {
		opts.Sensors, _ = sensor.NewSet(nil, sensor.Options{})
	}
	s := &Sampler{opts: opts, log: opts.Log.With("service", "sampler")}
	for _, sp := range opts.Sensors.Specs() {
		s.latest = append(s.latest, Latest{Reading: sensor.Reading{Name: sp.Name, Type: sp.Type, Where: sp.Where()}})
	}
	return s
}

// Start takes the first sample at once, then one every interval, until
// Stop. With no sensor configured it does nothing.
func (s *Sampler) Start(ctx context.Context) error {
	if s.opts.Sensors.Len() == 0 || s.done != nil {
		return nil
	}
	ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.done = make(chan struct{})
	go func() {
		defer close(s.done)
		s.run(ctx)
	}()
	return nil
}

// Stop ends the sampling and waits for a round in progress. Readings
// still waiting in the store are written when the store closes.
func (s *Sampler) Stop(ctx context.Context) error {
	if s.done == nil {
		return nil
	}
	s.cancel()
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("sampler: stop: %w", ctx.Err())
	}
}

func (s *Sampler) run(ctx context.Context) {
	for {
		s.Sample(ctx)
		now := s.opts.Now()
		next := now.Truncate(s.opts.Every).Add(s.opts.Every)
		t := time.NewTimer(next.Sub(now))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// Sample reads every sensor once and stores the values (Start calls it on
// its schedule; tests call it directly).
func (s *Sampler) Sample(ctx context.Context) {
	readings := s.opts.Sensors.ReadAll(ctx)
	if ctx.Err() != nil {
		return
	}
	now := s.opts.Now().Truncate(time.Second)
	var rs []store.Reading
	for _, r := range readings {
		for _, v := range r.Values {
			rs = append(rs, store.Reading{Sensor: r.Name, Quantity: v.Quantity, Unit: v.Unit, Time: now, Value: v.Value})
		}
	}
	var err error
	if len(rs) > 0 {
		err = s.opts.Store.AppendReadings(rs...)
	}
	s.mu.Lock()
	s.rounds++
	if err != nil && (s.storeErr == nil || s.storeErr.Error() != err.Error()) {
		s.log.Warn("sensor readings not stored", "err", err)
	}
	s.storeErr = err
	for i, r := range readings {
		if i >= len(s.latest) {
			break
		}
		l := &s.latest[i]
		l.Tried = now
		if r.Error != "" {
			if l.Error != r.Error {
				s.log.Info("sensor not read", "sensor", r.Name, "err", r.Error)
			}
			l.Error = r.Error // the last good values and their time stay
			continue
		}
		l.Reading, l.Time = r, now
	}
	out := s.snapshotLocked()
	s.mu.Unlock()
	if s.opts.OnSample != nil {
		s.opts.OnSample(out)
	}
}

// Latest returns every configured sensor's latest reading, in config order.
func (s *Sampler) Latest() []Latest {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.snapshotLocked()
}

func (s *Sampler) snapshotLocked() []Latest {
	out := make([]Latest, len(s.latest))
	for i, l := range s.latest {
		l.Values = append([]sensor.Value(nil), l.Values...)
		out[i] = l
	}
	return out
}

// Every is the sampling interval.
func (s *Sampler) Every() time.Duration { return s.opts.Every }

// Check reports on the history for /ready: always ok (sensors never stop
// the gateway serving chat), saying what is sampled and what goes wrong.
func (s *Sampler) Check() (bool, string) {
	n := s.opts.Sensors.Len()
	if n == 0 {
		return true, "no sensors configured, nothing to sample"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	msg := fmt.Sprintf("%d sensor%s sampled every %s", n, plural(n), api.Span(s.opts.Every))
	if s.rounds == 0 {
		return true, msg + "; no round yet"
	}
	var failing []string
	for _, l := range s.latest {
		if l.Error != "" {
			failing = append(failing, l.Name)
		}
	}
	if len(failing) > 0 {
		msg += "; not read in the last round: " + strings.Join(failing, ", ")
	}
	if s.storeErr != nil {
		why := s.storeErr.Error()
		if errors.Is(s.storeErr, store.ErrClosed) {
			why = "the database is closed"
		}
		msg += "; history not stored: " + why
	}
	return true, msg
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
