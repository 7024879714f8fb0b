package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/perchhq/perch/appliance/api"
)

// record is a job as stored: the listed job plus what only the scheduler
// needs. Its JSON is the job's, flattened, with created and at beside it.
type record struct {
	api.Job
	Created time.Time `json:"created"`
	// At is the absolute moment of an at_seconds job, fixed when added.
	At *time.Time `json:"at,omitempty"`
	// Since is where an every_seconds job's rhythm starts: it runs at
	// Since plus whole intervals, so a restart of the gateway does not
	// move its runs. Set when the job is added or enabled again, and when
	// a run missed while the gateway was stopped is made up. Jobs stored
	// before it existed keep the rhythm of their last run.
	Since *time.Time `json:"since,omitempty"`
	// Started is when the run in progress began, written before the run
	// and cleared with its result. Found set at start, it is a run that
	// ended without a result (a power cut, a kill, a stop that could not
	// wait for it): it may have sent its message or run its command
	// already, so it is not run again.
	Started *time.Time `json:"started,omitempty"`
}

// rhythm is where j's runs are counted from: its Since, else its last run,
// else its creation.
func (j record) rhythm() time.Time {
	switch {
	case j.Since != nil:
		return *j.Since
	case j.LastRun != nil:
		return *j.LastRun
	}
	return j.Created
}

// rhythmFrom is where a rhythm set at t starts: t's whole second, so its
// runs (and the times listed for them) fall on whole seconds. It is never
// after t: a start in the future reads as a clock set back (everyN.Next),
// and the first run would come at once and again a second later.
func rhythmFrom(t time.Time) time.Time { return t.Truncate(time.Second) }

// wholeSecond is t moved forward to a whole second, for a one-time moment,
// which may come a little late but not early.
func wholeSecond(t time.Time) time.Time {
	if w := t.Truncate(time.Second); w.Before(t) {
		return w.Add(time.Second)
	}
	return t
}

// MinEvery is the shortest recurring interval: shorter would hammer the
// model (and the user's wallet).
const MinEvery = 10

// MaxSeconds bounds at_seconds and every_seconds at ten years: a count of
// seconds past what a time.Duration holds (about 292 years) wrapped to a
// negative interval, and such a job fired hundreds of times a second.
const MaxSeconds = 10 * 365 * 24 * 3600

// Validate checks a spec as added, naming the field to fix. Field names are
// the API's (at_seconds, cron_expr, …); the CLI rewords them as its flags.
func Validate(spec api.JobSpec) error {
	var errs []error
	s := spec.Schedule
	n := 0
	if s.AtSeconds != nil {
		n++
		if *s.AtSeconds < 0 {
			errs = append(errs, fmt.Errorf("at_seconds must be 0 or more (seconds from now), got %d", *s.AtSeconds))
		} else if *s.AtSeconds > MaxSeconds {
			errs = append(errs, fmt.Errorf("at_seconds must be at most %d (ten years), got %d", MaxSeconds, *s.AtSeconds))
		}
	}
	if s.EverySeconds != nil {
		n++
		if *s.EverySeconds < MinEvery {
			errs = append(errs, fmt.Errorf("every_seconds must be at least %d seconds, got %d", MinEvery, *s.EverySeconds))
		} else if *s.EverySeconds > MaxSeconds {
			errs = append(errs, fmt.Errorf("every_seconds must be at most %d (ten years), got %d", MaxSeconds, *s.EverySeconds))
		}
	}
	if s.CronExpr != "" {
		n++
		if len(strings.Fields(s.CronExpr)) != 5 && !strings.HasPrefix(s.CronExpr, "@") {
			errs = append(errs, fmt.Errorf("cron_expr %q must have five fields (minute hour day-of-month month day-of-week), e.g. \"0 9 * * 1-5\"", s.CronExpr))
		} else if sched, err := cron.ParseStandard(s.CronExpr); err != nil {
			errs = append(errs, fmt.Errorf("cron_expr %q: %v", s.CronExpr, cronExprError(s.CronExpr, err)))
		} else if d, ok := sched.(cron.ConstantDelaySchedule); ok && d.Delay < MinEvery*time.Second {
			errs = append(errs, fmt.Errorf("cron_expr %q repeats every %v; the shortest interval is %d seconds", s.CronExpr, d.Delay, MinEvery))
		} else if sched.Next(time.Now()).IsZero() {
			// robfig looks five years ahead, so a leap day still counts.
			errs = append(errs, fmt.Errorf("cron_expr %q never comes: no date has that day-of-month in that month (such as the 31st of February)", s.CronExpr))
		}
	}
	if n != 1 {
		errs = append(errs, fmt.Errorf("give exactly one of at_seconds, every_seconds or cron_expr (got %d)", n))
	}
	if s.TZ != "" {
		if _, err := time.LoadLocation(s.TZ); err != nil {
			errs = append(errs, fmt.Errorf("tz %q is not a known time zone (use an IANA name such as Europe/Berlin)", s.TZ))
		}
	}
	if strings.TrimSpace(spec.Message) == "" && strings.TrimSpace(spec.Command) == "" {
		errs = append(errs, errors.New("message is empty: say what to remind or do (or give a command)"))
	}
	if spec.Deliver && (spec.Channel == "" || spec.To == "") {
		errs = append(errs, errors.New("deliver needs channel and to (the chat to deliver to)"))
	}
	return errors.Join(errs...)
}

