package store

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// t0 is a UTC midnight; sensor tests count time from it.
var t0 = time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)

func openSensors(t testing.TB) *DB {
	t.Helper()
	db, err := Open(filepath.Join(t.TempDir(), "perch.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Sensor tests write months of history: skip fsync (the commit path
	// is otherwise the production one).
	db.bolt.NoSync = true
	t.Cleanup(func() { db.Close() })
	return db
}

// appendSpan writes one reading every step in [from, to) for each sensor,
// valued by f, flushing once a day of readings.
func appendSpan(t testing.TB, db *DB, sensors []string, from, to time.Time, step time.Duration, f func(time.Time) float64) {
	t.Helper()
	var batch []Reading
	for ts := from; ts.Before(to); ts = ts.Add(step) {
		for _, s := range sensors {
			batch = append(batch, Reading{Sensor: s, Quantity: "temperature", Unit: "°C", Time: ts, Value: f(ts)})
		}
		if len(batch) >= 1440*len(sensors) {
			if err := db.writeReadings(batch); err != nil {
				t.Fatal(err)
			}
			batch = batch[:0]
		}
	}
	if len(batch) > 0 {
		if err := db.writeReadings(batch); err != nil {
			t.Fatal(err)
		}
	}
}

func query(t testing.TB, db *DB, q SensorQuery) SensorSeries {
	t.Helper()
	ss, err := db.SensorHistory(q)
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 1 {
		t.Fatalf("%d series", len(ss))
	}
	return ss[0]
}

// TestSensorDownsampling: hourly rollups and raw steps summarise exactly
// the samples they cover.
func TestSensorDownsampling(t *testing.T) {
	db := openSensors(t)
	// Three hours of one-minute samples: value = hour*100 + minute.
	val := func(ts time.Time) float64 { return float64(ts.Hour()*100 + ts.Minute()) }
	appendSpan(t, db, []string{"greenhouse"}, t0, t0.Add(3*time.Hour), time.Minute, val)
	hourly := query(t, db, SensorQuery{Sensor: "greenhouse", Since: t0, Until: t0.Add(3 * time.Hour), Step: time.Hour})
	if len(hourly.Points) != 3 || hourly.Unit != "°C" || hourly.Step != time.Hour || !hourly.RawSince.IsZero() {
		t.Fatalf("hourly = %+v", hourly)
	}
	for h, p := range hourly.Points {
		if !p.T.Equal(t0.Add(time.Duration(h)*time.Hour)) || p.N != 60 || p.Min != float64(h*100) || p.Max != float64(h*100+59) || math.Abs(p.Mean-float64(h*100)-29.5) > 1e-3 {
			t.Errorf("hour %d: %+v", h, p)
		}
	}
	raw := query(t, db, SensorQuery{Sensor: "greenhouse", Since: t0.Add(time.Hour), Until: t0.Add(2 * time.Hour), Step: 10 * time.Minute})
	if len(raw.Points) != 6 || !raw.RawSince.Equal(t0) {
		t.Fatalf("raw = %+v", raw)
	}
	for i, p := range raw.Points {
		if p.N != 10 || p.Min != float64(100+i*10) || p.Max != float64(109+i*10) || p.Mean != float64(100+i*10)+4.5 {
			t.Errorf("bin %d: %+v", i, p)
		}
	}
	// A two-hour step merges rollups: weighted mean, min of minima.
	two := query(t, db, SensorQuery{Sensor: "greenhouse", Since: t0, Until: t0.Add(4 * time.Hour), Step: 2 * time.Hour})
	if len(two.Points) != 2 || two.Points[0].N != 120 || two.Points[0].Min != 0 || two.Points[0].Max != 159 || two.Points[1].N != 60 {
		t.Fatalf("two-hour = %+v", two.Points)
	}
	// Automatic step: about 300 points at most.
	auto := query(t, db, SensorQuery{Sensor: "greenhouse", Since: t0, Until: t0.Add(3 * time.Hour)})
	if auto.Step != time.Minute || len(auto.Points) != 180 {
		t.Fatalf("auto: step %s, %d points", auto.Step, len(auto.Points))
	}
	week := query(t, db, SensorQuery{Sensor: "greenhouse", Since: t0.Add(-6 * 24 * time.Hour), Until: t0.Add(24 * time.Hour)})
	if week.Step != time.Hour || len(week.Points) != 3 {
		t.Fatalf("a week: step %s, %d points", week.Step, len(week.Points))
	}
	// A sample at a second already stored is a duplicate: ignored by the
	// raw block and the rollup alike.
	db.writeReadings([]Reading{{Sensor: "greenhouse", Quantity: "temperature", Unit: "°C", Time: t0.Add(time.Minute), Value: 9999}})
	again := query(t, db, SensorQuery{Sensor: "greenhouse", Since: t0, Until: t0.Add(time.Hour), Step: time.Hour})
	if again.Points[0].N != 60 || again.Points[0].Max != 59 {
		t.Fatalf("duplicate counted: %+v", again.Points[0])
	}
}

// TestSensorRetention: raw samples older than 48 hours and rollups older
// than a year (counted from the newest reading) are deleted; what remains
// answers queries at the resolution kept.
func TestSensorRetention(t *testing.T) {
	t.Parallel()
	db := openSensors(t)
	// 400 days at one sample every 10 minutes (enough to cover every
	// block), value = day number.
	end := t0.Add(400 * 24 * time.Hour)
	appendSpan(t, db, []string{"s"}, t0, end, 10*time.Minute, func(ts time.Time) float64 { return math.Floor(ts.Sub(t0).Hours() / 24) })
	newest := end.Add(-10 * time.Minute)
	var raw, days []int64
	db.bolt.View(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(BucketSensors)).Bucket([]byte("s")).Bucket([]byte("temperature")).ForEach(func(k, v []byte) error {
			switch k[0] {
			case 'r':
				raw = append(raw, int64(be32(k[1:])))
			case 'h':
				days = append(days, int64(be32(k[1:])))
			}
			return nil
		})
	})
	if oldest := time.Unix(raw[0], 0); len(raw) > 49 || newest.Sub(oldest) > RawRetention+time.Hour || newest.Sub(oldest) < RawRetention {
		t.Errorf("%d raw blocks, oldest %s before the newest reading", len(raw), newest.Sub(oldest))
	}
	if oldest := time.Unix(days[0], 0); len(days) > 366 || newest.Sub(oldest) > RollupRetention+24*time.Hour || newest.Sub(oldest) < RollupRetention {
		t.Errorf("%d rollup days, oldest %s before the newest reading", len(days), newest.Sub(oldest))
	}
	// Within 48 h: ten-minute points from raw samples; before: hourly.
	s := query(t, db, SensorQuery{Sensor: "s", Since: end.Add(-72 * time.Hour), Until: end, Step: 10 * time.Minute})
	rawSince := s.RawSince
	if end.Sub(rawSince) < RawRetention || end.Sub(rawSince) > RawRetention+time.Hour {
		t.Fatalf("raw since %s", rawSince)
	}
	var before, after int
	for _, p := range s.Points {
		if p.T.Before(rawSince) {
			before++
			if p.N != 6 || p.T.Minute() != 0 {
				t.Fatalf("hourly point %+v", p)
			}
		} else {
			after++
			if p.N != 1 {
				t.Fatalf("raw point %+v", p)
			}
		}
	}
	if before < 23 || before > 24 || after < 288 || after > 294 {
		t.Errorf("%d hourly and %d raw points", before, after)
	}
	// A year back at daily steps: the oldest days are gone.
	year := query(t, db, SensorQuery{Sensor: "s", Since: end.Add(-400 * 24 * time.Hour), Until: end, Step: 24 * time.Hour})
	if n := len(year.Points); n < 365 || n > 366 || year.Points[0].Min < 33 || year.Points[len(year.Points)-1].Max != 399 {
		t.Errorf("a year of daily points: %d, first %+v", n, year.Points[0])
	}
}

