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
}

// MinEvery is the shortest recurring interval: shorter would hammer the
// model (and the user's wallet).
const MinEvery = 10

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
		}
	}
	if s.EverySeconds != nil {
		n++
		if *s.EverySeconds < MinEvery {
			errs = append(errs, fmt.Errorf("every_seconds must be at least %d seconds, got %d", MinEvery, *s.EverySeconds))
		}
	}
	if s.CronExpr != "" {
		n++
		if len(strings.Fields(s.CronExpr)) != 5 && !strings.HasPrefix(s.CronExpr, "@") {
			errs = append(errs, fmt.Errorf("cron_expr %q must have five fields (minute hour day-of-month month day-of-week), e.g. \"0 9 * * 1-5\"", s.CronExpr))
		} else if _, err := cron.ParseStandard(s.CronExpr); err != nil {
			errs = append(errs, fmt.Errorf("cron_expr %q: %v", s.CronExpr, err))
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

// onceAt is the robfig schedule of a one-time job.
type onceAt struct{ t time.Time }

func (o onceAt) Next(now time.Time) time.Time {
	if now.Before(o.t) {
		return o.t
	}
	return time.Time{} // never again
}

// everyN fires every d, starting d after the job was scheduled.
type everyN struct{ d time.Duration }

func (e everyN) Next(now time.Time) time.Time { return now.Add(e.d).Truncate(time.Second) }
