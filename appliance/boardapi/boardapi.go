// Package boardapi serves the board's hardware over the gateway's HTTP API,
// for the web page and for scripts: the sensors' latest readings and their
// history, and the I²C buses with a scan of what answers on one.
//
// # Concepts
//
// Every route is Protected (the API token, or loopback when there is none),
// like /admin/*: readings and the parts found on a bus describe the owner's
// home. Nothing here writes to a device: the scan only probes addresses the
// way i2cdetect does (a read byte, or a quick write where that is safe),
// and the page asks before it starts one.
//
//	GET  /sensors                                   latest reading of every configured sensor
//	GET  /sensors/history?name=&since=&until=&step=&quantity=&tz=
//	GET  /i2c                                       the I²C buses present
//	POST /i2c/scan {"bus": "1"}                     addresses that answer, with likely parts
//
// History times are RFC 3339, or a span back from now: "24h", "90m", "7d",
// "2w", "1y". The step is a duration ("5m", "1h", "1d") or seconds; without
// one the store picks a step giving about 300 points. Series are columnar
// (t, min, mean, max, n arrays), the shape a chart library draws directly,
// and about a third of the size of an array of point objects.
package boardapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/perchhq/perch/appliance/api"
	"github.com/perchhq/perch/appliance/gateway"
	"github.com/perchhq/perch/appliance/sampler"
	"github.com/perchhq/perch/drivers/i2c"
	"github.com/perchhq/perch/drivers/sensor"
	"github.com/perchhq/perch/store"
)

// History is the store's sensor history; *store.DB implements it.
type History interface {
	SensorHistory(q store.SensorQuery) ([]store.SensorSeries, error)
}

// Deps are what the routes read.
type Deps struct {
	Sensors *sensor.Set
	Sampler *sampler.Sampler
	History History
	// ScanReport words a scan as the i2c tool does (tools.ScanReport).
	ScanReport func(i2c.ScanResult) string
	// Now is the clock (default time.Now).
	Now func() time.Time
	// Location is the board's time zone, whose days the history's points
	// of an hour or more follow unless the query names another (tz=);
	// nil means UTC.
	Location *time.Location
}

// Register adds the routes to s.
func Register(s *gateway.Server, d Deps) {
	if d.Now == nil {
		d.Now = time.Now
	}
	s.Handle(http.MethodGet, "/sensors", gateway.Protected, d.latest)
	s.Handle(http.MethodGet, "/sensors/history", gateway.Protected, d.history)
	s.Handle(http.MethodGet, "/i2c", gateway.Protected, buses)
	s.Handle(http.MethodPost, "/i2c/scan", gateway.Protected, d.scan)
}

// SensorsBody is GET /sensors.
type SensorsBody struct {
	// SampleSeconds is the sampling interval of the history.
	SampleSeconds int              `json:"sample_seconds"`
	Sensors       []sampler.Latest `json:"sensors"`
	// Status says, per sensor, whether its bus or device is present.
	Status []sensor.Status `json:"status"`
}

func (d Deps) latest(w http.ResponseWriter, r *http.Request) {
	body := SensorsBody{Sensors: []sampler.Latest{}, Status: []sensor.Status{}}
	if d.Sampler != nil {
		body.Sensors = d.Sampler.Latest()
		body.SampleSeconds = int(d.Sampler.Every() / time.Second)
	}
	if d.Sensors != nil {
		body.Status = d.Sensors.Status()
	}
	gateway.WriteJSON(w, http.StatusOK, body)
}

// Series is one quantity's history, columnar.
type Series struct {
	Quantity string `json:"quantity"`
	Unit     string `json:"unit"`
	// RawSince is where points of the step begin when it is under an
	// hour; earlier points are hourly.
	RawSince *time.Time `json:"raw_since,omitempty"`
	// T holds each point's start in Unix seconds.
	T    []int64   `json:"t"`
	Min  []float64 `json:"min"`
	Mean []float64 `json:"mean"`
	Max  []float64 `json:"max"`
	N    []int     `json:"n"`
}

