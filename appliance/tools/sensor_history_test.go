package tools_test

import (
	"context"
	"io"
	"log/slog"
	"math"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/tools"
	"github.com/perchhq/perch/drivers/sensor"
	"github.com/perchhq/perch/store"
)

// TestSensorHistoryAnswersHowColdItGot: "how cold did the greenhouse get
// last night?" has an answer: the lowest value, when, and the night hour
// by hour, read from the stored history.
func TestSensorHistoryAnswersHowColdItGot(t *testing.T) {
	db, err := store.Open(filepath.Join(t.TempDir(), "perch.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	evening := time.Date(2026, 3, 1, 18, 0, 0, 0, time.UTC)
	var rs []store.Reading
	for ts := evening; ts.Before(evening.Add(15 * time.Hour)); ts = ts.Add(10 * time.Minute) {
		// Colder towards 04:00, 3.4 °C at its coldest.
		h := ts.Sub(evening).Hours()
		rs = append(rs, store.Reading{Sensor: "greenhouse", Quantity: "temperature", Unit: "°C", Time: ts, Value: 3.4 + math.Abs(h-10)})
	}
	if err := db.AppendReadings(rs...); err != nil {
		t.Fatal(err)
	}
	set, err := sensor.NewSet([]sensor.Spec{{Name: "greenhouse", Type: "sht3x", Bus: "1"}}, sensor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := tools.NewRegistry(slog.New(slog.NewTextHandler(io.Discard, nil)))
	r.Register(tools.NewSensor(set, db, time.UTC))
	res := r.Execute(context.Background(), "sensor",
		`{"action":"history","name":"Greenhouse","since":"2026-03-01T18:00:00Z","until":"2026-03-02T09:00:00Z"}`)
	if res.IsError() {
		t.Fatal(res.ForLLM)
	}
	for _, want := range []string{
		"greenhouse from Sun 2026-03-01 18:00 to Mon 2026-03-02 09:00 (UTC), one line per 30 minutes:",
		"temperature (°C): lowest 3.4 between Mon 2026-03-02 04:00 and 04:30, highest 13.4 between Sun 2026-03-01 18:00 and 18:30, mean ",
		"over 90 samples",
		"  Mon 2026-03-02 04:00  min 3.4  mean 3.57  max 3.73",
	} {
		if !strings.Contains(res.ForLLM, want) {
			t.Errorf("answer lacks %q:\n%s", want, res.ForLLM)
		}
	}
	if n := strings.Count(res.ForLLM, "\n  "); n != 30 {
		t.Errorf("%d point lines, want 30 (15 h in half hours)", n)
	}

	for args, want := range map[string]string{
		`{"action":"history"}`:                                    "name is required",
		`{"action":"history","name":"attic"}`:                     `no sensor named "attic"; configured: greenhouse`,
		`{"action":"history","name":"greenhouse","since":"soon"}`: `since: "soon" is neither a time`,
		`{"action":"history","name":"greenhouse","step":"0"}`:     "step:",
	} {
		if res := r.Execute(context.Background(), "sensor", args); !res.IsError() || !strings.Contains(res.ForLLM, want) {
			t.Errorf("%s = %q, want an error containing %q", args, res.ForLLM, want)
		}
	}
	empty := r.Execute(context.Background(), "sensor", `{"action":"history","name":"greenhouse","since":"2025-01-01T00:00:00Z","until":"2025-01-02T00:00:00Z"}`)
	if empty.IsError() || !strings.Contains(empty.ForLLM, "No readings were stored in this range") {
		t.Errorf("empty range: %s", empty.ForLLM)
	}
	noHistory := tools.NewRegistry(slog.New(slog.NewTextHandler(io.Discard, nil)))
	noHistory.Register(tools.NewSensor(set, nil, nil))
	if res := noHistory.Execute(context.Background(), "sensor", `{"action":"history","name":"greenhouse"}`); !res.IsError() || !strings.Contains(res.ForLLM, "keeps no sensor history") {
		t.Errorf("without history: %s", res.ForLLM)
	}
}

// TestSensorHistoryStepIsTheStoresStep: a step the store rounds (90m to
// 2 h, its rollups being hourly) is worded as the step the points have.
func TestSensorHistoryStepIsTheStoresStep(t *testing.T) {
	r := historyRegistry(t, time.UTC)
	res := r.Execute(context.Background(), "sensor",
		`{"action":"history","name":"greenhouse","since":"2026-03-09T00:00:00Z","until":"2026-03-09T12:00:00Z","step":"90m"}`)
	if res.IsError() {
		t.Fatal(res.ForLLM)
	}
	for _, want := range []string{
		"greenhouse from Mon 2026-03-09 00:00 to Mon 2026-03-09 12:00 (UTC), one line per 2 hours:",
		"lowest 192 between Mon 2026-03-09 00:00 and 02:00,",
		"  Mon 2026-03-09 02:00  min 194  mean 194.5  max 195",
	} {
		if !strings.Contains(res.ForLLM, want) {
			t.Errorf("answer lacks %q:\n%s", want, res.ForLLM)
		}
	}
}

// historyRegistry holds the sensor tool showing times in loc, over nine
// days of a greenhouse sampled every 10 minutes from 2026-03-01 00:00 UTC,
// its value the hours since then.
func historyRegistry(t *testing.T, loc *time.Location) *tools.Registry {
	t.Helper()
	db, err := store.Open(filepath.Join(t.TempDir(), "perch.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	start := time.Date(2026, 3, 1, 0, 0, 0, 0, time.UTC)
	var rs []store.Reading
	for ts := start; ts.Before(start.Add(9 * 24 * time.Hour)); ts = ts.Add(10 * time.Minute) {
		rs = append(rs, store.Reading{Sensor: "greenhouse", Quantity: "temperature", Unit: "°C", Time: ts, Value: float64(ts.Sub(start) / time.Hour)})
	}
	if err := db.AppendReadings(rs...); err != nil {
		t.Fatal(err)
	}
	set, err := sensor.NewSet([]sensor.Spec{{Name: "greenhouse", Type: "sht3x", Bus: "1"}}, sensor.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := tools.NewRegistry(slog.New(slog.NewTextHandler(io.Discard, nil)))
	r.Register(tools.NewSensor(set, db, loc))
	return r
}

// TestSensorHistoryDaysAreLocalDays: daily points run from local midnight
// to midnight in the zone the tool shows times in (they were UTC days,
// "Sun 16:00" to "Mon 16:00" in California), the day DST begins is 23
// hours, and a first point starting before since is shown from since.
func TestSensorHistoryDaysAreLocalDays(t *testing.T) {
	la, err := time.LoadLocation("America/Los_Angeles")
	if err != nil {
		t.Skip(err)
	}
	r := historyRegistry(t, la)
	for _, tc := range []struct {
		args  string
		lines int
		want  []string
	}{
		{`"since":"2026-03-02T00:00:00-08:00","until":"2026-03-08T00:00:00-08:00","step":"1d"`, 6, []string{
			"one line per day:",
			// Local midnight is 08:00 UTC, 32 hours into the readings.
			"lowest 32 between Mon 2026-03-02 00:00 and Tue 2026-03-03 00:00,",
			"  Mon 2026-03-02 00:00  min 32  mean 43.5  max 55\n",
			"  Sat 2026-03-07 00:00  min 152  mean 163.5  max 175",
		}},
		{`"since":"2026-03-07T00:00:00-08:00","until":"2026-03-09T00:00:00-07:00","step":"1d"`, 2, []string{
			"highest 198 between Sun 2026-03-08 00:00 and Mon 2026-03-09 00:00,",
			"  Sun 2026-03-08 00:00  min 176  mean 187  max 198", // 23 hours
		}},
		{`"since":"2026-03-02T14:30:00-08:00","until":"2026-03-04T00:00:00-08:00","step":"1d"`, 2, []string{
			"lowest 46 between Mon 2026-03-02 14:30 and Tue 2026-03-03 00:00,",
			"  Mon 2026-03-02 14:30  min 46  mean 50.5  max 55\n",
			"  Tue 2026-03-03 00:00  min 56",
		}},
		{`"since":"2026-03-02T00:00:00-08:00","until":"2026-03-02T12:00:00-08:00","step":"2h"`, 6, []string{
			"  Mon 2026-03-02 00:00  min 32  mean 32.5  max 33\n",
			"  Mon 2026-03-02 10:00  min 42",
		}},
	} {
		res := r.Execute(context.Background(), "sensor", `{"action":"history","name":"greenhouse",`+tc.args+`}`)
		if res.IsError() {
			t.Fatal(res.ForLLM)
		}
		for _, want := range tc.want {
			if !strings.Contains(res.ForLLM+"\n", want) {
				t.Errorf("%s: answer lacks %q:\n%s", tc.args, want, res.ForLLM)
			}
		}
		if n := strings.Count(res.ForLLM, "\n  "); n != tc.lines {
			t.Errorf("%s: %d point lines, want %d:\n%s", tc.args, n, tc.lines, res.ForLLM)
		}
	}
}
