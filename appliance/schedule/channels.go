package schedule

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/perchhq/perch/appliance/api"
	"github.com/perchhq/perch/appliance/bus"
)

// ChannelCheck returns an Options.CheckChannel that accepts only the
// channels available names (those enabled and running, or that will run
// when the gateway starts). An internal channel (cli, system, subagent) is
// refused too: what is delivered there is only logged, so a job naming one
// would report "delivered" to nobody.
func ChannelCheck(available func() []string) func(channel string) error {
	return func(channel string) error {
		names := available()
		if !bus.IsInternal(channel) && slices.Contains(names, channel) {
			return nil
		}
		list := "none"
		if len(names) > 0 {
			list = strings.Join(names, ", ")
		}
		if bus.IsInternal(channel) {
			return fmt.Errorf("channel %q is internal: what is sent there is only logged and nobody reads it; deliver to one of: %s", channel, list)
		}
		return fmt.Errorf("no channel %q is enabled, so nothing would be delivered; channels that deliver: %s "+
			"(enable a chat platform under channels.<name> in the config)", channel, list)
	}
}

// Preview returns the next n runs of a schedule from now, as a job added
// now would run: for the page's form, before the job is added. The zone of
// a cron expression is its tz, else loc.
func Preview(sc api.Schedule, loc *time.Location, now time.Time, n int) ([]time.Time, error) {
	if err := Validate(api.JobSpec{Message: "preview", Schedule: sc}); err != nil {
		return nil, fmt.Errorf("schedule: %w", err)
	}
	if loc == nil {
		loc = time.Local
	}
	var next func(time.Time) time.Time
	switch {
	case sc.AtSeconds != nil:
		return []time.Time{now.Add(time.Duration(*sc.AtSeconds) * time.Second).UTC()}, nil
	case sc.EverySeconds != nil:
		next = everyN{d: time.Duration(*sc.EverySeconds) * time.Second}.Next
	default:
		spec := sc.CronExpr
		if sc.TZ != "" {
			spec = "CRON_TZ=" + sc.TZ + " " + spec
		}
		s, err := cron.ParseStandard(spec)
		if err != nil {
			return nil, fmt.Errorf("schedule: cron_expr %q: %w", sc.CronExpr, err)
		}
		next = s.Next
	}
	out := make([]time.Time, 0, n)
	t := now.In(loc)
	for range n {
		t = next(t)
		if t.IsZero() {
			break
		}
		out = append(out, t.UTC())
	}
	return out, nil
}
