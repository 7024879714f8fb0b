package schedule

import (
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/api"
	"github.com/perchhq/perch/store/storetest"
)

func TestChannelCheck(t *testing.T) {
	check := ChannelCheck(func() []string { return []string{"telegram", "web"} })
	for ch, want := range map[string]string{
		"web":      "",
		"telegram": "",
		"bogus":    `no channel "bogus" is enabled, so nothing would be delivered; channels that deliver: telegram, web`,
		"slack":    `no channel "slack" is enabled`,
		"cli":      `channel "cli" is internal: what is sent there is only logged and nobody reads it; deliver to one of: telegram, web`,
		"system":   "internal",
	} {
		err := check(ch)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s refused: %v", ch, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: %v, want %q", ch, err, want)
		}
	}
	if err := ChannelCheck(func() []string { return nil })("web"); err == nil || !strings.Contains(err.Error(), "channels that deliver: none") {
		t.Errorf("no channels: %v", err)
	}
}

// TestAddRefusesChannelThatDoesNotDeliver: the check runs when a job is
// added, so "cron list" never claims a delivery to nowhere.
func TestAddRefusesChannelThatDoesNotDeliver(t *testing.T) {
	db := storetest.Open(t)
	s := New(Options{Store: db, Location: time.UTC, Log: slog.New(slog.DiscardHandler),
		CheckChannel: ChannelCheck(func() []string { return []string{"web"} })})
	at := int64(60)
	_, err := s.Add(ctx0, api.JobSpec{Message: "m", Deliver: true, Channel: "bogus", To: "1", Schedule: api.Schedule{AtSeconds: &at}})
	if err == nil || !strings.Contains(err.Error(), `no channel "bogus"`) {
		t.Fatalf("add = %v", err)
	}
	if jobs, _ := s.List(ctx0); len(jobs) != 0 {
		t.Errorf("a refused job was stored: %+v", jobs)
	}
	if _, err := s.Add(ctx0, api.JobSpec{Message: "m", Deliver: true, Channel: "web", To: "home", Schedule: api.Schedule{AtSeconds: &at}}); err != nil {
		t.Errorf("web refused: %v", err)
	}
}

func TestPreview(t *testing.T) {
	now := time.Date(2026, 3, 6, 10, 30, 0, 0, time.UTC) // a Friday
	every := int64(600)
	got, err := Preview(api.Schedule{EverySeconds: &every}, time.UTC, now, 3)
	if err != nil || len(got) != 3 || !got[0].Equal(now.Add(10*time.Minute)) || !got[2].Equal(now.Add(30*time.Minute)) {
		t.Errorf("every 600 s: %v %v", got, err)
	}
	got, err = Preview(api.Schedule{CronExpr: "0 9 * * 1-5", TZ: "Europe/Berlin"}, time.UTC, now, 2)
	if err != nil || len(got) != 2 || got[0].Format(time.RFC3339) != "2026-03-09T08:00:00Z" || got[1].Format(time.RFC3339) != "2026-03-10T08:00:00Z" {
		t.Errorf("weekdays at 9 in Berlin from a Friday noon: %v %v", got, err)
	}
	at := int64(90)
	if got, err = Preview(api.Schedule{AtSeconds: &at}, nil, now, 5); err != nil || len(got) != 1 || !got[0].Equal(now.Add(90*time.Second)) {
		t.Errorf("at: %v %v", got, err)
	}
	if _, err := Preview(api.Schedule{CronExpr: "0 25 * * *"}, time.UTC, now, 5); err == nil || !strings.Contains(err.Error(), "cron_expr") {
		t.Errorf("bad expression: %v", err)
	}
}

// TestOnChangeIsCalled: every change of the jobs tells the page (add,
// disable, enable, a run recorded, remove).
func TestOnChangeIsCalled(t *testing.T) {
	db := storetest.Open(t)
	var n atomic.Int32
	rec := newRecorder()
	s := New(Options{Store: db, Location: time.UTC, Run: rec.run, Log: slog.New(slog.DiscardHandler), OnChange: func() { n.Add(1) }})
	start(t, s)
	at := int64(0)
	j, err := s.Add(ctx0, api.JobSpec{Message: "m", Schedule: api.Schedule{AtSeconds: &at}})
	if err != nil {
		t.Fatal(err)
	}
	<-rec.fire
	waitJob(t, s, j.ID, func(j api.Job) bool { return j.LastRun != nil })
	every := int64(3600)
	k, _ := s.Add(ctx0, api.JobSpec{Message: "m", Schedule: api.Schedule{EverySeconds: &every}})
	s.SetEnabled(ctx0, k.ID, false)
	s.SetEnabled(ctx0, k.ID, true)
	s.Remove(ctx0, k.ID)
	if got := n.Load(); got != 6 {
		t.Errorf("OnChange called %d times, want 6 (add, run, add, disable, enable, remove)", got)
	}
}
