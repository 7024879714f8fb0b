package store

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"sort"
	"strings"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Sensor history: what every configured sensor read, kept at full
// resolution for RawRetention and as hourly minimum/mean/maximum for
// RollupRetention, in a size that does not grow with time.
//
// Layout (bucket "sensors", schema v2): one bucket per sensor name, in it one
// bucket per quantity (temperature, humidity, …) holding
//   - "unit": the unit of the last reading (°C, %, hPa, …);
//   - "r"+hour (4 bytes, big-endian Unix seconds of the hour's start): the
//     hour's raw samples, 6 bytes each (seconds into the hour u16, value
//     float32), sorted, after a version byte;
//   - "h"+day (Unix seconds of the UTC day's start): the day's hourly rollups
//     after a version byte and a 24-bit map of the hours present, 14 bytes
//     per hour (min, mean, max as float32, sample count u16).
//
// Values are kept as float32 (about 7 significant digits: 1013.25 hPa, 21.37
// °C and 65535 lx are exact enough; a cumulative counter above 16,777,216 is
// not). Blocks rather than a key per sample keep bbolt's 16-byte per-key
// overhead and the tree small. Rollups are updated as readings are written,
// so the current hour and day are always queryable; raw blocks and rollup
// days beyond their retention are deleted as the newest reading of the series
// moves on (not by wall clock, so a board whose clock is wrong at boot does
// not wipe its history).
//
// Size: at one sample a minute, 48 h of raw samples take 48 blocks of 361
// bytes (17 KB) and a year of rollups 366 blocks of at most 341 bytes (125
// KB): about 145 KB of records per quantity, which bbolt's pages and keys
// turn into roughly 150-300 KB on disk (BenchmarkSensorYear measures it).
// Faster sampling only grows the raw part: at most 3,600 samples an hour.
//
// SD card writes: readings wait in memory and are written together once the
// oldest waiting reading is Options.SensorFlush older than the newest
// (default 5 minutes), or 4,096 readings wait, or FlushSensors or Close is
// called. A power cut loses the readings still waiting: at most the last
// few minutes of samples. Queries see waiting readings too.

const (
	// RawRetention is how long full-resolution samples are kept.
	RawRetention = 48 * time.Hour
	// RollupRetention is how long hourly rollups are kept.
	RollupRetention = 365 * 24 * time.Hour

	maxSensorPending = 4096
	maxSensorPoints  = 10000
	maxSensorName    = 64
	maxSensorUnit    = 32

	rawSampleSize  = 6
	rollupHourSize = 14
	sensorBlockV1  = 1
)

var (
	keyUnit = []byte("unit")
	// minSensorTime rejects readings taken before the board's clock was
	// set (a Pi without a real-time clock boots in 1970, or at the last
	// shutdown's time until NTP answers).
	minSensorTime = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	maxSensorTime = time.Unix(math.MaxUint32-2*86400, 0)
)

// Reading is one sampled value.
type Reading struct {
	Sensor   string    `json:"sensor"`   // the configured sensor's name
	Quantity string    `json:"quantity"` // temperature, humidity, pressure, …
	Unit     string    `json:"unit"`
	Time     time.Time `json:"time"`
	Value    float64   `json:"value"`
}

func (r *Reading) validate() error {
	bad := func(format string, a ...any) error {
		return fmt.Errorf("store: sensor reading %q/%q: %s", r.Sensor, r.Quantity, fmt.Sprintf(format, a...))
	}
	switch {
	case r.Sensor == "" || len(r.Sensor) > maxSensorName:
		return bad("the sensor name must be 1 to %d bytes", maxSensorName)
	case r.Quantity == "" || len(r.Quantity) > maxSensorName:
		return bad("the quantity must be 1 to %d bytes", maxSensorName)
	case len(r.Unit) > maxSensorUnit:
		return bad("the unit is longer than %d bytes", maxSensorUnit)
	case math.IsNaN(r.Value) || math.IsInf(r.Value, 0):
		return bad("the value %v is not a number", r.Value)
	case math.Abs(r.Value) > math.MaxFloat32:
		return bad("the value %v is out of range", r.Value)
	case r.Time.Before(minSensorTime) || r.Time.After(maxSensorTime):
		return bad("time %s is implausible (is the clock set?)", r.Time.UTC().Format(time.RFC3339))
	}
	return nil
}

