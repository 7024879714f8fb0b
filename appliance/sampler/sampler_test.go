package sampler

import (
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"periph.io/x/conn/v3/i2c/i2ctest"

	"github.com/perchhq/perch/drivers/hwtest"
	"github.com/perchhq/perch/drivers/sensor"
	"github.com/perchhq/perch/store"
)

// A DS18B20 on the kernel's 1-wire bus, as sysfs shows it (23.125 °C); it
// can be read any number of times.
const w1Dir = "../../drivers/sensor/testdata/w1-one"

// sht3xRead is one single-shot measurement of an SHT3x at 0x44: 25 °C, 50 %.
func sht3xRead() []i2ctest.IO {
	return []i2ctest.IO{
		{Addr: 0x44, W: []byte{0x24, 0x00}},
		{Addr: 0x44, R: []byte{0x66, 0x66, 0x93, 0x80, 0x00, 0xa2}},
	}
}

func openStore(t *testing.T) *store.DB {
	t.Helper()
	db, err := store.Open(filepath.Join(t.TempDir(), "perch.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

func sensors(t *testing.T, bus string, specs ...sensor.Spec) *sensor.Set {
	t.Helper()
	for i := range specs {
		if specs[i].Type == "sht3x" {
			specs[i].Bus = sensor.BusName(bus)
		}
	}
	set, err := sensor.NewSet(specs, sensor.Options{W1Dir: w1Dir})
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// TestSampleStoresEveryQuantity: one round reads every sensor over its
// real driver (a periph playback bus, a sysfs 1-wire tree) and stores each
// quantity in the history, which the store then answers from.
func TestSampleStoresEveryQuantity(t *testing.T) {
	hwtest.I2C(t, "FAKE-SAMPLER-I2C", nil, 81, &i2ctest.Playback{DontPanic: true, Ops: sht3xRead()})
	db := openStore(t)
	var told [][]Latest
	s := New(Options{Sensors: sensors(t, "81", sensor.Spec{Name: "bath", Type: "sht3x"}, sensor.Spec{Name: "tank", Type: "ds18b20"}),
		Store: db, Every: time.Minute, Log: slog.New(slog.DiscardHandler), OnSample: func(l []Latest) { told = append(told, l) }})
	before := time.Now().Add(-time.Second)
	s.Sample(context.Background())

	latest := s.Latest()
	if len(latest) != 2 || latest[0].Name != "bath" || len(latest[0].Values) != 2 || latest[0].Values[0].Value != 25 ||
		latest[1].Name != "tank" || latest[1].Values[0].Value != 23.13 || latest[0].Time.Before(before) {
		t.Fatalf("latest = %+v", latest)
	}
	if len(told) != 1 || len(told[0]) != 2 {
		t.Errorf("OnSample told %d rounds", len(told))
	}
	for _, q := range []struct {
		sensor, quantity, unit string
		value                  float64
	}{{"bath", "temperature", "°C", 25}, {"bath", "humidity", "%", 50}, {"tank", "temperature", "°C", 23.13}} {
		ss, err := db.SensorHistory(store.SensorQuery{Sensor: q.sensor, Quantity: q.quantity, Since: before, Until: time.Now().Add(time.Second)})
		if err != nil || len(ss) != 1 || len(ss[0].Points) != 1 || ss[0].Unit != q.unit || float32(ss[0].Points[0].Mean) != float32(q.value) {
			t.Errorf("%s/%s history = %+v, %v", q.sensor, q.quantity, ss, err)
		}
	}
	if ok, msg := s.Check(); !ok || msg != "2 sensors sampled every 1 minute" {
		t.Errorf("check = %v %q", ok, msg)
	}
}

// TestFailingSensorKeepsItsLastValues: a sensor that stops answering keeps
// its last values and their time, with the error beside them; the others
// are still stored.
func TestFailingSensorKeepsItsLastValues(t *testing.T) {
	hwtest.I2C(t, "FAKE-SAMPLER-I2C2", nil, 82, &i2ctest.Playback{DontPanic: true, Ops: sht3xRead()})
	db := openStore(t)
	s := New(Options{Sensors: sensors(t, "82", sensor.Spec{Name: "bath", Type: "sht3x"}, sensor.Spec{Name: "tank", Type: "ds18b20"}),
		Store: db, Log: slog.New(slog.DiscardHandler)})
	s.Sample(context.Background())
	first := s.Latest()[0]
	time.Sleep(1100 * time.Millisecond) // the next round is a second later
	s.Sample(context.Background())      // the playback has nothing left: the SHT3x fails
	l := s.Latest()
	if l[0].Error == "" || len(l[0].Values) != 2 || !l[0].Time.Equal(first.Time) || !l[0].Tried.After(first.Time) {
		t.Errorf("failing sensor = %+v, want its last values, their time and the error", l[0])
	}
	if l[1].Error != "" || !l[1].Time.After(first.Time) {
		t.Errorf("working sensor = %+v", l[1])
	}
	if _, msg := s.Check(); !strings.Contains(msg, "not read in the last round: bath") {
		t.Errorf("check = %q", msg)
	}
	// Both rounds are stored: in one minute's point, or in two when the
	// second fell into the next minute.
	ss, _ := db.SensorHistory(store.SensorQuery{Sensor: "tank", Since: first.Time.Add(-time.Minute)})
	n := 0
	if len(ss) == 1 {
		for _, p := range ss[0].Points {
			n += p.N
		}
	}
	if n != 2 {
		t.Errorf("tank history = %+v, want both rounds", ss)
	}
}

// TestClockNotSetIsReported: before NTP sets the clock (a Pi without a
// real-time clock boots in the past) the store refuses readings; the page
// still gets them and Check says why there is no history.
func TestClockNotSetIsReported(t *testing.T) {
	db := openStore(t)
	s := New(Options{Sensors: sensors(t, "", sensor.Spec{Name: "tank", Type: "ds18b20"}), Store: db,
		Log: slog.New(slog.DiscardHandler), Now: func() time.Time { return time.Date(1970, 1, 1, 0, 1, 0, 0, time.UTC) }})
	s.Sample(context.Background())
	if l := s.Latest(); len(l[0].Values) != 1 {
		t.Errorf("latest = %+v", l)
	}
	if _, msg := s.Check(); !strings.Contains(msg, "history not stored") || !strings.Contains(msg, "is the clock set?") {
		t.Errorf("check = %q", msg)
	}
}

// TestStartSamplesOnScheduleAndStops: rounds follow the interval until
// Stop, which waits for the goroutine; without sensors nothing runs.
func TestStartSamplesOnScheduleAndStops(t *testing.T) {
	db := openStore(t)
	var mu sync.Mutex
	rounds := 0
	s := New(Options{Sensors: sensors(t, "", sensor.Spec{Name: "tank", Type: "ds18b20"}), Store: db, Every: 50 * time.Millisecond,
		Log: slog.New(slog.DiscardHandler), OnSample: func([]Latest) { mu.Lock(); rounds++; mu.Unlock() }})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	time.Sleep(400 * time.Millisecond)
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	n := rounds
	mu.Unlock()
	if n < 4 {
		t.Errorf("%d rounds in 400 ms at one per 50 ms", n)
	}
	time.Sleep(150 * time.Millisecond)
	mu.Lock()
	if rounds != n {
		t.Errorf("rounds went on after Stop: %d, then %d", n, rounds)
	}
	mu.Unlock()

	none := New(Options{Store: db})
	if err := none.Start(context.Background()); err != nil || none.done != nil {
		t.Errorf("a sampler without sensors started: %v", err)
	}
	if err := none.Stop(context.Background()); err != nil {
		t.Error(err)
	}
	if ok, msg := none.Check(); !ok || msg != "no sensors configured, nothing to sample" {
		t.Errorf("check = %v %q", ok, msg)
	}
}
