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