// cronFields names the five fields of a cron expression and their values.
var cronFields = [5]string{"minute (0-59)", "hour (0-23)", "day-of-month (1-31)", "month (1-12 or jan-dec)", "day-of-week (0-6 or sun-sat)"}

// cronExprError says which field of expr robfig refused and why: its own
// errors name neither the field nor the values it takes ("failed to parse
// int from monday").
func cronExprError(expr string, err error) error {
	fields := strings.Fields(expr)
	if strings.HasPrefix(expr, "@") {
		switch d := fields[0]; d {
		case "@yearly", "@annually", "@monthly", "@weekly", "@daily", "@midnight", "@hourly":
			return fmt.Errorf("%s takes nothing after it", d)
		case "@every":
			return errors.New("@every takes a duration such as 90s, 10m or 1h30m")
		default:
			return fmt.Errorf("%s is not a descriptor cron knows: use @yearly, @monthly, @weekly, @daily, @hourly or @every 1h30m", d)
		}
	}
	if len(fields) != len(cronFields) {
		return err
	}
	for i, f := range fields {
		probe := []string{"*", "*", "*", "*", "*"}
		probe[i] = f
		if _, ferr := cron.ParseStandard(strings.Join(probe, " ")); ferr != nil {
			// robfig ends its message with the field again.
			why := strings.TrimSuffix(ferr.Error(), ": "+f)
			if strings.HasPrefix(why, "failed to parse int from") {
				why = "not a number or a name"
			}
			return fmt.Errorf("the %s field %q: %s", cronFields[i], f, why)
		}
	}
	return err
}

// onceAt is the robfig schedule of a one-time job.
type onceAt struct{ t time.Time }

func (o onceAt) Next(now time.Time) time.Time {
	if now.Before(o.t) {
		return o.t
	}
	return time.Time{} // never again
}

// everyN fires every d at from plus whole intervals; without from (a
// preview), d after now.
type everyN struct {
	d    time.Duration
	from time.Time
}

// Next is never for an interval below the floor, such as one a job kept
// from before MaxSeconds wrapped to: a time that has passed would fire it
// again at once, for ever. A from after now means the clock was set back
// past it: the rhythm starts again from now rather than waiting for the
// clock to catch up with it.
func (e everyN) Next(now time.Time) time.Time {
	if e.d < MinEvery*time.Second {
		return time.Time{}
	}
	el := now.Sub(e.from)
	if e.from.IsZero() || el < 0 || el > maxElapsed {
		return now.Add(e.d).Truncate(time.Second)
	}
	return e.from.Add((el/e.d + 1) * e.d)
}

// Prev is the last run due at or before now, or zero when none is.
func (e everyN) Prev(now time.Time) time.Time {
	el := now.Sub(e.from)
	if e.d < MinEvery*time.Second || e.from.IsZero() || el < e.d || el > maxElapsed {
		return time.Time{}
	}
	return e.from.Add(el / e.d * e.d)
}

// maxElapsed keeps (elapsed/d + 1) * d inside a time.Duration.
const maxElapsed = time.Duration(1<<63-1) / 2
