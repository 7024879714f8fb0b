package schedule

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/api"
	"github.com/perchhq/perch/store"
	"github.com/perchhq/perch/store/storetest"
)

// recorder is a Runner that remembers the jobs it ran.
type recorder struct {
	mu   sync.Mutex
	ran  []api.Job
	out  string
	err  error
	fire chan api.Job
}

var ctx0 = context.Background()

func newRecorder() *recorder { return &recorder{out: "done", fire: make(chan api.Job, 16)} }

func (r *recorder) run(_ context.Context, j api.Job) (string, error) {
	r.mu.Lock()
	r.ran = append(r.ran, j)
	out, err := r.out, r.err
	r.mu.Unlock()
	r.fire <- j
	return out, err
}

func (r *recorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.ran)
}

func newService(t *testing.T, db *store.DB, run Runner) *Service {
	t.Helper()
	s := New(Options{Store: db, Location: time.UTC, Run: run, Log: slog.New(slog.DiscardHandler)})
	return s
}

func start(t *testing.T, s *Service) {
	t.Helper()
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Stop(context.Background()); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
}

// waitJob polls the stored job until cond holds, failing after a deadline.
func waitJob(t *testing.T, s *Service, id string, cond func(api.Job) bool) api.Job {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		j, ok := find(t, s, id)
		if ok && cond(j) {
			return j
		}
		if time.Now().After(deadline) {
			t.Fatalf("job %s never reached the expected state; last %+v", id, j)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func find(t *testing.T, s *Service, id string) (api.Job, bool) {
	t.Helper()
	jobs, err := s.List(ctx0)
	if err != nil {
		t.Fatal(err)
	}
	for _, j := range jobs {
		if j.ID == id {
			return j, true
		}
	}
	return api.Job{}, false
}

func awaitClosed(t *testing.T, ch <-chan struct{}, why string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(10 * time.Second):
		t.Fatal(why)
	}
}

func ran(j api.Job) bool { return j.LastRun != nil }

var idRE = regexp.MustCompile(`^[0-9a-f]{8}$`)

func TestAdd(t *testing.T) {
	for _, started := range []bool{false, true} {
		name := "stopped service"
		if started {
			name = "running service"
		}
		t.Run(name, func(t *testing.T) {
			s := newService(t, storetest.Open(t), newRecorder().run)
			if started {
				start(t, s)
			}
			before := time.Now()
			j, err := s.Add(ctx0, api.JobSpec{Message: "stretch", Schedule: api.Schedule{EverySeconds: i64(3600)}})
			if err != nil {
				t.Fatal(err)
			}
			if !idRE.MatchString(j.ID) {
				t.Errorf("id %q, want 8 hex digits assigned by Add", j.ID)
			}
			if !j.Enabled || j.LastResult != "" || j.LastRun != nil {
				t.Errorf("new job = %+v, want enabled with no history", j)
			}
			if j.NextRun == nil {
				t.Fatal("no next_run")
			}
			if lo, hi := before.Add(3599*time.Second), time.Now().Add(3601*time.Second); j.NextRun.Before(lo) || j.NextRun.After(hi) {
				t.Errorf("next_run %v, want about an hour from now", j.NextRun)
			}
			stored, ok := find(t, s, j.ID)
			if !ok || stored.Message != "stretch" || !stored.Enabled {
				t.Errorf("listed job = %+v, want the added one", stored)
			}
			j2, err := s.Add(ctx0, api.JobSpec{Message: "other", Schedule: api.Schedule{AtSeconds: i64(3600)}})
			if err != nil {
				t.Fatal(err)
			}
			if j2.ID == j.ID {
				t.Error("two jobs got the same id")
			}
			var rec2 record
			if err := s.opts.Store.Get(store.BucketCron, j2.ID, &rec2); err != nil {
				t.Fatal(err)
			}
			if rec2.At == nil || j2.NextRun == nil || !j2.NextRun.Equal(*rec2.At) {
				t.Errorf("one-time job: at %v, next_run %v; want both the fixed moment", rec2.At, j2.NextRun)
			}
		})
	}
}

func TestAddRejectsInvalid(t *testing.T) {
	s := newService(t, storetest.Open(t), newRecorder().run)
	_, err := s.Add(ctx0, api.JobSpec{Message: "m", Schedule: api.Schedule{EverySeconds: i64(1)}})
	if err == nil || !strings.HasPrefix(err.Error(), "schedule: ") || !strings.Contains(err.Error(), "every_seconds") {
		t.Fatalf("Add = %v, want a schedule: error naming every_seconds", err)
	}
	if jobs, _ := s.List(ctx0); len(jobs) != 0 {
		t.Errorf("an invalid job was stored: %+v", jobs)
	}
}

// A one-time job fires once, records its run and is then disabled with no
// next run: a one-time job that ran will not run again.
func TestOneTimeJobFires(t *testing.T) {
	for _, at := range []int64{0, 1} {
		t.Run(time.Duration(at*int64(time.Second)).String(), func(t *testing.T) {
			rec := newRecorder()
			rec.out = "reminded"
			s := newService(t, storetest.Open(t), rec.run)
			start(t, s)
			added := time.Now().Truncate(time.Second)
			j, err := s.Add(ctx0, api.JobSpec{Message: "tea is ready", Schedule: api.Schedule{AtSeconds: i64(at)}})
			if err != nil {
				t.Fatal(err)
			}
			got := waitJob(t, s, j.ID, ran)
			if got.Enabled || got.NextRun != nil {
				t.Errorf("after running: enabled %v, next_run %v; want disabled, none", got.Enabled, got.NextRun)
			}
			if got.LastResult != "reminded" {
				t.Errorf("last_result = %q, want the runner's output", got.LastResult)
			}
			if got.LastRun.Before(added) {
				t.Errorf("last_run %v before the job was created %v", got.LastRun, added)
			}
			if fired := <-rec.fire; fired.ID != j.ID || fired.Message != "tea is ready" {
				t.Errorf("runner got %+v", fired)
			}
			if rec.count() != 1 {
				t.Errorf("ran %d times, want once", rec.count())
			}
		})
	}
}

func TestRunnerErrorBecomesLastResult(t *testing.T) {
	rec := newRecorder()
	rec.err = errors.New("provider openrouter: rate limited")
	s := newService(t, storetest.Open(t), rec.run)
	start(t, s)
	j, err := s.Add(ctx0, api.JobSpec{Message: "m", Schedule: api.Schedule{AtSeconds: i64(0)}})
	if err != nil {
		t.Fatal(err)
	}
	got := waitJob(t, s, j.ID, ran)
	if got.LastResult != "error: provider openrouter: rate limited" {
		t.Errorf("last_result = %q", got.LastResult)
	}
}

func TestLongResultIsCapped(t *testing.T) {
	rec := newRecorder()
	rec.out = strings.Repeat("x", 5000)
	s := newService(t, storetest.Open(t), rec.run)
	start(t, s)
	j, _ := s.Add(ctx0, api.JobSpec{Message: "m", Schedule: api.Schedule{AtSeconds: i64(0)}})
	got := waitJob(t, s, j.ID, ran)
	if len(got.LastResult) > 510 || !strings.HasSuffix(got.LastResult, "…") {
		t.Errorf("last_result is %d bytes, want it capped near 500 with …", len(got.LastResult))
	}
}

// A cron expression runs in the job's tz, else in the service's zone.
func TestCronNextRunInZone(t *testing.T) {
	tokyo, err := time.LoadLocation("Asia/Tokyo")
	if err != nil {
		t.Fatal(err)
	}
	newYork, err := time.LoadLocation("America/New_York")
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name  string
		tz    string
		zone  *time.Location // where 09:30 should fall
		local *time.Location // the service's default zone
	}{
		{"job tz", "Asia/Tokyo", tokyo, time.UTC},
		{"job tz beats the default", "Asia/Tokyo", tokyo, newYork},
		{"default zone", "", newYork, newYork},
	}
	for _, tt := range tests {
		for _, started := range []bool{false, true} {
			t.Run(tt.name+map[bool]string{false: ", offline", true: ", running"}[started], func(t *testing.T) {
				s := New(Options{Store: storetest.Open(t), Location: tt.local, Run: newRecorder().run, Log: slog.New(slog.DiscardHandler)})
				if started {
					start(t, s)
				}
				j, err := s.Add(ctx0, api.JobSpec{Message: "standup", Schedule: api.Schedule{CronExpr: "30 9 * * *", TZ: tt.tz}})
				if err != nil {
					t.Fatal(err)
				}
				check := func(what string, n *time.Time) {
					if n == nil {
						t.Fatalf("%s: no next_run", what)
					}
					in := n.In(tt.zone)
					if in.Hour() != 9 || in.Minute() != 30 || in.Second() != 0 {
						t.Errorf("%s: next_run %v is %v in %s, want 09:30", what, n, in, tt.zone)
					}
					if d := time.Until(*n); d <= 0 || d > 25*time.Hour {
						t.Errorf("%s: next_run %v is not within the next day", what, n)
					}
				}
				check("Add", j.NextRun)
				listed, _ := find(t, s, j.ID)
				check("List", listed.NextRun)
			})
		}
	}
}

