package schedule

import (
	"strings"
	"testing"
	"time"
)

func i64(n int64) *int64 { return &n }

func TestJobValidate(t *testing.T) {
	tests := []struct {
		name string
		job  Job
		// want lists substrings of the error; none means valid.
		want []string
	}{
		{"at_seconds", Job{Message: "tea", Schedule: Schedule{AtSeconds: i64(60)}}, nil},
		{"at_seconds zero", Job{Message: "now", Schedule: Schedule{AtSeconds: i64(0)}}, nil},
		{"every_seconds minimum", Job{Message: "m", Schedule: Schedule{EverySeconds: i64(MinEvery)}}, nil},
		{"cron_expr", Job{Message: "m", Schedule: Schedule{CronExpr: "0 9 * * 1-5"}}, nil},
		{"cron_expr descriptor", Job{Message: "m", Schedule: Schedule{CronExpr: "@daily"}}, nil},
		{"cron_expr with tz", Job{Message: "m", Schedule: Schedule{CronExpr: "30 7 * * *", TZ: "Europe/Berlin"}}, nil},
		{"command without message", Job{Command: "uptime", Schedule: Schedule{EverySeconds: i64(60)}}, nil},
		{"deliver with channel and to", Job{Message: "m", Deliver: true, Channel: "telegram", To: "42", Schedule: Schedule{AtSeconds: i64(5)}}, nil},

		{"no schedule", Job{Message: "m"}, []string{"exactly one of at_seconds, every_seconds or cron_expr (got 0)"}},
		{"two schedules", Job{Message: "m", Schedule: Schedule{AtSeconds: i64(5), EverySeconds: i64(60)}}, []string{"(got 2)"}},
		{"three schedules", Job{Message: "m", Schedule: Schedule{AtSeconds: i64(5), EverySeconds: i64(60), CronExpr: "* * * * *"}}, []string{"(got 3)"}},
		{"negative at_seconds", Job{Message: "m", Schedule: Schedule{AtSeconds: i64(-1)}}, []string{"at_seconds must be 0 or more", "got -1"}},
		{"every_seconds too short", Job{Message: "m", Schedule: Schedule{EverySeconds: i64(MinEvery - 1)}}, []string{"every_seconds must be at least 10", "got 9"}},
		{"every_seconds zero", Job{Message: "m", Schedule: Schedule{EverySeconds: i64(0)}}, []string{"every_seconds must be at least 10"}},
		{"cron_expr four fields", Job{Message: "m", Schedule: Schedule{CronExpr: "0 9 * *"}}, []string{`cron_expr "0 9 * *" must have five fields`, "minute hour day-of-month month day-of-week"}},
		{"cron_expr six fields", Job{Message: "m", Schedule: Schedule{CronExpr: "0 0 9 * * *"}}, []string{"must have five fields"}},
		{"cron_expr out of range", Job{Message: "m", Schedule: Schedule{CronExpr: "61 * * * *"}}, []string{`cron_expr "61 * * * *": `, "61"}},
		{"cron_expr garbage", Job{Message: "m", Schedule: Schedule{CronExpr: "a b c d e"}}, []string{`cron_expr "a b c d e": `}},
		{"cron_expr unknown descriptor", Job{Message: "m", Schedule: Schedule{CronExpr: "@fortnightly"}}, []string{`cron_expr "@fortnightly": `}},
		{"unknown tz", Job{Message: "m", Schedule: Schedule{CronExpr: "0 9 * * *", TZ: "Mars/Olympus"}}, []string{`tz "Mars/Olympus" is not a known time zone`, "IANA"}},
		{"empty message", Job{Message: " \n", Schedule: Schedule{AtSeconds: i64(5)}}, []string{"message is empty"}},
		{"deliver without channel", Job{Message: "m", Deliver: true, To: "42", Schedule: Schedule{AtSeconds: i64(5)}}, []string{"deliver needs channel and to"}},
		{"deliver without to", Job{Message: "m", Deliver: true, Channel: "telegram", Schedule: Schedule{AtSeconds: i64(5)}}, []string{"deliver needs channel and to"}},
		{"every fault at once", Job{Deliver: true, Schedule: Schedule{EverySeconds: i64(1), TZ: "Nowhere/Land"}},
			[]string{"every_seconds must be at least", "tz \"Nowhere/Land\"", "message is empty", "deliver needs channel and to"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.job.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("Validate() = %v, want valid", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("Validate() = nil, want an error mentioning %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not mention %q", err, w)
				}
			}
		})
	}
}

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

// A one-time schedule answers its moment until it has passed, then never.
func TestOnceAtAndEveryN(t *testing.T) {
	at := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	o := onceAt{at}
	if got := o.Next(at.Add(-time.Hour)); !got.Equal(at) {
		t.Errorf("before the moment: Next = %v, want %v", got, at)
	}
	if got := o.Next(at); !got.IsZero() {
		t.Errorf("at the moment: Next = %v, want never", got)
	}
	e := everyN{90 * time.Second}
	now := time.Date(2030, 1, 2, 3, 4, 5, 700_000_000, time.UTC)
	if got, want := e.Next(now), time.Date(2030, 1, 2, 3, 5, 35, 0, time.UTC); !got.Equal(want) {
		t.Errorf("everyN.Next = %v, want %v (whole seconds)", got, want)
	}
}

// View carries exactly the listed fields: no created or at.
func TestView(t *testing.T) {
	now := time.Now().UTC()
	j := Job{ID: "ab12", Message: "m", Command: "c", Deliver: true, Channel: "telegram", To: "42",
		Schedule: Schedule{EverySeconds: i64(60)}, Enabled: true, NextRun: &now, LastRun: &now, LastResult: "ok",
		Created: now, At: &now}
	v := j.View()
	if v.ID != j.ID || v.Message != j.Message || v.Command != j.Command || !v.Deliver || v.Channel != j.Channel ||
		v.To != j.To || *v.Schedule.EverySeconds != 60 || !v.Enabled || v.NextRun != j.NextRun || v.LastRun != j.LastRun ||
		v.LastResult != "ok" {
		t.Errorf("View() = %+v, does not carry the job's fields", v)
	}
}
