package boardapi

import (
	"encoding/json"
	"log/slog"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"periph.io/x/conn/v3/i2c/i2ctest"

	"github.com/perchhq/perch/appliance/gateway"
	"github.com/perchhq/perch/appliance/sampler"
	"github.com/perchhq/perch/appliance/tools"
	"github.com/perchhq/perch/drivers/hwtest"
	"github.com/perchhq/perch/drivers/sensor"
	"github.com/perchhq/perch/store"
)

const token = "tok-boardapi-0123456789abcdef"

// now is the test's clock: two days of history end here.
var now = time.Date(2026, 3, 3, 12, 0, 0, 0, time.UTC)

type fixture struct {
	srv *gateway.Server
	db  *store.DB
}

func setup(t *testing.T) *fixture { return setupIn(t, nil) }

// setupIn is setup with the board's time zone loc.
func setupIn(t *testing.T, loc *time.Location) *fixture {
	t.Helper()
	db, err := store.Open(filepath.Join(t.TempDir(), "perch.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	// Two days of a reading a minute: temperature 10 + hour of day,
	// humidity 50.
	var rs []store.Reading
	for ts := now.Add(-48 * time.Hour); ts.Before(now); ts = ts.Add(time.Minute) {
		rs = append(rs,
			store.Reading{Sensor: "greenhouse", Quantity: "temperature", Unit: "°C", Time: ts, Value: 10 + float64(ts.Hour())},
			store.Reading{Sensor: "greenhouse", Quantity: "humidity", Unit: "%", Time: ts, Value: 50})
	}
	if err := db.AppendReadings(rs...); err != nil {
		t.Fatal(err)
	}
	if err := db.FlushSensors(); err != nil {
		t.Fatal(err)
	}
	set, err := sensor.NewSet([]sensor.Spec{{Name: "greenhouse", Type: "sht3x", Bus: "FAKE-BOARDAPI"}}, sensor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := gateway.New(gateway.Options{Host: "127.0.0.1", Token: token, Log: slog.New(slog.DiscardHandler)})
	smp := sampler.New(sampler.Options{Sensors: set, Store: db, Every: time.Minute, Log: slog.New(slog.DiscardHandler)})
	Register(s, Deps{Sensors: set, Sampler: smp, History: db, ScanReport: tools.ScanReport, Now: func() time.Time { return now }, Location: loc})
	return &fixture{srv: s, db: db}
}

func (f *fixture) get(t *testing.T, method, path, tok, body string, out any) int {
	t.Helper()
	req := httptest.NewRequest(method, path, strings.NewReader(body))
	req.Host = "127.0.0.1:8080"
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	if tok != "" {
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	rec := httptest.NewRecorder()
	f.srv.ServeHTTP(rec, req)
	if out != nil {
		if err := json.Unmarshal(rec.Body.Bytes(), out); err != nil {
			t.Fatalf("%s %s: %d %s", method, path, rec.Code, rec.Body)
		}
	}
	return rec.Code
}

// TestHistoryServesEachRange: the page's three ranges come back columnar
// with the store's downsampling: minutes for a day, hours for a week,
// days for a year.
func TestHistoryServesEachRange(t *testing.T) {
	f := setup(t)
	for _, tc := range []struct {
		query     string
		step      int64
		maxPoints int
	}{
		{"since=24h", 300, 289},
		{"since=7d", 3600, 49},
		{"since=1y", 2 * 86400, 3},
		{"since=24h&step=1h&quantity=temperature", 3600, 25},
		{"since=2026-03-03T09:00:00Z&until=2026-03-03T11:00:00Z&step=10m", 600, 12},
	} {
		t.Run(tc.query, func(t *testing.T) {
			var h HistoryBody
			if code := f.get(t, "GET", "/sensors/history?name=GreenHouse&"+tc.query, token, "", &h); code != 200 {
				t.Fatalf("code %d", code)
			}
			if h.Sensor != "greenhouse" || h.StepSeconds != tc.step || len(h.Series) == 0 {
				t.Fatalf("body %+v", h)
			}
			for _, s := range h.Series {
				n := len(s.T)
				if n == 0 || n > tc.maxPoints || len(s.Min) != n || len(s.Mean) != n || len(s.Max) != n || len(s.N) != n {
					t.Errorf("%s: %d points (max %d), columns %d/%d/%d/%d", s.Quantity, n, tc.maxPoints, len(s.Min), len(s.Mean), len(s.Max), len(s.N))
				}
				for i := range n {
					if s.Min[i] > s.Mean[i] || s.Mean[i] > s.Max[i] || (i > 0 && s.T[i] <= s.T[i-1]) {
						t.Fatalf("%s point %d: t %d min %v mean %v max %v", s.Quantity, i, s.T[i], s.Min[i], s.Mean[i], s.Max[i])
					}
				}
			}
		})
	}
	// The hour 09:00-10:00 on the last day has every value at 19 °C.
	var h HistoryBody
	f.get(t, "GET", "/sensors/history?name=greenhouse&quantity=temperature&since=2026-03-03T09:00:00Z&until=2026-03-03T10:00:00Z&step=1h", token, "", &h)
	if s := h.Series[0]; len(s.T) != 1 || s.Min[0] != 19 || s.Max[0] != 19 || s.N[0] != 60 || s.Unit != "°C" {
		t.Errorf("one hour = %+v", h.Series)
	}
}

// TestHistoryDaysFollowTheBoardsZone: daily points start at the board's
// midnight, as the sensor tool's do, and at the midnight of the zone the
// query names (tz=) instead when it names one; the body says which.
func TestHistoryDaysFollowTheBoardsZone(t *testing.T) {
	board := time.FixedZone("UTC+9", 9*3600)
	f := setupIn(t, board)
	for _, tc := range []struct {
		query, zone string
		midnight    int64 // seconds after 00:00 UTC at which each point starts
	}{
		{"", "UTC+9", 15 * 3600},
		{"&tz=UTC", "UTC", 0},
	} {
		var h HistoryBody
		if code := f.get(t, "GET", "/sensors/history?name=greenhouse&quantity=temperature&since=2026-02-28T00:00:00Z&step=1d"+tc.query, token, "", &h); code != 200 {
			t.Fatalf("%q: code %d", tc.query, code)
		}
		if h.TimeZone != tc.zone || h.StepSeconds != 86400 || len(h.Series) != 1 || len(h.Series[0].T) < 2 {
			t.Fatalf("%q: body %+v", tc.query, h)
		}
		for _, ts := range h.Series[0].T[1:] { // the first starts at since
			if ts%86400 != tc.midnight {
				t.Errorf("%q: a daily point starts at %s, want the zone's midnight", tc.query, time.Unix(ts, 0).In(board))
			}
		}
	}
	var h HistoryBody
	setup(t).get(t, "GET", "/sensors/history?name=greenhouse&since=2d&step=1d", token, "", &h)
	if h.TimeZone != "UTC" {
		t.Errorf("with no board zone the body says %q, want UTC", h.TimeZone)
	}
}

func TestHistoryRefusesBadQueries(t *testing.T) {
	f := setup(t)
	for _, tc := range []struct {
		query  string
		tok    string
		status int
		want   string
	}{
		{"?name=greenhouse", "", 401, "gateway.api_token"},
		{"", token, 400, "name is missing"},
		{"?name=attic", token, 404, `no sensor named "attic"; configured: greenhouse`},
		{"?name=greenhouse&since=yesterday", token, 400, `since: "yesterday" is neither a time`},
		{"?name=greenhouse&until=later", token, 400, "until:"},
		{"?name=greenhouse&step=-5m", token, 400, "step:"},
		{"?name=greenhouse&since=1y&step=1m", token, 400, "use a step of at least"},
		{"?name=greenhouse&since=1h&until=2h", token, 400, "must be before"},
		{"?name=greenhouse&tz=Mars/Olympus", token, 400, `tz: unknown time zone "Mars/Olympus"; give an IANA name`},
	} {
		var e struct{ Error string }
		if code := f.get(t, "GET", "/sensors/history"+tc.query, tc.tok, "", &e); code != tc.status || !strings.Contains(e.Error, tc.want) {
			t.Errorf("%s = %d %q, want %d with %q", tc.query, code, e.Error, tc.status, tc.want)
		}
	}
}

// TestLatestAndScan: /sensors lists each sensor with its bus state; a scan
// of a bus lists what answered with the likely parts and the i2c tool's
// report.
func TestLatestAndScan(t *testing.T) {
	f := setup(t)
	var b SensorsBody
	if code := f.get(t, "GET", "/sensors", token, "", &b); code != 200 || b.SampleSeconds != 60 || len(b.Sensors) != 1 || len(b.Status) != 1 {
		t.Fatalf("/sensors = %d %+v", code, b)
	}
	hwtest.I2C(t, "FAKE-BOARDAPI", nil, 83, &i2ctest.Playback{DontPanic: true, Ops: []i2ctest.IO{
		{Addr: 0x44, R: []byte{0}},
		{Addr: 0x76, R: []byte{0}},
	}})
	hwtest.I2CDriver(t, 83, 0x68, "rtc-ds1307")
	var buses BusesBody
	if code := f.get(t, "GET", "/i2c", token, "", &buses); code != 200 || len(buses.Buses) == 0 {
		t.Fatalf("/i2c = %d %+v", code, buses)
	}
	var scan ScanBody
	// The bus as a number, as people write it, is the same bus.
	if code := f.get(t, "POST", "/i2c/scan", token, `{"bus":83}`, &scan); code != 200 {
		t.Fatalf("scan = %d %+v", code, scan)
	}
	if len(scan.Found) != 3 || scan.Found[0].Hex != "0x44" || scan.Found[0].Parts[0].Type != "sht3x" ||
		scan.Found[1].Hex != "0x76" || scan.Found[1].Parts[0].Name != "BME280" || !strings.Contains(scan.Text, "0x76 (118): likely BME280 (type bme280)") {
		t.Errorf("scan = %+v", scan)
	}
	// An address a kernel driver owns is listed with the driver, unprobed.
	if f := scan.Found[len(scan.Found)-1]; f.Hex != "0x68" || !f.Busy || f.Driver != "rtc-ds1307" ||
		!strings.Contains(scan.Text, "kernel driver rtc-ds1307 (to unbind it: echo 83-0068 > /sys/bus/i2c/drivers/rtc-ds1307/unbind)") {
		t.Errorf("scan = %+v", scan)
	}
	// A device a driver owns behind a multiplexer on the bus is listed
	// with the bus it is declared on, and the unbind command names it.
	hwtest.I2CMux(t, 83, 84)
	hwtest.I2CDriver(t, 84, 0x50, "at24")
	scan = ScanBody{}
	if code := f.get(t, "POST", "/i2c/scan", token, `{"bus":"83"}`, &scan); code != 200 {
		t.Fatalf("scan = %d %+v", code, scan)
	}
	if f := scan.Found[len(scan.Found)-2]; f.Hex != "0x50" || !f.Busy || f.Driver != "at24" || f.DriverBus == nil || *f.DriverBus != 84 ||
		!strings.Contains(scan.Text, "kernel driver at24 of the device on bus 84, behind a multiplexer on this bus (to unbind it: echo 84-0050 > /sys/bus/i2c/drivers/at24/unbind)") {
		t.Errorf("scan = %+v", scan)
	}
	if f := scan.Found[len(scan.Found)-1]; f.Hex != "0x68" || f.DriverBus != nil {
		t.Errorf("the bus's own driver: %+v", f)
	}
	var e struct{ Error string }
	if code := f.get(t, "POST", "/i2c/scan", token, `{"bus":"99"}`, &e); code != 404 || !strings.Contains(e.Error, `unknown bus "99"`) {
		t.Errorf("scan of a missing bus = %d %q", code, e.Error)
	}
	if code := f.get(t, "POST", "/i2c/scan", token, `{"bus":8.5}`, &e); code != 400 || e.Error != `"bus" must be a string, not 8.5` {
		t.Errorf("scan of bus 8.5 = %d %q", code, e.Error)
	}
	if code := f.get(t, "POST", "/i2c/scan", "", `{"bus":"83"}`, &e); code != 401 {
		t.Errorf("scan without the token = %d", code)
	}
}