func TestEveryNextRun(t *testing.T) {
	s := newService(t, storetest.Open(t), newRecorder().run)
	start(t, s)
	before := time.Now()
	j, err := s.Add(ctx0, api.JobSpec{Message: "m", Schedule: api.Schedule{EverySeconds: i64(120)}})
	if err != nil {
		t.Fatal(err)
	}
	if lo, hi := before.Add(119*time.Second), time.Now().Add(121*time.Second); j.NextRun == nil || j.NextRun.Before(lo) || j.NextRun.After(hi) {
		t.Errorf("next_run %v, want about 120s from now", j.NextRun)
	}
}

func TestUnknownIDs(t *testing.T) {
	s := newService(t, storetest.Open(t), newRecorder().run)
	start(t, s)
	if _, err := s.SetEnabled(ctx0, "nope", true); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), `"nope"`) {
		t.Errorf("SetEnabled(nope) = %v, want ErrNotFound naming the id", err)
	}
	if _, err := s.SetEnabled(ctx0, "nope", false); !errors.Is(err, ErrNotFound) {
		t.Errorf("SetEnabled(nope, false) = %v, want ErrNotFound", err)
	}
	if _, err := s.Remove(ctx0, "nope"); !errors.Is(err, ErrNotFound) || !strings.Contains(err.Error(), "perch cron list") {
		t.Errorf("Remove(nope) = %v, want ErrNotFound pointing at perch cron list", err)
	}
}

