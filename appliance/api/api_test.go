package api

import (
	"encoding/json"
	"testing"
	"time"
)

func i64(n int64) *int64 { return &n }

func TestScheduleDescribe(t *testing.T) {
	tests := []struct {
		s    Schedule
		want string
	}{
		{Schedule{AtSeconds: i64(30)}, "once, 30 seconds after it was added"},
		{Schedule{AtSeconds: i64(600)}, "once, 10 minutes after it was added"},
		{Schedule{EverySeconds: i64(3600)}, "every 1 hour"},
		{Schedule{EverySeconds: i64(5400)}, "every 90 minutes"},
		{Schedule{CronExpr: "0 9 * * *"}, `cron "0 9 * * *"`},
		{Schedule{CronExpr: "0 9 * * *", TZ: "Asia/Tokyo"}, `cron "0 9 * * *" (Asia/Tokyo)`},
		{Schedule{}, "no schedule"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.s.Describe(); got != tt.want {
				t.Errorf("Describe() = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestJobJSON: a job lists as the flat object the CLI's --json and scripts
// read: the job's fields beside id and state, never nested.
func TestJobJSON(t *testing.T) {
	j := Job{ID: "x1", JobSpec: JobSpec{Message: "tea", Schedule: Schedule{AtSeconds: i64(60)}}, Enabled: true}
	b, _ := json.Marshal(j)
	want := `{"id":"x1","message":"tea","deliver":false,"schedule":{"at_seconds":60},"enabled":true}`
	if string(b) != want {
		t.Fatalf("got  %s\nwant %s", b, want)
	}
}

// TestJobSummary: the line `perch cron list` and /cron print. Both times
// carry seconds and the zone, so the last run's time does not run into its
// result ("09:57: echo: …" read as a cut-off time).
func TestJobSummary(t *testing.T) {
	defer func(l *time.Location) { time.Local = l }(time.Local)
	time.Local = time.UTC
	next := time.Date(2026, 11, 27, 9, 58, 0, 0, time.UTC)
	last := time.Date(2026, 11, 27, 9, 57, 16, 0, time.UTC)
	j := Job{ID: "ab12", JobSpec: JobSpec{Message: "water the plants", Schedule: Schedule{EverySeconds: i64(60)}}, Enabled: true,
		NextRun: &next, LastRun: &last, LastResult: "watered\nsecond line"}
	want := `ab12  enabled  every 1 minute  "water the plants", next at 2026-11-27 09:58:00 UTC, last ran 2026-11-27 09:57:16 UTC: watered`
	if got := j.Summary(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	j.LastFailed, j.LastResult, j.NextRun = true, "exit status 2", nil
	want = `ab12  enabled  every 1 minute  "water the plants", last run failed 2026-11-27 09:57:16 UTC: exit status 2`
	if got := j.Summary(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
	// Running now, after a first run the gateway's stop cut off (it has
	// a result and no time).
	j.LastRun, j.RunningSince, j.LastResult = nil, &next, "error: interrupted by the gateway's stop; it runs again at the next start"
	want = `ab12  enabled  every 1 minute  "water the plants", running since 2026-11-27 09:58:00 UTC, last run failed: error: interrupted by the gateway's stop; it runs again at the next start`
	if got := j.Summary(); got != want {
		t.Errorf("got  %s\nwant %s", got, want)
	}
}

// TestSpan: a duration in the largest unit it is a whole number of, as the
// web page says it; Go's form only where no unit fits.
func TestSpan(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want string
	}{
		{time.Second, "1 second"},
		{90 * time.Second, "90 seconds"},
		{time.Minute, "1 minute"},
		{10 * time.Minute, "10 minutes"},
		{time.Hour, "1 hour"},
		{36 * time.Hour, "36 hours"},
		{48 * time.Hour, "2 days"},
		{1500 * time.Millisecond, "1.5s"},
		{0, "0s"},
	}
	for _, tt := range tests {
		if got := Span(tt.d); got != tt.want {
			t.Errorf("Span(%v) = %q, want %q", tt.d, got, tt.want)
		}
	}
}