func be32(b []byte) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// TestSensorSizeBound: a series' records stop growing once its retention is
// full, and so does the file: the second year reuses the pages the first
// one freed.
func TestSensorSizeBound(t *testing.T) {
	t.Parallel()
	db := openSensors(t)
	recordBytes := func() int {
		n := 0
		db.bolt.View(func(tx *bolt.Tx) error {
			return tx.Bucket([]byte(BucketSensors)).Bucket([]byte("s")).Bucket([]byte("temperature")).ForEach(func(k, v []byte) error {
				n += len(k) + len(v)
				return nil
			})
		})
		return n
	}
	day := 24 * time.Hour
	sine := func(ts time.Time) float64 { return 20 + 5*math.Sin(float64(ts.Unix())/3600) }
	// Every hour of the year gets its rollup at one sample in ten
	// minutes (quicker to write); the last three days are at one a
	// minute, so every raw block kept is full.
	span := func(from, to time.Time) {
		appendSpan(t, db, []string{"s"}, from, to.Add(-3*day), 10*time.Minute, sine)
		appendSpan(t, db, []string{"s"}, to.Add(-3*day), to, time.Minute, sine)
	}
	span(t0, t0.Add(365*day))
	rec1, size1 := recordBytes(), db.Size()
	span(t0.Add(365*day), t0.Add(485*day))
	rec2, size2 := recordBytes(), db.Size()
	// 49 raw blocks of 60 samples and 366 full rollup days, with keys.
	bound := 49*(5+1+60*rawSampleSize) + 367*(5+4+24*rollupHourSize) + len("unit°C")
	t.Logf("records: %d bytes after a year, %d after 16 months (bound %d); file %d -> %d bytes", rec1, rec2, bound, size1, size2)
	if rec1 > bound || rec2 > bound {
		t.Errorf("records exceed the bound")
	}
	if size2 > size1+256<<10 {
		t.Errorf("the file kept growing: %d -> %d bytes", size1, size2)
	}
}