func TestSetEnabledAndRemove(t *testing.T) {
	for _, started := range []bool{false, true} {
		t.Run(map[bool]string{false: "offline", true: "running"}[started], func(t *testing.T) {
			s := newService(t, storetest.Open(t), newRecorder().run)
			if started {
				start(t, s)
			}
			j, err := s.Add(ctx0, api.JobSpec{Message: "m", Schedule: api.Schedule{EverySeconds: i64(600)}})
			if err != nil {
				t.Fatal(err)
			}
			off, err := s.SetEnabled(ctx0, j.ID, false)
			if err != nil {
				t.Fatal(err)
			}
			if off.Enabled || off.NextRun != nil {
				t.Errorf("disabled job: enabled %v, next_run %v", off.Enabled, off.NextRun)
			}
			if listed, _ := find(t, s, j.ID); listed.Enabled || listed.NextRun != nil {
				t.Errorf("listed disabled job: %+v", listed)
			}
			on, err := s.SetEnabled(ctx0, j.ID, true)
			if err != nil {
				t.Fatal(err)
			}
			if !on.Enabled || on.NextRun == nil {
				t.Errorf("re-enabled job: enabled %v, next_run %v", on.Enabled, on.NextRun)
			}
			if _, err := s.Remove(ctx0, j.ID); err != nil {
				t.Fatal(err)
			}
			if _, ok := find(t, s, j.ID); ok {
				t.Error("removed job still listed")
			}
			if _, err := s.Remove(ctx0, j.ID); !errors.Is(err, ErrNotFound) {
				t.Errorf("second Remove = %v, want ErrNotFound", err)
			}
		})
	}
}

