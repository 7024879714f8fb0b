package api

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Schedule says when a job runs: exactly one of AtSeconds, EverySeconds,
// CronExpr.
type Schedule struct {
	AtSeconds    *int64 `json:"at_seconds,omitempty"`
	EverySeconds *int64 `json:"every_seconds,omitempty"`
	CronExpr     string `json:"cron_expr,omitempty"`
	// TZ is the IANA zone of CronExpr; empty means the configured default.
	TZ string `json:"tz,omitempty"`
}

// JobSpec is a job as asked for: what to do, when, and where the result
// goes.
type JobSpec struct {
	// Message is the reminder text (Deliver) or the task for the agent.
	Message string `json:"message"`
	// Command, when set, is a shell command run confined when due; its
	// output is the result.
	Command string `json:"command,omitempty"`
	// Deliver sends Message (or the command's output) as is; otherwise the
	// agent processes it.
	Deliver bool `json:"deliver"`
	// Channel and To are where the result goes.
	Channel  string   `json:"channel,omitempty"`
	To       string   `json:"to,omitempty"`
	Schedule Schedule `json:"schedule"`
	// Restricted says the job was added for a sender the owner has not
	// vouched for: when due, the agent answers it with only the tools that
	// cannot change the board, as it answered its sender.
	Restricted bool `json:"restricted,omitempty"`
}

// Job is a scheduled job as listed: its spec, its id and its state.
type Job struct {
	ID string `json:"id"`
	JobSpec
	Enabled bool `json:"enabled"`
	// NextRun is absent when the job will not run again (disabled, or a
	// one-time job that ran).
	NextRun    *time.Time `json:"next_run,omitempty"`
	LastRun    *time.Time `json:"last_run,omitempty"`
	LastResult string     `json:"last_result,omitempty"`
	// LastFailed says the last run, or the delivery of its result, failed:
	// LastResult then says why.
	LastFailed bool `json:"last_failed,omitempty"`
	// RunningSince is when the run in progress began; absent when none is.
	RunningSince *time.Time `json:"running_since,omitempty"`
}

// Jobs manages scheduled jobs: the scheduler implements it in the gateway's
// process, the HTTP client against a running gateway.
type Jobs interface {
	List(ctx context.Context) ([]Job, error)
	Add(ctx context.Context, spec JobSpec) (Job, error)
	// Remove deletes job id and returns it as it was.
	Remove(ctx context.Context, id string) (Job, error)
	SetEnabled(ctx context.Context, id string, on bool) (Job, error)
}

// ErrNoJob is returned (wrapped) for an unknown job id.
var ErrNoJob = errors.New("no such job")

// Describe is a one-line summary of s for chat and the CLI.
func (s Schedule) Describe() string {
	switch {
	case s.AtSeconds != nil:
		return fmt.Sprintf("once, %s after it was added", Span(time.Duration(*s.AtSeconds)*time.Second))
	case s.EverySeconds != nil:
		return "every " + Span(time.Duration(*s.EverySeconds)*time.Second)
	case s.CronExpr != "":
		if s.TZ != "" {
			return fmt.Sprintf("cron %q (%s)", s.CronExpr, s.TZ)
		}
		return fmt.Sprintf("cron %q", s.CronExpr)
	}
	return "no schedule"
}

// Summary is a job on one line, for chat and the CLI: id, state, schedule,
// what it does, where it delivers, when it runs next and how it last went.
func (j Job) Summary() string {
	var sb strings.Builder
	state := "enabled"
	if !j.Enabled {
		state = "disabled"
	}
	what := j.Message
	if j.Command != "" {
		what = "$ " + j.Command
	}
	fmt.Fprintf(&sb, "%s  %s  %s  %q", j.ID, state, j.Schedule.Describe(), what)
	if j.Deliver {
		fmt.Fprintf(&sb, " → %s:%s", j.Channel, j.To)
	}
	if j.Restricted {
		sb.WriteString(" (added by a sender nobody vouched for: read-only tools)")
	}
	if j.NextRun != nil {
		sb.WriteString(", next at " + j.NextRun.Local().Format("2006-01-02 15:04:05 MST"))
	}
	if j.RunningSince != nil {
		sb.WriteString(", running since " + j.RunningSince.Local().Format("2006-01-02 15:04:05 MST"))
	}
	verb := "last ran"
	if j.LastFailed {
		verb = "last run failed"
	}
	switch {
	case j.LastRun != nil:
		fmt.Fprintf(&sb, ", %s %s: %s", verb, j.LastRun.Local().Format("2006-01-02 15:04:05 MST"), firstLine(j.LastResult))
	case j.LastResult != "":
		// A run the gateway's stop cut off does not count as one.
		fmt.Fprintf(&sb, ", %s: %s", verb, firstLine(j.LastResult))
	}
	return sb.String()
}

// FormatJobs renders jobs one per line, or says there are none.
func FormatJobs(jobs []Job) string {
	if len(jobs) == 0 {
		return "No scheduled jobs."
	}
	lines := make([]string, len(jobs))
	for i, j := range jobs {
		lines[i] = j.Summary()
	}
	return strings.Join(lines, "\n")
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	if len(s) > 80 {
		s = s[:80] + "…"
	}
	return s
}
