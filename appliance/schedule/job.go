package schedule

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// Schedule says when a job runs: exactly one of AtSeconds, EverySeconds,
// CronExpr.
type Schedule struct {
	AtSeconds    *int64 `json:"at_seconds,omitempty"`
	EverySeconds *int64 `json:"every_seconds,omitempty"`
	CronExpr     string `json:"cron_expr,omitempty"`
	TZ           string `json:"tz,omitempty"`
}

// Job is a scheduled task (spec §2.6).
type Job struct {
	ID         string     `json:"id"`
	Message    string     `json:"message"`
	Command    string     `json:"command,omitempty"`
	Deliver    bool       `json:"deliver"`
	Channel    string     `json:"channel,omitempty"`
	To         string     `json:"to,omitempty"`
	Schedule   Schedule   `json:"schedule"`
	Enabled    bool       `json:"enabled"`
	NextRun    *time.Time `json:"next_run,omitempty"`
	LastRun    *time.Time `json:"last_run,omitempty"`
	LastResult string     `json:"last_result,omitempty"`
	Created    time.Time  `json:"created"`
	// At is the absolute moment of an at_seconds job, fixed when added.
	At *time.Time `json:"at,omitempty"`
}

// MinEvery is the shortest recurring interval: shorter would hammer the
// model (and the user's wallet).
const MinEvery = 10

// Validate checks a job as added, naming the field to fix.
func (j *Job) Validate() error {
	var errs []error
	s := j.Schedule
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
			errs = append(errs, fmt.Errorf("every_seconds must be at least %d, got %d", MinEvery, *s.EverySeconds))
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
	if strings.TrimSpace(j.Message) == "" && strings.TrimSpace(j.Command) == "" {
		errs = append(errs, errors.New("message is empty: say what to remind or do (or give a command)"))
	}
	if j.Deliver && (j.Channel == "" || j.To == "") {
		errs = append(errs, errors.New("deliver needs channel and to (the chat to deliver to)"))
	}
	return errors.Join(errs...)
}

// View is a job as listed: the fields of spec §2.6 plus its state.
type View struct {
	ID         string     `json:"id"`
	Message    string     `json:"message"`
	Command    string     `json:"command,omitempty"`
	Deliver    bool       `json:"deliver"`
	Channel    string     `json:"channel,omitempty"`
	To         string     `json:"to,omitempty"`
	Schedule   Schedule   `json:"schedule"`
	Enabled    bool       `json:"enabled"`
	NextRun    *time.Time `json:"next_run,omitempty"`
	LastRun    *time.Time `json:"last_run,omitempty"`
	LastResult string     `json:"last_result,omitempty"`
}

// View returns the listed form of j.
func (j Job) View() View {
	return View{ID: j.ID, Message: j.Message, Command: j.Command, Deliver: j.Deliver, Channel: j.Channel, To: j.To,
		Schedule: j.Schedule, Enabled: j.Enabled, NextRun: j.NextRun, LastRun: j.LastRun, LastResult: j.LastResult}
}

// Describe is a one-line summary for chat and the CLI.
func (s Schedule) Describe() string {
	switch {
	case s.AtSeconds != nil:
		return fmt.Sprintf("once, %ds after it was added", *s.AtSeconds)
	case s.EverySeconds != nil:
		return fmt.Sprintf("every %s", time.Duration(*s.EverySeconds)*time.Second)
	case s.CronExpr != "":
		if s.TZ != "" {
			return fmt.Sprintf("cron %q (%s)", s.CronExpr, s.TZ)
		}
		return fmt.Sprintf("cron %q", s.CronExpr)
	}
	return "no schedule"
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