// HistoryBody is GET /sensors/history.
type HistoryBody struct {
	Sensor      string    `json:"sensor"`
	Since       time.Time `json:"since"`
	Until       time.Time `json:"until"`
	StepSeconds int64     `json:"step_seconds"`
	// TimeZone is the zone whose days points of an hour or more follow (a
	// daily point starts at its midnight).
	TimeZone string   `json:"time_zone"`
	Series   []Series `json:"series"`
}

func (d Deps) history(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	now := d.Now()
	name := strings.TrimSpace(q.Get("name"))
	if name == "" {
		gateway.WriteError(w, http.StatusBadRequest, `name is missing: give the sensor's name, e.g. /sensors/history?name=greenhouse&since=24h`+d.known())
		return
	}
	if d.Sensors != nil {
		sp, ok := d.Sensors.Find(name)
		if !ok {
			gateway.WriteError(w, http.StatusNotFound, fmt.Sprintf("no sensor named %q%s", name, d.known()))
			return
		}
		name = sp.Name
	}
	since, err := api.ParseTime(q.Get("since"), now, now.Add(-24*time.Hour))
	if err != nil {
		gateway.WriteError(w, http.StatusBadRequest, "since: "+err.Error())
		return
	}
	until, err := api.ParseTime(q.Get("until"), now, now)
	if err != nil {
		gateway.WriteError(w, http.StatusBadRequest, "until: "+err.Error())
		return
	}
	var step time.Duration
	if s := q.Get("step"); s != "" {
		if step, err = api.ParseSpan(s); err != nil {
			gateway.WriteError(w, http.StatusBadRequest, "step: "+err.Error())
			return
		}
	}
	loc := d.Location
	if loc == nil {
		loc = time.UTC
	}
	if tz := q.Get("tz"); tz != "" {
		if loc, err = time.LoadLocation(tz); err != nil {
			gateway.WriteError(w, http.StatusBadRequest, fmt.Sprintf("tz: unknown time zone %q; give an IANA name such as Europe/Berlin, or UTC (the default is the board's, agents.defaults.timezone)", tz))
			return
		}
	}
	ss, err := d.History.SensorHistory(store.SensorQuery{Sensor: name, Quantity: q.Get("quantity"), Since: since, Until: until, Step: step, Location: loc})
	if err != nil {
		gateway.WriteError(w, http.StatusBadRequest, strings.TrimPrefix(err.Error(), "store: sensor history: "))
		return
	}
	body := HistoryBody{Sensor: name, Since: since.UTC(), Until: until.UTC(), TimeZone: zoneName(loc), Series: []Series{}}
	for _, s := range ss {
		body.StepSeconds = int64(s.Step / time.Second)
		out := Series{Quantity: s.Quantity, Unit: s.Unit, T: make([]int64, len(s.Points)),
			Min: make([]float64, len(s.Points)), Mean: make([]float64, len(s.Points)),
			Max: make([]float64, len(s.Points)), N: make([]int, len(s.Points))}
		if !s.RawSince.IsZero() {
			rs := s.RawSince
			out.RawSince = &rs
		}
		for i, p := range s.Points {
			out.T[i], out.Min[i], out.Mean[i], out.Max[i], out.N[i] = p.T.Unix(), round(p.Min), round(p.Mean), round(p.Max), p.N
		}
		body.Series = append(body.Series, out)
	}
	gateway.WriteJSON(w, http.StatusOK, body)
}

// zoneName names loc for a client: the system's zone by its name in the
// zone database where /etc/localtime says it.
func zoneName(loc *time.Location) string {
	if loc != time.Local {
		return loc.String()
	}
	if tz := os.Getenv("TZ"); tz != "" {
		return strings.TrimPrefix(tz, ":")
	}
	if target, err := os.Readlink("/etc/localtime"); err == nil {
		if _, name, ok := strings.Cut(target, "zoneinfo/"); ok {
			return name
		}
	}
	return loc.String()
}

