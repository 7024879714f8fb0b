package tools

import (
	"fmt"
	"strings"
	"time"

	"github.com/perchhq/perch/appliance/api"
	"github.com/perchhq/perch/drivers/sensor"
	"github.com/perchhq/perch/store"
)

// maxHistoryRows bounds the points the history action lists per quantity:
// enough for a night in half hours, small enough for the model's context.
const maxHistoryRows = 48

// historySteps are the steps the history action picks from when none is
// given: the smallest giving at most maxHistoryRows points.
var historySteps = []time.Duration{
	time.Minute, 5 * time.Minute, 10 * time.Minute, 15 * time.Minute, 30 * time.Minute,
	time.Hour, 2 * time.Hour, 3 * time.Hour, 6 * time.Hour, 12 * time.Hour,
	24 * time.Hour, 2 * 24 * time.Hour, 7 * 24 * time.Hour, 14 * 24 * time.Hour,
}

func sensorHistory(set *sensor.Set, history SensorHistory, loc *time.Location, args Args, now time.Time) Result {
	if history == nil {
		return Errorf("sensor history: this process keeps no sensor history (the gateway samples the sensors; ask it instead)")
	}
	if set.Len() == 0 {
		return Text(noSensors)
	}
	name := strings.TrimSpace(args.String("name"))
	if name == "" {
		return Errorf("sensor history: name is required: say which sensor (action list shows them)")
	}
	sp, ok := set.Find(name)
	if !ok {
		known := []string{}
		for _, x := range set.Specs() {
			known = append(known, x.Name)
		}
		return Error(&sensor.UnknownSensorError{Name: name, Known: known})
	}
	since, err := api.ParseTime(args.String("since"), now, now.Add(-24*time.Hour))
	if err != nil {
		return Errorf("sensor history: since: %v", err)
	}
	until, err := api.ParseTime(args.String("until"), now, now)
	if err != nil {
		return Errorf("sensor history: until: %v", err)
	}
	if !since.Before(until) {
		return Errorf("sensor history: since (%s) must be before until (%s)", since.In(loc).Format(time.RFC3339), until.In(loc).Format(time.RFC3339))
	}
	var step time.Duration
	if s := strings.TrimSpace(args.String("step")); s != "" {
		if step, err = api.ParseSpan(s); err != nil {
			return Errorf("sensor history: step: %v", err)
		}
		// The store rounds the step; the text must say the one the points
		// have.
		step = store.SensorStep(step)
		if until.Sub(since)/step > maxHistoryRows {
			step = 0 // too fine to list: pick one that fits
		}
	}
	if step == 0 {
		step = historySteps[len(historySteps)-1]
		for _, s := range historySteps {
			if until.Sub(since)/s <= maxHistoryRows {
				step = s
				break
			}
		}
	}
	series, err := history.SensorHistory(store.SensorQuery{Sensor: sp.Name, Since: since, Until: until, Step: step, Location: loc})
	if err != nil {
		return Error(err)
	}
	return Text(historyText(sp.Name, series, since, until, step, loc))
}

// historyText words a history for the model: per quantity the extremes
// with when they happened and the mean, then one line per point.
func historyText(name string, series []store.SensorSeries, since, until time.Time, step time.Duration, loc *time.Location) string {
	var sb strings.Builder
	fmt.Fprintf(&sb, "%s from %s to %s (%s), one line per %s", name, stamp(since, loc), stamp(until, loc), loc, humanStep(step))
	total := 0
	for _, s := range series {
		total += len(s.Points)
	}
	if total == 0 {
		sb.WriteString(":\nNo readings were stored in this range. Readings are sampled every sensors.sample_seconds while the gateway runs; " +
			"the sensor may have been unreadable, or the gateway stopped.")
		return sb.String()
	}
	sb.WriteString(":")
	for _, s := range series {
		if len(s.Points) == 0 {
			continue
		}
		lo, hi := s.Points[0], s.Points[0]
		sum, n := 0.0, 0
		for _, p := range s.Points {
			if p.Min < lo.Min {
				lo = p
			}
			if p.Max > hi.Max {
				hi = p
			}
			sum += p.Mean * float64(p.N)
			n += p.N
		}
		width := func(p store.SensorPoint) time.Duration {
			if !s.RawSince.IsZero() && p.T.Before(s.RawSince) {
				return time.Hour // before the raw samples, points are hourly
			}
			return step
		}
		// A point starts at a local midnight or hour, often before since
		// (daily points from 00:00 for a range from 14:30); it held only
		// readings from since on, and ends at until at the latest.
		between := func(p store.SensorPoint) string {
			start, end := p.T, p.T.Add(width(p))
			if d := width(p); d%(24*time.Hour) == 0 {
				end = p.T.In(loc).AddDate(0, 0, int(d/(24*time.Hour))) // 23 or 25 hours across DST
			}
			return span(later(start, since), earlier(end, until), loc)
		}
		fmt.Fprintf(&sb, "\n%s (%s): lowest %s between %s, highest %s between %s, mean %s over %d samples\n",
			s.Quantity, s.Unit, num(lo.Min), between(lo), num(hi.Max), between(hi), num(sum/float64(n)), n)
		for _, p := range s.Points {
			fmt.Fprintf(&sb, "  %s  min %s  mean %s  max %s\n", stamp(later(p.T, since), loc), num(p.Min), num(p.Mean), num(p.Max))
		}
	}
	return strings.TrimRight(sb.String(), "\n")
}

func stamp(t time.Time, loc *time.Location) string { return t.In(loc).Format("Mon 2006-01-02 15:04") }

func span(t, end time.Time, loc *time.Location) string {
	end = end.In(loc)
	if end.YearDay() == t.In(loc).YearDay() {
		return stamp(t, loc) + " and " + end.Format("15:04")
	}
	return stamp(t, loc) + " and " + stamp(end, loc)
}

func later(a, b time.Time) time.Time {
	if a.Before(b) {
		return b
	}
	return a
}

func earlier(a, b time.Time) time.Time {
	if a.After(b) {
		return b
	}
	return a
}

func num(v float64) string {
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.2f", v), "0"), ".")
}

func humanStep(d time.Duration) string {
	switch {
	case d%(24*time.Hour) == 0:
		if d == 24*time.Hour {
			return "day"
		}
		return fmt.Sprintf("%d days", d/(24*time.Hour))
	case d%time.Hour == 0:
		if d == time.Hour {
			return "hour"
		}
		return fmt.Sprintf("%d hours", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%d minutes", d/time.Minute)
	}
	return d.String()
}
