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