// A disabled one-time job does not fire; one whose moment passed cannot be
// re-enabled.
func TestDisabledOneTimeJob(t *testing.T) {
	rec := newRecorder()
	db := storetest.Open(t)
	s := newService(t, db, rec.run)
	j, err := s.Add(ctx0, api.JobSpec{Message: "m", Schedule: api.Schedule{AtSeconds: i64(0)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetEnabled(ctx0, j.ID, false); err != nil {
		t.Fatal(err)
	}
	// A marker job that is due at start, added after: when it has run, the
	// disabled one had its chance too.
	marker, _ := s.Add(ctx0, api.JobSpec{Message: "marker", Schedule: api.Schedule{AtSeconds: i64(0)}})
	start(t, s)
	waitJob(t, s, marker.ID, ran)
	if got, _ := find(t, s, j.ID); got.LastRun != nil || rec.count() != 1 {
		t.Errorf("disabled job ran (last_run %v, runs %d)", got.LastRun, rec.count())
	}
	_, err = s.SetEnabled(ctx0, j.ID, true)
	if err == nil || !strings.Contains(err.Error(), "moment has passed") {
		t.Errorf("re-enabling a past one-time job = %v, want a refusal", err)
	}
}

// A one-time job whose moment passed while no gateway ran is run at Start:
// late beats never.
func TestMissedOneTimeJobRunsAtStart(t *testing.T) {
	rec := newRecorder()
	db := storetest.Open(t)
	past := time.Now().Add(-2 * time.Hour).UTC()
	created := past.Add(-time.Minute)
	missed := record{Job: api.Job{ID: "0badc0de", JobSpec: api.JobSpec{Message: "water the plants", Schedule: api.Schedule{AtSeconds: i64(60)}},
		Enabled: true}, Created: created, At: &past}
	if err := db.Put(store.BucketCron, missed.ID, missed); err != nil {
		t.Fatal(err)
	}
	s := newService(t, db, rec.run)
	start(t, s)
	got := waitJob(t, s, missed.ID, ran)
	if got.Enabled || got.NextRun != nil || got.LastResult != "done" {
		t.Errorf("after the late run: %+v", got)
	}
	if (<-rec.fire).Message != "water the plants" {
		t.Error("the runner got another job")
	}
}

// An interval job keeps its rhythm across restarts of the gateway: the
// next run is counted from when it was added (or last made up), not from
// the start, so a board restarted more often than the interval still runs
// it. A run that fell due while the gateway was stopped is made up at
// start, once, and the rhythm goes on from there.
func TestEveryJobKeepsItsRhythmAcrossRestarts(t *testing.T) {
	db := storetest.Open(t)
	now := time.Now().UTC().Truncate(time.Second)
	since := now.Add(-50 * time.Second)
	lastRun := now.Add(-10 * time.Second)
	onTime := record{Job: api.Job{ID: "0000a11e", JobSpec: api.JobSpec{Message: "on time", Schedule: api.Schedule{EverySeconds: i64(40)}},
		Enabled: true, LastRun: &lastRun}, Created: since, Since: &since}
	// Stored before Since existed: the rhythm is its last run's.
	oldLast := now.Add(-25 * time.Second)
	legacy := record{Job: api.Job{ID: "0000b0b0", JobSpec: api.JobSpec{Message: "legacy", Schedule: api.Schedule{EverySeconds: i64(60)}},
		Enabled: true, LastRun: &oldLast}, Created: now.Add(-time.Hour)}
	missedSince := now.Add(-2 * time.Hour)
	missed := record{Job: api.Job{ID: "0000dead", JobSpec: api.JobSpec{Message: "missed", Schedule: api.Schedule{EverySeconds: i64(3600)}},
		Enabled: true, LastRun: &missedSince}, Created: missedSince, Since: &missedSince}
	for _, r := range []record{onTime, legacy, missed} {
		if err := db.Put(store.BucketCron, r.ID, r); err != nil {
			t.Fatal(err)
		}
	}
	rec := newRecorder()
	s := newService(t, db, rec.run)
	start(t, s)
	j, _ := find(t, s, onTime.ID)
	if want := since.Add(80 * time.Second); j.NextRun == nil || !j.NextRun.Equal(want) {
		t.Errorf("the job on time: next_run %v, want %v (its rhythm, not start+40s)", j.NextRun, want)
	}
	j, _ = find(t, s, legacy.ID)
	if want := oldLast.Add(60 * time.Second); j.NextRun == nil || !j.NextRun.Equal(want) {
		t.Errorf("the job stored without since: next_run %v, want %v (a minute after its last run)", j.NextRun, want)
	}
	got := waitJob(t, s, missed.ID, func(j api.Job) bool { return j.LastRun != nil && j.LastRun.After(missedSince) })
	if (<-rec.fire).Message != "missed" {
		t.Error("the runner got another job")
	}
	if lo, hi := now.Add(3600*time.Second), time.Now().Add(3602*time.Second); got.NextRun == nil || got.NextRun.Before(lo) || got.NextRun.After(hi) {
		t.Errorf("after the made-up run: next_run %v, want an hour after it", got.NextRun)
	}
	if rec.count() != 1 {
		t.Errorf("%d runs at start, want only the missed job's", rec.count())
	}
	var stored record
	if err := db.Get(store.BucketCron, missed.ID, &stored); err != nil || stored.Since == nil || stored.Since.Before(now) {
		t.Errorf("the made-up run's rhythm was not stored: since %v (%v)", stored.Since, err)
	}
}

// Enabling a paused interval job starts its rhythm again: it does not make
// up the runs of its pause.
func TestEnabledEveryJobCountsFromEnabling(t *testing.T) {
	db := storetest.Open(t)
	s := newService(t, db, newRecorder().run)
	start(t, s)
	j, err := s.Add(ctx0, api.JobSpec{Message: "m", Schedule: api.Schedule{EverySeconds: i64(600)}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetEnabled(ctx0, j.ID, false); err != nil {
		t.Fatal(err)
	}
	var r record
	if err := db.Get(store.BucketCron, j.ID, &r); err != nil {
		t.Fatal(err)
	}
	paused := r.Created.Add(-3*time.Hour - 5*time.Minute) // as if added then
	r.Since = &paused
	if err := db.Put(store.BucketCron, j.ID, r); err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	j, err = s.SetEnabled(ctx0, j.ID, true)
	if err != nil {
		t.Fatal(err)
	}
	if lo, hi := before.Add(599*time.Second), time.Now().Add(601*time.Second); j.NextRun == nil || j.NextRun.Before(lo) || j.NextRun.After(hi) {
		t.Errorf("next_run %v, want ten minutes after enabling", j.NextRun)
	}
	if err := db.Get(store.BucketCron, j.ID, &r); err != nil || r.Since == nil || r.Since.Before(before.Truncate(time.Second)) {
		t.Errorf("since %v after enabling at %v (%v)", r.Since, before, err)
	}
}

// Stop waits for a running job: with a context that ends first it reports
// so, and otherwise returns only after the runner finished.
func TestStopWaitsForRunningJob(t *testing.T) {
	running := make(chan struct{})
	release := make(chan struct{})
	var finished atomic.Bool
	run := func(ctx context.Context, j api.Job) (string, error) {
		close(running)
		<-release // ignores ctx, like a command that takes its time
		finished.Store(true)
		return "ok", nil
	}
	s := newService(t, storetest.Open(t), run)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Add(ctx0, api.JobSpec{Message: "m", Schedule: api.Schedule{AtSeconds: i64(0)}}); err != nil {
		t.Fatal(err)
	}
	awaitClosed(t, running, "the job never started")
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	err := s.Stop(ctx)
	if !errors.Is(err, context.DeadlineExceeded) || !strings.HasPrefix(err.Error(), "schedule: stop") {
		t.Errorf("Stop with a running job and a short deadline = %v, want schedule: stop: deadline exceeded", err)
	}
	if finished.Load() {
		t.Fatal("the job finished although it was never released")
	}
	close(release)
}

// Stop cancels a running job's context and returns after it ended and its
// result was recorded: cut off by the stop, as a chat's turn is, the run
// does not count, and the one-time job runs at the next start. A restart
// ended a one-time reminder without ever running it.
func TestStopCancelsAndRecords(t *testing.T) {
	running := make(chan struct{})
	var finished atomic.Bool
	run := func(ctx context.Context, j api.Job) (string, error) {
		close(running)
		<-ctx.Done()
		finished.Store(true)
		return "", ctx.Err()
	}
	db := storetest.Open(t)
	s := newService(t, db, run)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	j, err := s.Add(ctx0, api.JobSpec{Message: "m", Schedule: api.Schedule{AtSeconds: i64(0)}})
	if err != nil {
		t.Fatal(err)
	}
	awaitClosed(t, running, "the job never started")
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if !finished.Load() {
		t.Fatal("Stop returned before the running job ended")
	}
	var stored record
	if err := db.Get(store.BucketCron, j.ID, &stored); err != nil {
		t.Fatal(err)
	}
	if stored.LastResult != "error: interrupted by the gateway's stop; it runs again at the next start" || !stored.LastFailed ||
		!stored.Enabled || stored.LastRun != nil || stored.Started != nil {
		t.Errorf("after the stop: enabled %v, last_run %v, started %v, failed %v, result %q; want the interruption recorded and the job still to run",
			stored.Enabled, stored.LastRun, stored.Started, stored.LastFailed, stored.LastResult)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Errorf("second Stop = %v", err)
	}
	rec := newRecorder()
	again := newService(t, db, rec.run)
	start(t, again)
	if got := waitJob(t, again, j.ID, ran); got.Enabled || got.LastResult != "done" || rec.count() != 1 {
		t.Errorf("at the next start: %+v, %d runs; want it run once and over", got, rec.count())
	}
}

// While a job runs, the list says since when; a run begun in a gateway
// that is gone without a clean stop is listed offline as its next start
// will record it.
func TestListSaysWhatRuns(t *testing.T) {
	db := storetest.Open(t)
	running := make(chan struct{})
	release := make(chan struct{})
	s := newService(t, db, func(ctx context.Context, j api.Job) (string, error) {
		close(running)
		<-release
		return "ok", nil
	})
	start(t, s)
	defer close(release)
	j, err := s.Add(ctx0, api.JobSpec{Message: "m", Schedule: api.Schedule{AtSeconds: i64(0)}})
	if err != nil {
		t.Fatal(err)
	}
	awaitClosed(t, running, "the job never started")
	if got, _ := find(t, s, j.ID); got.RunningSince == nil || got.LastRun != nil {
		t.Errorf("while it runs: running_since %v, last_run %v", got.RunningSince, got.LastRun)
	}
	offline := newService(t, db, nil) // as perch cron list with the gateway gone
	if got, _ := find(t, offline, j.ID); got.RunningSince != nil || got.Enabled || !got.LastFailed || !strings.Contains(got.LastResult, "interrupted") {
		t.Errorf("listed offline: %+v; want it as interrupted", got)
	}
}

// Jobs live in the store: a new service on the reopened file lists and
// schedules them.
func TestJobsSurviveReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	db, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	s := newService(t, db, newRecorder().run)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	every, err := s.Add(ctx0, api.JobSpec{Message: "every", Deliver: true, Channel: "telegram", To: "42", Schedule: api.Schedule{EverySeconds: i64(600)}})
	if err != nil {
		t.Fatal(err)
	}
	cronJob, err := s.Add(ctx0, api.JobSpec{Command: "uptime", Schedule: api.Schedule{CronExpr: "0 9 * * *", TZ: "Europe/Berlin"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.SetEnabled(ctx0, cronJob.ID, false); err != nil {
		t.Fatal(err)
	}
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db2, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db2.Close()
	s2 := newService(t, db2, newRecorder().run)
	start(t, s2)
	jobs, err := s2.List(ctx0)
	if err != nil {
		t.Fatal(err)
	}
	if len(jobs) != 2 || jobs[0].ID != every.ID || jobs[1].ID != cronJob.ID {
		t.Fatalf("after reopen: %+v, want the two jobs oldest first", jobs)
	}
	e := jobs[0]
	if e.Message != "every" || !e.Deliver || e.Channel != "telegram" || e.To != "42" || *e.Schedule.EverySeconds != 600 || !e.Enabled || e.NextRun == nil {
		t.Errorf("every job after reopen: %+v", e)
	}
	c := jobs[1]
	if c.Command != "uptime" || c.Schedule.CronExpr != "0 9 * * *" || c.Schedule.TZ != "Europe/Berlin" || c.Enabled || c.NextRun != nil {
		t.Errorf("cron job after reopen: %+v", c)
	}
}

// An unreadable record is skipped (and logged), not fatal to the others.
func TestUnreadableRecordSkipped(t *testing.T) {
	db := storetest.Open(t)
	if err := db.Put(store.BucketCron, "broken", "not a job"); err != nil {
		t.Fatal(err)
	}
	s := newService(t, db, newRecorder().run)
	start(t, s)
	j, err := s.Add(ctx0, api.JobSpec{Message: "m", Schedule: api.Schedule{EverySeconds: i64(60)}})
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := s.List(ctx0)
	if err != nil || len(jobs) != 1 || jobs[0].ID != j.ID {
		t.Errorf("List = %+v, %v; want only the readable job", jobs, err)
	}
}

// A recurring job keeps firing and stays enabled, with a next run ahead.
func TestRecurringJobRecordsNextRun(t *testing.T) {
	rec := newRecorder()
	db := storetest.Open(t)
	// The shortest interval is 10 s; rather than wait for it, fire the job
	// through the function the clock calls.
	s := newService(t, db, rec.run)
	start(t, s)
	j, err := s.Add(ctx0, api.JobSpec{Message: "m", Schedule: api.Schedule{EverySeconds: i64(600)}})
	if err != nil {
		t.Fatal(err)
	}
	s.fire(j.ID)
	var stored record
	if err := db.Get(store.BucketCron, j.ID, &stored); err != nil {
		t.Fatal(err)
	}
	if !stored.Enabled || stored.LastRun == nil || stored.NextRun == nil || !stored.NextRun.After(*stored.LastRun) {
		t.Errorf("after a run: %+v, want enabled with a next run after the last", stored)
	}
}

// TestStrangersRemindersAreBounded: a sender nobody vouched for may set
// reminders for their own chat, at most five and none more often than
// hourly: each is a push the platform may count against the owner's
// quota. A stranger's reminder every 10 s was accepted. The owner, and an
// automation over MQTT (no chat), are not bounded.
func TestStrangersRemindersAreBounded(t *testing.T) {
	s := newService(t, storetest.Open(t), newRecorder().run)
	ctx := context.Background()
	every := func(n int64) api.Schedule { return api.Schedule{EverySeconds: &n} }
	stranger := func(sc api.Schedule, to string) error {
		_, err := s.Add(ctx, api.JobSpec{Message: "m", Deliver: true, Channel: "line", To: to, Restricted: true, Schedule: sc})
		return err
	}
	for _, sc := range []api.Schedule{every(10), every(3599), {CronExpr: "*/5 * * * *"}, {CronExpr: "0,30 9 * * *"}} {
		if err := stranger(sc, "Ustranger"); err == nil || !strings.Contains(err.Error(), "at most hourly") {
			t.Errorf("%s: %v; want it refused as too frequent", sc.Describe(), err)
		}
	}
	for i := 0; i < 5; i++ {
		if err := stranger(every(3600), "Ustranger"); err != nil {
			t.Fatalf("reminder %d: %v", i+1, err)
		}
	}
	if err := stranger(api.Schedule{CronExpr: "0 9 * * *"}, "Ustranger"); err == nil || !strings.Contains(err.Error(), "remove one first") {
		t.Errorf("a sixth reminder: %v", err)
	}
	if err := stranger(every(3600), "Uother"); err != nil {
		t.Errorf("another chat's first: %v", err)
	}
	if _, err := s.Add(ctx, api.JobSpec{Message: "m", Deliver: true, Channel: "line", To: "Ustranger", Schedule: every(10)}); err != nil {
		t.Errorf("the owner's: %v", err)
	}
	if _, err := s.Add(ctx, api.JobSpec{Message: "m", Channel: "mqtt", Restricted: true, Schedule: every(60)}); err != nil {
		t.Errorf("an automation's: %v", err)
	}
}

// A run is marked begun in the store before it runs, and the mark goes
// with its result: a power cut in between leaves the mark for the next
// start to find.
func TestRunIsMarkedBegunWhileItRuns(t *testing.T) {
	db := storetest.Open(t)
	seen := make(chan *time.Time, 1)
	run := func(_ context.Context, j api.Job) (string, error) {
		var r record
		if err := db.Get(store.BucketCron, j.ID, &r); err != nil {
			t.Error(err)
		}
		seen <- r.Started
		return "ok", nil
	}
	s := newService(t, db, run)
	start(t, s)
	before := time.Now().UTC().Add(-time.Millisecond)
	j, err := s.Add(ctx0, api.JobSpec{Message: "m", Schedule: api.Schedule{AtSeconds: i64(0)}})
	if err != nil {
		t.Fatal(err)
	}
	if started := <-seen; started == nil || started.Before(before) {
		t.Fatalf("during the run the stored record's started = %v, want the run's beginning", started)
	}
	waitJob(t, s, j.ID, ran)
	var r record
	if err := db.Get(store.BucketCron, j.ID, &r); err != nil || r.Started != nil {
		t.Errorf("after the run: started = %v (%v), want it cleared with the result", r.Started, err)
	}
}

// A run that a power cut or a kill ended (its begun mark still stored) is
// not run again at the next start, one-time or recurring: it may have sent
// its message or switched something already. It is recorded as
// interrupted; a recurring job goes on with its rhythm.
func TestInterruptedRunIsNotRepeated(t *testing.T) {
	db := storetest.Open(t)
	now := time.Now().UTC().Truncate(time.Second)
	due := now.Add(-30 * time.Second)
	began := due.Add(200 * time.Millisecond)
	once := record{Job: api.Job{ID: "0000a0a0", JobSpec: api.JobSpec{Message: "take the pills", Schedule: api.Schedule{AtSeconds: i64(60)}},
		Enabled: true}, Created: due.Add(-time.Minute), At: &due, Started: &began}
	since := now.Add(-90 * time.Second)
	every := record{Job: api.Job{ID: "0000b1b1", JobSpec: api.JobSpec{Message: "water", Schedule: api.Schedule{EverySeconds: i64(60)}},
		Enabled: true}, Created: since, Since: &since, Started: &began}
	// The control: a one-time job that was due and never began runs late.
	never := record{Job: api.Job{ID: "0000c2c2", JobSpec: api.JobSpec{Message: "late", Schedule: api.Schedule{AtSeconds: i64(60)}},
		Enabled: true}, Created: due.Add(-time.Hour), At: &due}
	for _, r := range []record{once, every, never} {
		if err := db.Put(store.BucketCron, r.ID, r); err != nil {
			t.Fatal(err)
		}
	}
	rec := newRecorder()
	s := newService(t, db, rec.run)
	start(t, s)
	waitJob(t, s, never.ID, ran)
	time.Sleep(200 * time.Millisecond) // a job fired wrongly would have run by now
	if (<-rec.fire).Message != "late" || rec.count() != 1 {
		t.Fatalf("%d runs at start, want only the job that never began", rec.count())
	}
	for _, id := range []string{once.ID, every.ID} {
		var r record
		if err := db.Get(store.BucketCron, id, &r); err != nil {
			t.Fatal(err)
		}
		if r.Started != nil || r.LastResult != interruptedText || !r.LastFailed || r.LastRun == nil || !r.LastRun.Equal(began.Truncate(time.Second)) {
			t.Errorf("job %s after the start: started %v, last_run %v, failed %v, result %q; want the interrupted run recorded", id, r.Started, r.LastRun, r.LastFailed, r.LastResult)
		}
	}
	if j, _ := find(t, s, once.ID); j.Enabled || j.NextRun != nil {
		t.Errorf("the interrupted one-time job: enabled %v, next_run %v; want it over", j.Enabled, j.NextRun)
	}
	if j, _ := find(t, s, every.ID); j.NextRun == nil || !j.NextRun.Equal(since.Add(120*time.Second)) {
		t.Errorf("the interrupted recurring job: next_run %v, want %v (its rhythm)", j.NextRun, since.Add(120*time.Second))
	}
}

// A run the gateway's stop cut off before the scheduler's own stop (the
// agent ends its turns first, and the runner says so with ErrStopping) is
// interrupted, not failed: the one-time job stays to run at the next
// start. It was disabled, never run, one stop in six under load. Disabled
// meanwhile, it no longer says it runs again.
func TestRunCutOffByTheAgentsStopIsInterrupted(t *testing.T) {
	db := storetest.Open(t)
	s := newService(t, db, func(ctx context.Context, j api.Job) (string, error) {
		return "", fmt.Errorf("%w: agent: shutting down", ErrStopping)
	})
	start(t, s)
	j, err := s.Add(ctx0, api.JobSpec{Message: "m", Schedule: api.Schedule{AtSeconds: i64(0)}})
	if err != nil {
		t.Fatal(err)
	}
	got := waitJob(t, s, j.ID, func(j api.Job) bool { return j.LastResult != "" })
	if !got.Enabled || got.LastRun != nil || got.LastResult != "error: interrupted by the gateway's stop; it runs again at the next start" {
		t.Errorf("after the agent's stop: %+v; want it still to run", got)
	}
	if got, err = s.SetEnabled(ctx0, j.ID, false); err != nil || got.LastResult != "error: interrupted by the gateway's stop" {
		t.Errorf("disabled: %q, %v; want the promise to run again gone", got.LastResult, err)
	}
}

// A command the gateway's stop killed may have done part of its work: as
// after a power cut, its run is not repeated at the next start (a relay
// switched twice). A clean restart ran such a command again.
func TestCommandCutOffByTheStopIsNotRepeated(t *testing.T) {
	db := storetest.Open(t)
	running := make(chan struct{})
	s := newService(t, db, func(ctx context.Context, j api.Job) (string, error) {
		close(running)
		<-ctx.Done()
		return "", ctx.Err()
	})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	j, err := s.Add(ctx0, api.JobSpec{Command: "relay on; sleep 5; relay off", Schedule: api.Schedule{AtSeconds: i64(0)}})
	if err != nil {
		t.Fatal(err)
	}
	awaitClosed(t, running, "the job never started")
	if err := s.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	var stored record
	if err := db.Get(store.BucketCron, j.ID, &stored); err != nil {
		t.Fatal(err)
	}
	if stored.Enabled || stored.LastRun == nil || !stored.LastFailed || !strings.Contains(stored.LastResult, "while its command ran; not run again") {
		t.Errorf("after the stop: enabled %v, last_run %v, result %q; want it over, not to run again", stored.Enabled, stored.LastRun, stored.LastResult)
	}
	rec := newRecorder()
	start(t, newService(t, db, rec.run))
	time.Sleep(200 * time.Millisecond)
	if rec.count() != 0 {
		t.Errorf("the command ran again at the next start")
	}
}

// TestAJobRunsOnceAtATime: a run made up at start that is still going
// when the clock's next tick comes is not joined by a second one. The
// clock's own runs skipped while one ran, but the made-up run was not
// the clock's: a job that delivers or runs a command did it twice.
func TestAJobRunsOnceAtATime(t *testing.T) {
	db := storetest.Open(t)
	// Every 10 s (the shortest), one run missed while stopped: it is made
	// up at start, and the rhythm goes on from there.
	since := time.Now().UTC().Truncate(time.Second).Add(-15 * time.Second)
	long := since.Add(-time.Hour)
	r := record{Job: api.Job{ID: "0000f00d", JobSpec: api.JobSpec{Message: "tick", Schedule: api.Schedule{EverySeconds: i64(10)}},
		Enabled: true, LastRun: &long}, Created: long, Since: &since}
	if err := db.Put(store.BucketCron, r.ID, r); err != nil {
		t.Fatal(err)
	}
	var runs atomic.Int32
	release := make(chan struct{})
	s := newService(t, db, func(ctx context.Context, j api.Job) (string, error) {
		if runs.Add(1) == 1 {
			select {
			case <-release:
			case <-ctx.Done():
			}
		}
		return "done", nil
	})
	start(t, s)
	time.Sleep(11 * time.Second) // past the clock's next tick
	if n := runs.Load(); n != 1 {
		t.Errorf("%d runs at once; want the made-up run alone", n)
	}
	close(release)
}

// TestARemovedJobsRunStops: removing a job while it runs stops the run;
// it went on, and would still deliver its message or finish its command.
func TestARemovedJobsRunStops(t *testing.T) {
	db := storetest.Open(t)
	past := time.Now().UTC().Add(-time.Minute)
	r := record{Job: api.Job{ID: "0000beef", JobSpec: api.JobSpec{Message: "once", Schedule: api.Schedule{AtSeconds: i64(1)}},
		Enabled: true}, Created: past, At: &past}
	if err := db.Put(store.BucketCron, r.ID, r); err != nil {
		t.Fatal(err)
	}
	running, stopped := make(chan struct{}), make(chan struct{})
	s := newService(t, db, func(ctx context.Context, j api.Job) (string, error) {
		close(running)
		select {
		case <-ctx.Done():
			close(stopped)
			return "", ctx.Err()
		case <-time.After(10 * time.Second):
			return "delivered", nil
		}
	})
	start(t, s)
	<-running
	if _, err := s.Remove(ctx0, r.ID); err != nil {
		t.Fatal(err)
	}
	select {
	case <-stopped:
	case <-time.After(2 * time.Second):
		t.Fatal("the removed job's run went on")
	}
}