type seriesKey struct{ sensor, quantity string }

// sensorBuffer holds readings not yet written.
type sensorBuffer struct {
	mu         sync.Mutex
	flushAfter time.Duration
	pending    []Reading
	oldest     time.Time // of pending
	newest     time.Time
	// flushing serialises flushes, so readings reach the file in order.
	flushing sync.Mutex
}

func newSensorBuffer(flushAfter time.Duration) *sensorBuffer {
	return &sensorBuffer{flushAfter: flushAfter}
}

// AppendReadings queues readings for the sensor history; they are written
// with the next flush (see above). The call writes to the file itself when
// a flush is due, so it may take as long as a commit. A reading that fails
// validation (empty names, a value that is not a finite number, a time
// before 2020 when the clock is not yet set) rejects the whole call with an
// error naming the reading.
func (db *DB) AppendReadings(rs ...Reading) error {
	for i := range rs {
		if err := rs[i].validate(); err != nil {
			return err
		}
	}
	if len(rs) == 0 {
		return nil
	}
	sb := db.sensors
	sb.mu.Lock()
	for _, r := range rs {
		r.Time = r.Time.UTC()
		if len(sb.pending) == 0 {
			sb.oldest, sb.newest = r.Time, r.Time
		}
		if r.Time.Before(sb.oldest) {
			sb.oldest = r.Time
		}
		if r.Time.After(sb.newest) {
			sb.newest = r.Time
		}
		sb.pending = append(sb.pending, r)
	}
	due := len(sb.pending) >= maxSensorPending || sb.newest.Sub(sb.oldest) >= sb.flushAfter
	sb.mu.Unlock()
	if due {
		return db.FlushSensors()
	}
	return nil
}

// FlushSensors writes the waiting readings now. On failure they stay
// waiting (the oldest are dropped beyond 4,096) and the error is returned.
func (db *DB) FlushSensors() error {
	sb := db.sensors
	if sb == nil {
		return nil
	}
	sb.flushing.Lock()
	defer sb.flushing.Unlock()
	sb.mu.Lock()
	batch := sb.pending
	sb.pending = nil
	sb.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	err := db.writeReadings(batch)
	if err != nil {
		sb.mu.Lock()
		all := append(batch, sb.pending...)
		if len(all) > maxSensorPending {
			all = all[len(all)-maxSensorPending:]
		}
		sb.pending = all
		sb.oldest, sb.newest = all[0].Time, all[0].Time
		for _, r := range all {
			if r.Time.Before(sb.oldest) {
				sb.oldest = r.Time
			}
			if r.Time.After(sb.newest) {
				sb.newest = r.Time
			}
		}
		sb.mu.Unlock()
		return fmt.Errorf("store: write sensor history: %w", err)
	}
	return nil
}

func (db *DB) writeReadings(batch []Reading) error {
	groups := map[seriesKey][]Reading{}
	for _, r := range batch {
		k := seriesKey{r.Sensor, r.Quantity}
		groups[k] = append(groups[k], r)
	}
	for _, rs := range groups {
		sort.SliceStable(rs, func(i, j int) bool { return rs[i].Time.Before(rs[j].Time) })
	}
	return db.update(func(tx *bolt.Tx) error {
		top := tx.Bucket([]byte(BucketSensors))
		for k, rs := range groups {
			sb, err := top.CreateBucketIfNotExists([]byte(k.sensor))
			if err != nil {
				return err
			}
			qb, err := sb.CreateBucketIfNotExists([]byte(k.quantity))
			if err != nil {
				return err
			}
			if err := writeSeries(qb, rs); err != nil {
				return err
			}
		}
		return nil
	})
}

