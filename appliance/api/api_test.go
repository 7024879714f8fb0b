package api

import (
	"encoding/json"
	"testing"
)

func i64(n int64) *int64 { return &n }

func TestScheduleDescribe(t *testing.T) {
	tests := []struct {
		s    Schedule
		want string
	}{
		{Schedule{AtSeconds: i64(30)}, "once, 30s after it was added"},
		{Schedule{EverySeconds: i64(3600)}, "every 1h0m0s"},
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