// TestSensorBatching: readings wait in memory until the oldest waiting one
// is SensorFlush older than the newest; queries see them meanwhile; Close
// writes the rest.
func TestSensorBatching(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := func(m int, v float64) Reading {
		return Reading{Sensor: "attic", Quantity: "humidity", Unit: "%", Time: t0.Add(time.Duration(m) * time.Minute), Value: v}
	}
	writes := func() int64 { st := db.bolt.Stats(); return st.TxStats.GetWrite() }
	txBefore := writes()
	for m := 0; m < 5; m++ {
		if err := db.AppendReadings(r(m, float64(50+m))); err != nil {
			t.Fatal(err)
		}
	}
	if w := writes(); w != txBefore {
		t.Fatalf("%d page writes before a flush was due", w-txBefore)
	}
	if list, _ := db.SensorSeriesList(); len(list) != 0 {
		t.Fatalf("written before due: %v", list)
	}
	s := query(t, db, SensorQuery{Sensor: "attic", Since: t0, Until: t0.Add(time.Hour), Step: time.Minute})
	if len(s.Points) != 5 || s.Unit != "%" || s.Points[4].Mean != 54 {
		t.Fatalf("waiting readings not served: %+v", s)
	}
	db.AppendReadings(r(5, 55)) // five minutes after the oldest: due
	if list, _ := db.SensorSeriesList(); len(list) != 1 || !list[0].Last.Equal(t0.Add(5*time.Minute)) || list[0].Unit != "%" {
		t.Fatalf("after the due reading: %+v", list)
	}
	db.AppendReadings(r(6, 56), r(7, 57))
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	db, _ = Open(path, Options{})
	defer db.Close()
	s = query(t, db, SensorQuery{Sensor: "attic", Since: t0, Until: t0.Add(time.Hour), Step: time.Minute})
	if len(s.Points) != 8 {
		t.Fatalf("after reopen: %d points", len(s.Points))
	}
}

func TestSensorValidationAndDelete(t *testing.T) {
	db := openSensors(t)
	ok := Reading{Sensor: "a", Quantity: "t", Unit: "°C", Time: t0, Value: 1}
	bad := []struct {
		r    func(Reading) Reading
		want string
	}{
		{func(r Reading) Reading { r.Sensor = ""; return r }, "sensor name"},
		{func(r Reading) Reading { r.Quantity = strings.Repeat("q", 65); return r }, "quantity"},
		{func(r Reading) Reading { r.Value = math.NaN(); return r }, "not a number"},
		{func(r Reading) Reading { r.Value = math.Inf(1); return r }, "not a number"},
		{func(r Reading) Reading { r.Time = time.Unix(0, 0); return r }, "clock"},
	}
	for _, b := range bad {
		if err := db.AppendReadings(ok, b.r(ok)); err == nil || !strings.Contains(err.Error(), b.want) {
			t.Errorf("want an error about %q, got %v", b.want, err)
		}
	}
	if _, err := db.SensorHistory(SensorQuery{Sensor: "a", Since: t0, Until: t0.Add(24 * time.Hour), Step: time.Second}); err == nil || !strings.HasSuffix(err.Error(), "24h in steps of 1s is 86400 points, more than 10000; use a step of at least 10s") {
		t.Errorf("a day in seconds: %v", err)
	}
	if _, err := db.SensorHistory(SensorQuery{Sensor: "a", Since: t0, Until: t0.Add(365 * 24 * time.Hour), Step: time.Minute}); err == nil || !strings.Contains(err.Error(), "use a step of at least") {
		t.Errorf("too many points: %v", err)
	}
	if _, err := db.SensorHistory(SensorQuery{Sensor: "a", Since: t0, Until: t0}); err == nil {
		t.Error("an empty range was accepted")
	}
	appendSpan(t, db, []string{"a", "b"}, t0, t0.Add(2*time.Hour), time.Minute, func(time.Time) float64 { return 1 })
	db.AppendReadings(Reading{Sensor: "a", Quantity: "t", Time: t0.Add(3 * time.Hour), Value: 2}) // waiting
	if err := db.DeleteSensorHistory("a"); err != nil {
		t.Fatal(err)
	}
	if err := db.FlushSensors(); err != nil {
		t.Fatal(err)
	}
	if ss, _ := db.SensorHistory(SensorQuery{Sensor: "a", Since: t0, Until: t0.Add(4 * time.Hour)}); len(ss) != 0 {
		t.Fatalf("deleted sensor still has %d series", len(ss))
	}
	if ss, _ := db.SensorHistory(SensorQuery{Sensor: "b", Since: t0, Until: t0.Add(4 * time.Hour)}); len(ss) != 1 || len(ss[0].Points) == 0 {
		t.Fatal("the other sensor was deleted")
	}
	if err := db.DeleteSensorHistory("never-there"); err != nil {
		t.Fatal(err)
	}
	if _, err := db.SensorHistory(SensorQuery{Since: t0, Until: t0.Add(time.Hour)}); err == nil {
		t.Error("a query without a sensor was accepted")
	}
}