// writeSeries merges sorted readings of one series into its blocks and
// applies retention.
func writeSeries(qb *bolt.Bucket, rs []Reading) error {
	if unit := rs[len(rs)-1].Unit; string(qb.Get(keyUnit)) != unit {
		if err := qb.Put(keyUnit, []byte(unit)); err != nil {
			return err
		}
	}
	// Raw: one read-modify-write per hour touched. A sample at a second
	// already stored is a duplicate and is ignored, in the rollup too.
	var fresh []Reading
	for i := 0; i < len(rs); {
		hour := hourStart(rs[i].Time)
		j := i
		for j < len(rs) && hourStart(rs[j].Time) == hour {
			j++
		}
		key := blockKey('r', hour)
		samples := decodeRaw(qb.Get(key))
		for _, r := range rs[i:j] {
			off := uint16(r.Time.Unix() - hour)
			n := sort.Search(len(samples), func(k int) bool { return samples[k].off >= off })
			if n < len(samples) && samples[n].off == off {
				continue
			}
			samples = append(samples, rawSample{})
			copy(samples[n+1:], samples[n:])
			samples[n] = rawSample{off, float32(r.Value)}
			fresh = append(fresh, r)
		}
		if err := qb.Put(key, encodeRaw(samples)); err != nil {
			return err
		}
		i = j
	}
	// Rollups: one read-modify-write per day touched.
	for i := 0; i < len(fresh); {
		day := dayStart(fresh[i].Time)
		j := i
		for j < len(fresh) && dayStart(fresh[j].Time) == day {
			j++
		}
		key := blockKey('h', day)
		hours := decodeRollups(qb.Get(key))
		for _, r := range fresh[i:j] {
			h := &hours[(r.Time.Unix()-day)/3600]
			h.add(r.Value)
		}
		if err := qb.Put(key, encodeRollups(&hours)); err != nil {
			return err
		}
		i = j
	}
	newest := rs[len(rs)-1].Time
	if err := expire(qb, 'r', newest.Add(-RawRetention).Unix()-3600); err != nil {
		return err
	}
	return expire(qb, 'h', newest.Add(-RollupRetention).Unix()-86400)
}

// expire deletes the blocks of kind whose start is at or before limit (the
// block then ends at or before the retention horizon).
func expire(qb *bolt.Bucket, kind byte, limit int64) error {
	c := qb.Cursor()
	for k, _ := c.Seek([]byte{kind}); len(k) == 5 && k[0] == kind; k, _ = c.Seek([]byte{kind}) {
		if int64(binary.BigEndian.Uint32(k[1:])) > limit {
			return nil
		}
		if err := c.Delete(); err != nil {
			return err
		}
	}
	return nil
}

func hourStart(t time.Time) int64 { return t.Unix() - t.Unix()%3600 }
func dayStart(t time.Time) int64  { return t.Unix() - t.Unix()%86400 }

func blockKey(kind byte, start int64) []byte {
	k := make([]byte, 5)
	k[0] = kind
	binary.BigEndian.PutUint32(k[1:], uint32(start))
	return k
}

type rawSample struct {
	off uint16
	v   float32
}

func decodeRaw(b []byte) []rawSample {
	if len(b) < 1 || b[0] != sensorBlockV1 || (len(b)-1)%rawSampleSize != 0 {
		return nil // absent, or damaged: the hour starts over
	}
	b = b[1:]
	out := make([]rawSample, 0, len(b)/rawSampleSize+8)
	for ; len(b) >= rawSampleSize; b = b[rawSampleSize:] {
		out = append(out, rawSample{binary.BigEndian.Uint16(b), math.Float32frombits(binary.BigEndian.Uint32(b[2:]))})
	}
	return out
}

func encodeRaw(s []rawSample) []byte {
	b := make([]byte, 1, 1+len(s)*rawSampleSize)
	b[0] = sensorBlockV1
	for _, x := range s {
		b = binary.BigEndian.AppendUint16(b, x.off)
		b = binary.BigEndian.AppendUint32(b, math.Float32bits(x.v))
	}
	return b
}

// rollup is one hour's summary.
type rollup struct {
	min, mean, max float32
	n              uint16
}

func (h *rollup) add(v float64) {
	if h.n == math.MaxUint16 {
		return
	}
	f := float32(v)
	if h.n == 0 {
		*h = rollup{f, f, f, 1}
		return
	}
	h.min, h.max = min(h.min, f), max(h.max, f)
	h.mean = float32((float64(h.mean)*float64(h.n) + v) / float64(h.n+1))
	h.n++
}