// round keeps the digits a float32 holds: the store keeps values as
// float32, and their float64 form (21.370000839233) only lengthens the
// body.
func round(v float64) float64 {
	f, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 7, 64), 64)
	return f
}

func (d Deps) known() string {
	if d.Sensors == nil || d.Sensors.Len() == 0 {
		return "; no sensor is configured (add one under \"sensors\" in the config)"
	}
	names := make([]string, 0, d.Sensors.Len())
	for _, sp := range d.Sensors.Specs() {
		names = append(names, sp.Name)
	}
	return "; configured: " + strings.Join(names, ", ")
}

// BusesBody is GET /i2c.
type BusesBody struct {
	Buses []i2c.BusInfo `json:"buses"`
	// Error says why there are none (I²C not enabled, and how to).
	Error string `json:"error,omitempty"`
}

func buses(w http.ResponseWriter, r *http.Request) {
	bs, err := i2c.Buses()
	body := BusesBody{Buses: bs}
	if body.Buses == nil {
		body.Buses = []i2c.BusInfo{}
	}
	if err != nil {
		body.Error = err.Error()
	}
	gateway.WriteJSON(w, http.StatusOK, body)
}

// ScanRequest is POST /i2c/scan.
type ScanRequest struct {
	Bus sensor.BusName `json:"bus"`
}

// Found is an address that answered, with the parts usually there.
type Found struct {
	Address int    `json:"address"`
	Hex     string `json:"hex"`
	Busy    bool   `json:"busy,omitempty"`   // owned by a kernel driver (UU)
	Driver  string `json:"driver,omitempty"` // that driver, when sysfs names it
	// DriverBus is the bus the owned device is declared on when that is
	// another bus a multiplexer joins to the scanned one.
	DriverBus *int          `json:"driver_bus,omitempty"`
	Parts     []sensor.Part `json:"parts"`
}

// ScanBody is the answer of POST /i2c/scan.
type ScanBody struct {
	Bus     i2c.BusInfo `json:"bus"`
	Method  string      `json:"method"`
	Found   []Found     `json:"found"`
	Skipped int         `json:"skipped"`
	// Text is the i2c tool's report: the i2cdetect table and the hints.
	Text string `json:"text"`
}

func (d Deps) scan(w http.ResponseWriter, r *http.Request) {
	var req ScanRequest
	if !gateway.DecodeJSON(w, r, &req) {
		return
	}
	b, err := i2c.Open(strings.TrimSpace(string(req.Bus)))
	if err != nil {
		gateway.WriteError(w, scanStatus(err), err.Error())
		return
	}
	defer b.Close()
	ctx, cancel := context.WithTimeout(r.Context(), 20*time.Second)
	defer cancel()
	res, err := b.Scan(ctx)
	if err != nil {
		gateway.WriteError(w, http.StatusBadGateway, err.Error())
		return
	}
	body := ScanBody{Bus: res.Bus, Method: res.Method, Found: []Found{}, Skipped: len(res.Skipped)}
	add := func(addr int, busy bool) {
		parts := sensor.Suggest(addr)
		if parts == nil {
			parts = []sensor.Part{}
		}
		f := Found{Address: addr, Hex: fmt.Sprintf("0x%02x", addr), Busy: busy, Driver: res.Drivers[addr], Parts: parts}
		if on, ok := res.DriverBus[addr]; ok {
			f.DriverBus = &on
		}
		body.Found = append(body.Found, f)
	}
	for _, a := range res.Found {
		add(a, false)
	}
	for _, a := range res.Busy {
		add(a, true)
	}
	if d.ScanReport != nil {
		body.Text = d.ScanReport(res)
	}
	gateway.WriteJSON(w, http.StatusOK, body)
}

// scanStatus: a bus that is not there is the caller's to fix (404), any
// other failure to open one is the machine's (502, like an upstream).
func scanStatus(err error) int {
	if errors.Is(err, i2c.ErrNoBus) || errors.Is(err, i2c.ErrUnknownBus) {
		return http.StatusNotFound
	}
	return http.StatusBadGateway
}