// TestSensorRecordsCheck: the full check and salvage accept what the
// sensor code writes and refuse damaged blocks.
func TestSensorRecordsCheck(t *testing.T) {
	for _, v := range [][]byte{encodeRaw([]rawSample{{1, 2}, {5, 3}}), encodeRollups(&[24]rollup{3: {1, 2, 3, 4}})} {
		k := blockKey('r', 3600)
		if len(v)%rawSampleSize != 1 {
			k[0] = 'h'
		}
		if err := checkSensorRecord(k, v); err != nil {
			t.Errorf("%x: %v", v, err)
		}
	}
	for _, c := range []struct{ k, v []byte }{
		{blockKey('r', 0), []byte{1, 0, 5, 0, 0, 0, 0, 0, 4, 0, 0, 0, 0}}, // out of order
		{blockKey('r', 0), []byte{2}},                                     // unknown version
		{blockKey('h', 0), []byte{1, 0, 0, 1}},                            // an hour announced, none there
		{[]byte("zz"), []byte{1}},
	} {
		if err := checkSensorRecord(c.k, c.v); err == nil {
			t.Errorf("%x=%x accepted", c.k, c.v)
		}
	}
}

// BenchmarkSensorYear: a year of history for five sensors at one sample a
// minute; reports the file's size and the record bytes per series, and
// times a 7-day query (served from the hourly rollups) and a 24-hour query
// at five-minute steps (from the raw samples).
func BenchmarkSensorYear(b *testing.B) {
	db := openSensors(b)
	sensors := []string{"greenhouse", "attic", "cellar", "outside", "fridge"}
	end := t0.Add(365 * 24 * time.Hour)
	start := time.Now()
	appendSpan(b, db, sensors, t0, end, time.Minute, func(ts time.Time) float64 { return 20 + 5*math.Sin(float64(ts.Unix())/3600) })
	build := time.Since(start)
	db.bolt.NoSync = false
	db.Close()
	st, err := os.Stat(db.path)
	if err != nil {
		b.Fatal(err)
	}
	db, err = Open(db.path, Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()
	var records int
	db.bolt.View(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(BucketSensors)).ForEachBucket(func(s []byte) error {
			return tx.Bucket([]byte(BucketSensors)).Bucket(s).Bucket([]byte("temperature")).ForEach(func(k, v []byte) error {
				records += len(k) + len(v)
				return nil
			})
		})
	})
	var week, day time.Duration
	b.ResetTimer()
	for b.Loop() {
		t1 := time.Now()
		s, err := db.SensorHistory(SensorQuery{Sensor: "greenhouse", Since: end.Add(-7 * 24 * time.Hour), Until: end})
		week += time.Since(t1)
		if err != nil || len(s) != 1 || len(s[0].Points) != 168 {
			b.Fatalf("7 days: %v %v", err, s)
		}
		t2 := time.Now()
		s, err = db.SensorHistory(SensorQuery{Sensor: "greenhouse", Since: end.Add(-24 * time.Hour), Until: end, Step: 5 * time.Minute})
		day += time.Since(t2)
		if err != nil || len(s[0].Points) != 288 {
			b.Fatalf("24 h: %v", err)
		}
	}
	n := float64(b.N)
	b.ReportMetric(float64(st.Size()), "file-bytes")
	b.ReportMetric(float64(records)/float64(len(sensors)), "record-bytes/series")
	b.ReportMetric(float64(week.Microseconds())/n, "µs/7d-query")
	b.ReportMetric(float64(day.Microseconds())/n, "µs/24h-query")
	b.ReportMetric(build.Seconds(), "s-to-build")
}