func decodeRollups(b []byte) (hours [24]rollup) {
	if len(b) < 4 || b[0] != sensorBlockV1 {
		return hours
	}
	present := uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
	b = b[4:]
	for h := 0; h < 24; h++ {
		if present&(1<<h) == 0 {
			continue
		}
		if len(b) < rollupHourSize {
			return [24]rollup{}
		}
		hours[h] = rollup{
			min:  math.Float32frombits(binary.BigEndian.Uint32(b)),
			mean: math.Float32frombits(binary.BigEndian.Uint32(b[4:])),
			max:  math.Float32frombits(binary.BigEndian.Uint32(b[8:])),
			n:    binary.BigEndian.Uint16(b[12:]),
		}
		b = b[rollupHourSize:]
	}
	return hours
}

func encodeRollups(hours *[24]rollup) []byte {
	var present uint32
	b := make([]byte, 4, 4+24*rollupHourSize)
	for h, r := range hours {
		if r.n == 0 {
			continue
		}
		present |= 1 << h
		b = binary.BigEndian.AppendUint32(b, math.Float32bits(r.min))
		b = binary.BigEndian.AppendUint32(b, math.Float32bits(r.mean))
		b = binary.BigEndian.AppendUint32(b, math.Float32bits(r.max))
		b = binary.BigEndian.AppendUint16(b, r.n)
	}
	b[0] = sensorBlockV1
	b[1], b[2], b[3] = byte(present>>16), byte(present>>8), byte(present)
	return b
}

// checkSensorRecord validates a record of a quantity's bucket (for the full
// check and salvage).
func checkSensorRecord(k, v []byte) error {
	if string(k) == string(keyUnit) {
		if len(v) > maxSensorUnit {
			return errors.New("unit too long")
		}
		return nil
	}
	if len(k) != 5 || (k[0] != 'r' && k[0] != 'h') {
		return fmt.Errorf("unknown key %x", k)
	}
	if len(v) < 1 || v[0] != sensorBlockV1 {
		return fmt.Errorf("block %x: unknown version", k)
	}
	if k[0] == 'r' {
		if (len(v)-1)%rawSampleSize != 0 {
			return fmt.Errorf("raw block %x: %d bytes", k, len(v))
		}
		prev := -1
		for b := v[1:]; len(b) > 0; b = b[rawSampleSize:] {
			off := int(binary.BigEndian.Uint16(b))
			if off >= 3600 || off <= prev {
				return fmt.Errorf("raw block %x: samples out of order", k)
			}
			prev = off
		}
		return nil
	}
	if len(v) < 4 {
		return fmt.Errorf("rollup block %x: %d bytes", k, len(v))
	}
	present := uint32(v[1])<<16 | uint32(v[2])<<8 | uint32(v[3])
	if want := 4 + popcount24(present)*rollupHourSize; len(v) != want {
		return fmt.Errorf("rollup block %x: %d bytes, want %d", k, len(v), want)
	}
	return nil
}

func popcount24(x uint32) int {
	n := 0
	for ; x != 0; x &= x - 1 {
		n++
	}
	return n
}

// SensorQuery selects history.
type SensorQuery struct {
	Sensor string
	// Quantity, when empty, selects every quantity of the sensor.
	Quantity string
	// Since and Until bound the range; a zero Until means now.
	Since, Until time.Time
	// Step is the width of each point. Zero chooses one giving about 300
	// points. Steps of an hour or more (rounded up to whole hours) are
	// served from the hourly rollups; shorter steps from the raw samples
	// where they are kept (the last 48 hours), and as hourly points
	// before that (RawSince tells where).
	Step time.Duration
	// Location is the zone whose days points of an hour or more follow:
	// a daily point runs from local midnight to midnight, a 2-hour one
	// from an even local hour. Nil means UTC.
	Location *time.Location
}

// SensorPoint summarises the samples in [T, T+step) (or an hour, before the
// series' RawSince).
type SensorPoint struct {
	T    time.Time `json:"t"`
	Min  float64   `json:"min"`
	Mean float64   `json:"mean"`
	Max  float64   `json:"max"`
	N    int       `json:"n"` // samples summarised
}

