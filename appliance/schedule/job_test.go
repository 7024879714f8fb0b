package schedule

import (
	"encoding/json"

	"strings"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/api"
)

func i64(n int64) *int64 { return &n }

func TestJobValidate(t *testing.T) {
	tests := []struct {
		name string
		job  api.JobSpec
		// want lists substrings of the error; none means valid.
		want []string
	}{
		{"at_seconds", api.JobSpec{Message: "tea", Schedule: api.Schedule{AtSeconds: i64(60)}}, nil},
		{"at_seconds zero", api.JobSpec{Message: "now", Schedule: api.Schedule{AtSeconds: i64(0)}}, nil},
		{"every_seconds minimum", api.JobSpec{Message: "m", Schedule: api.Schedule{EverySeconds: i64(MinEvery)}}, nil},
		{"cron_expr", api.JobSpec{Message: "m", Schedule: api.Schedule{CronExpr: "0 9 * * 1-5"}}, nil},
		{"cron_expr descriptor", api.JobSpec{Message: "m", Schedule: api.Schedule{CronExpr: "@daily"}}, nil},
		{"cron_expr every", api.JobSpec{Message: "m", Schedule: api.Schedule{CronExpr: "@every 1h30m"}}, nil},
		{"cron_expr leap day", api.JobSpec{Message: "m", Schedule: api.Schedule{CronExpr: "0 9 29 2 *"}}, nil},
		{"cron_expr with tz", api.JobSpec{Message: "m", Schedule: api.Schedule{CronExpr: "30 7 * * *", TZ: "Europe/Berlin"}}, nil},
		{"command without message", api.JobSpec{Command: "uptime", Schedule: api.Schedule{EverySeconds: i64(60)}}, nil},
		{"deliver with channel and to", api.JobSpec{Message: "m", Deliver: true, Channel: "telegram", To: "42", Schedule: api.Schedule{AtSeconds: i64(5)}}, nil},

		{"no schedule", api.JobSpec{Message: "m"}, []string{"exactly one of at_seconds, every_seconds or cron_expr (got 0)"}},
		{"two schedules", api.JobSpec{Message: "m", Schedule: api.Schedule{AtSeconds: i64(5), EverySeconds: i64(60)}}, []string{"(got 2)"}},
		{"three schedules", api.JobSpec{Message: "m", Schedule: api.Schedule{AtSeconds: i64(5), EverySeconds: i64(60), CronExpr: "* * * * *"}}, []string{"(got 3)"}},
		{"negative at_seconds", api.JobSpec{Message: "m", Schedule: api.Schedule{AtSeconds: i64(-1)}}, []string{"at_seconds must be 0 or more", "got -1"}},
		{"every_seconds too short", api.JobSpec{Message: "m", Schedule: api.Schedule{EverySeconds: i64(MinEvery - 1)}}, []string{"every_seconds must be at least 10", "got 9"}},
		{"every_seconds zero", api.JobSpec{Message: "m", Schedule: api.Schedule{EverySeconds: i64(0)}}, []string{"every_seconds must be at least 10"}},
		// Past what a time.Duration holds, the interval wrapped negative
		// and the job fired hundreds of times a second.
		{"every_seconds past ten years", api.JobSpec{Message: "m", Schedule: api.Schedule{EverySeconds: i64(9300009600)}}, []string{"every_seconds must be at most 315360000 (ten years)"}},
		{"at_seconds past ten years", api.JobSpec{Message: "m", Schedule: api.Schedule{AtSeconds: i64(99999999999999)}}, []string{"at_seconds must be at most 315360000"}},
		{"cron_expr four fields", api.JobSpec{Message: "m", Schedule: api.Schedule{CronExpr: "0 9 * *"}}, []string{`cron_expr "0 9 * *" must have five fields`, "minute hour day-of-month month day-of-week"}},
		{"cron_expr six fields", api.JobSpec{Message: "m", Schedule: api.Schedule{CronExpr: "0 0 9 * * *"}}, []string{"must have five fields"}},
		{"cron_expr out of range", api.JobSpec{Message: "m", Schedule: api.Schedule{CronExpr: "61 * * * *"}}, []string{`cron_expr "61 * * * *": the minute (0-59) field "61": end of range (61) above maximum (59)`}},
		{"cron_expr hour", api.JobSpec{Message: "m", Schedule: api.Schedule{CronExpr: "0 25 * * *"}}, []string{`the hour (0-23) field "25"`}},
		{"cron_expr day name", api.JobSpec{Message: "m", Schedule: api.Schedule{CronExpr: "0 9 * * monday"}}, []string{`the day-of-week (0-6 or sun-sat) field "monday": not a number or a name`}},
		{"cron_expr garbage", api.JobSpec{Message: "m", Schedule: api.Schedule{CronExpr: "a b c d e"}}, []string{`cron_expr "a b c d e": the minute (0-59) field "a"`}},
		{"cron_expr unknown descriptor", api.JobSpec{Message: "m", Schedule: api.Schedule{CronExpr: "@fortnightly"}}, []string{`cron_expr "@fortnightly": @fortnightly is not a descriptor cron knows`, "@every 1h30m"}},
		{"cron_expr descriptor with more", api.JobSpec{Message: "m", Schedule: api.Schedule{CronExpr: "@hourly 5"}}, []string{`@hourly takes nothing after it`}},
		{"cron_expr every without duration", api.JobSpec{Message: "m", Schedule: api.Schedule{CronExpr: "@every soon"}}, []string{`@every takes a duration`}},
		// every_seconds' floor holds for @every too.
		{"cron_expr every too short", api.JobSpec{Message: "m", Schedule: api.Schedule{CronExpr: "@every 2s"}}, []string{`cron_expr "@every 2s" repeats every 2s; the shortest interval is 10 seconds`}},
		{"cron_expr never", api.JobSpec{Message: "m", Schedule: api.Schedule{CronExpr: "0 0 31 2 *"}}, []string{`cron_expr "0 0 31 2 *" never comes`}},
		{"unknown tz", api.JobSpec{Message: "m", Schedule: api.Schedule{CronExpr: "0 9 * * *", TZ: "Mars/Olympus"}}, []string{`tz "Mars/Olympus" is not a known time zone`, "IANA"}},
		{"empty message", api.JobSpec{Message: " \n", Schedule: api.Schedule{AtSeconds: i64(5)}}, []string{"message is empty"}},
		{"deliver without channel", api.JobSpec{Message: "m", Deliver: true, To: "42", Schedule: api.Schedule{AtSeconds: i64(5)}}, []string{"deliver needs channel and to"}},
		{"deliver without to", api.JobSpec{Message: "m", Deliver: true, Channel: "telegram", Schedule: api.Schedule{AtSeconds: i64(5)}}, []string{"deliver needs channel and to"}},
		{"every fault at once", api.JobSpec{Deliver: true, Schedule: api.Schedule{EverySeconds: i64(1), TZ: "Nowhere/Land"}},
			[]string{"every_seconds must be at least", "tz \"Nowhere/Land\"", "message is empty", "deliver needs channel and to"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(tt.job)
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
	e := everyN{d: 90 * time.Second}
	now := time.Date(2030, 1, 2, 3, 4, 5, 700_000_000, time.UTC)
	if got, want := e.Next(now), time.Date(2030, 1, 2, 3, 5, 35, 0, time.UTC); !got.Equal(want) {
		t.Errorf("everyN.Next = %v, want %v (whole seconds)", got, want)
	}
	// A job stored with an interval that wrapped negative never runs,
	// rather than at once for ever.
	if got := (everyN{d: -time.Hour}).Next(now); !got.IsZero() {
		t.Errorf("a negative interval: Next = %v, want never", got)
	}
}

// TestStoredAndListedForms: a job is stored as its listed form plus created
// and at (the format of databases written by v0.1), and listed without them.
func TestStoredAndListedForms(t *testing.T) {
	now := time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)
	r := record{Job: api.Job{ID: "ab12", JobSpec: api.JobSpec{Message: "m", Command: "c", Deliver: true, Channel: "telegram", To: "42",
		Schedule: api.Schedule{EverySeconds: i64(60)}}, Enabled: true, NextRun: &now, LastRun: &now, LastResult: "ok"},
		Created: now, At: &now}
	stored, _ := json.Marshal(r)
	want := `{"id":"ab12","message":"m","command":"c","deliver":true,"channel":"telegram","to":"42","schedule":{"every_seconds":60},` +
		`"enabled":true,"next_run":"2030-01-02T03:04:05Z","last_run":"2030-01-02T03:04:05Z","last_result":"ok","created":"2030-01-02T03:04:05Z","at":"2030-01-02T03:04:05Z"}`
	if string(stored) != want {
		t.Errorf("stored form\n got %s\nwant %s", stored, want)
	}
	listed, _ := json.Marshal(r.Job)
	if strings.Contains(string(listed), "created") || strings.Contains(string(listed), `"at"`) {
		t.Errorf("listed form carries scheduler fields: %s", listed)
	}
	var back record
	if err := json.Unmarshal(stored, &back); err != nil || back.ID != "ab12" || back.Message != "m" || !back.Created.Equal(now) {
		t.Errorf("stored form does not read back: %+v, %v", back, err)
	}
}

// An interval job counts its runs from where its rhythm starts, whatever
// the moment it is asked at; a clock set back before that start begins the
// rhythm again from the new time instead of waiting for it.
func TestEveryNCountsFromItsStart(t *testing.T) {
	from := time.Date(2030, 1, 2, 3, 0, 0, 0, time.UTC)
	e := everyN{d: 20 * time.Second, from: from}
	for _, c := range []struct {
		now, next, prev time.Time
	}{
		{from, from.Add(20 * time.Second), time.Time{}},
		{from.Add(14 * time.Second), from.Add(20 * time.Second), time.Time{}},
		{from.Add(20 * time.Second), from.Add(40 * time.Second), from.Add(20 * time.Second)},
		{from.Add(59*time.Second + 900*time.Millisecond), from.Add(60 * time.Second), from.Add(40 * time.Second)},
		{from.Add(1000 * time.Hour), from.Add(1000*time.Hour + 20*time.Second), from.Add(1000 * time.Hour)},
	} {
		if got := e.Next(c.now); !got.Equal(c.next) {
			t.Errorf("Next(start+%v) = start+%v, want start+%v", c.now.Sub(from), got.Sub(from), c.next.Sub(from))
		}
		if got := e.Prev(c.now); !got.Equal(c.prev) {
			t.Errorf("Prev(start+%v) = %v, want %v", c.now.Sub(from), got, c.prev)
		}
	}
	back := from.Add(-time.Hour + 500*time.Millisecond)
	if got, want := e.Next(back), from.Add(-time.Hour+20*time.Second); !got.Equal(want) {
		t.Errorf("clock set back: Next = %v, want %v", got, want)
	}
	if got := e.Prev(back); !got.IsZero() {
		t.Errorf("clock set back: Prev = %v, want none", got)
	}
}

// The runs the clock asks for one after the other are an interval apart,
// whatever the fraction of a second the job was added at (a start rounded
// up past the moment of adding read as a clock set back: the first run
// came at the next whole interval from now and again a second later).
func TestEveryNRunsOncePerInterval(t *testing.T) {
	const d = 10 * time.Second
	for _, frac := range []time.Duration{0, time.Nanosecond, 336 * time.Millisecond, 999 * time.Millisecond} {
		added := time.Date(2030, 1, 2, 3, 4, 25, 0, time.UTC).Add(frac)
		e := everyN{d: d, from: rhythmFrom(added)}
		first := e.Next(added)
		if !first.After(added) || first.Sub(added) > d {
			t.Errorf("added at +%v: first run %v after", frac, first.Sub(added))
		}
		// The clock asks again at the time it woke, at or a little after
		// the run's.
		for _, late := range []time.Duration{0, 3 * time.Millisecond} {
			if next := e.Next(first.Add(late)); next.Sub(first) != d {
				t.Errorf("added at +%v, asked %v after the first run: the next comes %v after it, want %v", frac, late, next.Sub(first), d)
			}
		}
	}
}