// SensorSeries is one quantity's history.
type SensorSeries struct {
	Sensor   string        `json:"sensor"`
	Quantity string        `json:"quantity"`
	Unit     string        `json:"unit"`
	Step     time.Duration `json:"step_ns"`
	// RawSince is where points of Step width begin when Step is under an
	// hour; points before it are hourly. Zero when Step is an hour or more.
	RawSince time.Time     `json:"raw_since,omitempty"`
	Points   []SensorPoint `json:"points"`
}

var niceSteps = []time.Duration{
	time.Minute, 2 * time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour, 24 * time.Hour, 2 * 24 * time.Hour, 7 * 24 * time.Hour,
}

// SensorStep is the step SensorHistory uses for step: an hour or more is
// rounded up to whole hours, the rollups' resolution (90m is 2h).
func SensorStep(step time.Duration) time.Duration {
	if step >= time.Hour {
		step = (step + time.Hour - 1) / time.Hour * time.Hour
	}
	return step
}

// SensorHistory returns the history of one sensor's quantities in the
// range, one series per quantity, sorted by quantity. An unknown sensor
// gives no series and no error. A range and step that would give more than
// 10,000 points is refused with an error naming the smallest step allowed.
func (db *DB) SensorHistory(q SensorQuery) ([]SensorSeries, error) {
	if q.Sensor == "" {
		return nil, errors.New("store: sensor history: name a sensor")
	}
	until := q.Until
	if until.IsZero() {
		until = time.Now()
	}
	since, until := q.Since.UTC(), until.UTC()
	if !since.Before(until) {
		return nil, fmt.Errorf("store: sensor history: since (%s) must be before until (%s)", since.Format(time.RFC3339), until.Format(time.RFC3339))
	}
	span := until.Sub(since)
	step := q.Step
	if step <= 0 {
		step = niceSteps[len(niceSteps)-1]
		for _, s := range niceSteps {
			if span/s <= 300 {
				step = s
				break
			}
		}
	}
	step = SensorStep(step)
	if step < time.Second {
		return nil, fmt.Errorf("store: sensor history: step %s is under a second", step)
	}
	if n := span / step; n > maxSensorPoints {
		return nil, fmt.Errorf("store: sensor history: %s in steps of %s is %d points, more than %d; use a step of at least %s",
			shortDuration(span), shortDuration(step), n, maxSensorPoints, shortDuration((span/maxSensorPoints).Round(time.Second)+time.Second))
	}
	pending := db.pendingReadings(q.Sensor)
	var out []SensorSeries
	err := db.bolt.View(func(tx *bolt.Tx) error {
		sb := tx.Bucket([]byte(BucketSensors)).Bucket([]byte(q.Sensor))
		quantities := map[string]bool{}
		if sb != nil {
			_ = sb.ForEachBucket(func(k []byte) error {
				quantities[string(k)] = true
				return nil
			})
		}
		for _, r := range pending {
			quantities[r.Quantity] = true
		}
		for qty := range quantities {
			if q.Quantity != "" && qty != q.Quantity {
				continue
			}
			var qb *bolt.Bucket
			if sb != nil {
				qb = sb.Bucket([]byte(qty))
			}
			out = append(out, querySeries(q.Sensor, qty, qb, pending, since, until, step, q.Location))
		}
		return nil
	})
	sort.Slice(out, func(i, j int) bool { return out[i].Quantity < out[j].Quantity })
	if err != nil {
		return nil, fmt.Errorf("store: sensor history of %q: %w", q.Sensor, err)
	}
	return out, nil
}

func (db *DB) pendingReadings(sensor string) []Reading {
	sb := db.sensors
	sb.mu.Lock()
	defer sb.mu.Unlock()
	var out []Reading
	for _, r := range sb.pending {
		if r.Sensor == sensor {
			out = append(out, r)
		}
	}
	return out
}

type acc struct {
	min, max, sum float64
	n             int
}

func (a *acc) fold(mn, mean, mx float64, n int) {
	if a.n == 0 || mn < a.min {
		a.min = mn
	}
	if a.n == 0 || mx > a.max {
		a.max = mx
	}
	a.sum += mean * float64(n)
	a.n += n
}

func querySeries(sensor, qty string, qb *bolt.Bucket, pending []Reading, since, until time.Time, step time.Duration, loc *time.Location) SensorSeries {
	s := SensorSeries{Sensor: sensor, Quantity: qty, Step: step, Points: []SensorPoint{}}
	// Samples are kept to the second: a sample in the second Until falls
	// in counts.
	from, to := since.Unix(), until.Unix()
	if until.Nanosecond() != 0 {
		to++
	}
	// rawSince: the oldest raw sample kept (on disk, else waiting).
	rawSince := int64(math.MaxInt64)
	if qb != nil {
		s.Unit = string(qb.Get(keyUnit))
		if k, _ := qb.Cursor().Seek([]byte{'r'}); len(k) == 5 && k[0] == 'r' {
			rawSince = int64(binary.BigEndian.Uint32(k[1:]))
		}
	}
	for _, r := range pending {
		if r.Quantity == qty {
			rawSince = min(rawSince, hourStart(r.Time))
			s.Unit = r.Unit
		}
	}
	hourly := step >= time.Hour
	stepS := int64(step / time.Second)
	bins := map[int64]*acc{}
	// bin returns the accumulator of the point holding t, width wide.
	bin := func(t, width int64) *acc {
		start := t - mod(t, width)
		if hourly && loc != nil {
			start = localBinStart(t, width, since, loc)
		}
		a := bins[start]
		if a == nil {
			a = &acc{}
			bins[start] = a
		}
		return a
	}
	// Rollups fill points of the step when it is an hour or more, else
	// hourly points before the raw samples.
	rollupWidth := int64(3600)
	if hourly {
		rollupWidth = stepS
	}
	if qb != nil {
		c := qb.Cursor()
		// Hourly rollups: everything for hourly steps, else only hours
		// before the raw samples.
		hourlyTo := to
		if !hourly {
			hourlyTo = min(to, rawSince)
		}
		for k, v := c.Seek(blockKey('h', from-mod(from, 86400))); len(k) == 5 && k[0] == 'h'; k, v = c.Next() {
			day := int64(binary.BigEndian.Uint32(k[1:]))
			if day >= hourlyTo {
				break
			}
			hours := decodeRollups(v)
			for h, r := range hours {
				t := day + int64(h)*3600
				if r.n == 0 || t < from-mod(from, 3600) || t >= hourlyTo {
					continue
				}
				bin(t, rollupWidth).fold(float64(r.min), float64(r.mean), float64(r.max), int(r.n))
			}
		}
		if !hourly {
			for k, v := c.Seek(blockKey('r', max(from, rawSince)-mod(max(from, rawSince), 3600))); len(k) == 5 && k[0] == 'r'; k, v = c.Next() {
				hour := int64(binary.BigEndian.Uint32(k[1:]))
				if hour >= to {
					break
				}
				for _, x := range decodeRaw(v) {
					t := hour + int64(x.off)
					if t < from || t >= to {
						continue
					}
					f := float64(x.v)
					bin(t, stepS).fold(f, f, f, 1)
				}
			}
		}
	}
	for _, r := range pending {
		if r.Quantity != qty {
			continue
		}
		t := r.Time.Unix()
		if t < from || t >= to {
			continue
		}
		f := float64(float32(r.Value)) // as it will be stored
		bin(t, stepS).fold(f, f, f, 1)
	}
	starts := make([]int64, 0, len(bins))
	for t := range bins {
		starts = append(starts, t)
	}
	sort.Slice(starts, func(i, j int) bool { return starts[i] < starts[j] })
	for _, t := range starts {
		a := bins[t]
		s.Points = append(s.Points, SensorPoint{T: time.Unix(t, 0).UTC(), Min: a.min, Mean: a.sum / float64(a.n), Max: a.max, N: a.n})
	}
	if !hourly && rawSince != math.MaxInt64 {
		s.RawSince = time.Unix(rawSince, 0).UTC()
	}
	return s
}

// localBinStart is where the point of width seconds (whole hours) holding t
// starts on loc's clock: UTC-aligned days would be 16:00-to-16:00 in
// California. Days follow the calendar, 23 or 25 hours across a DST change;
// widths dividing a day start at local hours that are multiples of it;
// others count from the local midnight before since.
func localBinStart(t, width int64, since time.Time, loc *time.Location) int64 {
	lt := time.Unix(t, 0).In(loc)
	y, m, d := lt.Date()
	switch {
	case width%86400 == 0:
		days := width / 86400
		// The civil day number, so 7-day points keep their weekday
		// whatever the range.
		civil := time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() / 86400
		return time.Date(y, m, d-int(mod(civil, days)), 0, 0, 0, 0, loc).Unix()
	case 86400%width == 0:
		h := lt.Hour() / int(width/3600) * int(width/3600)
		if start := time.Date(y, m, d, h, 0, 0, 0, loc).Unix(); start <= t {
			return start
		}
		// The hour does not exist (DST began in it): the point starts
		// when the clock jumped.
		return t - mod(t, 3600)
	}
	sy, sm, sd := since.In(loc).Date()
	origin := time.Date(sy, sm, sd, 0, 0, 0, 0, loc).Unix()
	return t - mod(t-origin, width)
}

func mod(t, m int64) int64 {
	r := t % m
	if r < 0 {
		r += m
	}
	return r
}

// SensorSeriesInfo describes one stored series.
type SensorSeriesInfo struct {
	Sensor   string    `json:"sensor"`
	Quantity string    `json:"quantity"`
	Unit     string    `json:"unit"`
	First    time.Time `json:"first"` // start of the oldest block kept
	Last     time.Time `json:"last"`  // newest sample written
}

// SensorSeriesList lists every stored series (readings still waiting in
// memory are not listed until written).
func (db *DB) SensorSeriesList() ([]SensorSeriesInfo, error) {
	var out []SensorSeriesInfo
	err := db.bolt.View(func(tx *bolt.Tx) error {
		top := tx.Bucket([]byte(BucketSensors))
		return top.ForEachBucket(func(sensor []byte) error {
			sb := top.Bucket(sensor)
			return sb.ForEachBucket(func(qty []byte) error {
				qb := sb.Bucket(qty)
				info := SensorSeriesInfo{Sensor: string(sensor), Quantity: string(qty), Unit: string(qb.Get(keyUnit))}
				c := qb.Cursor()
				if k, _ := c.Seek([]byte{'h'}); len(k) == 5 && k[0] == 'h' {
					info.First = time.Unix(int64(binary.BigEndian.Uint32(k[1:])), 0).UTC()
				}
				// The newest raw sample: in the last block before the
				// keys after 'r' ("unit").
				var v []byte
				k, _ := c.Seek([]byte{'s'})
				if k == nil {
					k, v = c.Last()
				} else {
					k, v = c.Prev()
				}
				if len(k) == 5 && k[0] == 'r' {
					if s := decodeRaw(v); len(s) > 0 {
						info.Last = time.Unix(int64(binary.BigEndian.Uint32(k[1:]))+int64(s[len(s)-1].off), 0).UTC()
					}
				}
				out = append(out, info)
				return nil
			})
		})
	})
	if err != nil {
		return nil, fmt.Errorf("store: list sensor series: %w", err)
	}
	return out, nil
}

// DeleteSensorHistory deletes everything kept for sensor (written or
// waiting), for when a sensor is removed or renamed.
func (db *DB) DeleteSensorHistory(sensor string) error {
	sb := db.sensors
	// No flush may write this sensor's readings after the delete.
	sb.flushing.Lock()
	defer sb.flushing.Unlock()
	sb.mu.Lock()
	kept := sb.pending[:0]
	for _, r := range sb.pending {
		if r.Sensor != sensor {
			kept = append(kept, r)
		}
	}
	sb.pending = kept
	sb.mu.Unlock()
	err := db.update(func(tx *bolt.Tx) error {
		top := tx.Bucket([]byte(BucketSensors))
		if top.Bucket([]byte(sensor)) == nil {
			return nil
		}
		return top.DeleteBucket([]byte(sensor))
	})
	if err != nil {
		return fmt.Errorf("store: delete sensor history of %q: %w", sensor, err)
	}
	return nil
}

// shortDuration writes d as a person would: 24h rather than Go's 24h0m0s.
func shortDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}
