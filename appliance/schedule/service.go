package schedule

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/robfig/cron/v3"

	"github.com/perchhq/perch/appliance/api"
	"github.com/perchhq/perch/store"
)

// ErrNotFound is returned for an unknown job id.
var ErrNotFound = fmt.Errorf("schedule: %w", api.ErrNoJob)

// runsAgain ends the result of a run the gateway's stop cut off, of a job
// that runs again at the next start.
const runsAgain = "; it runs again at the next start"

// ErrStopping is what a Runner's error wraps when the gateway's stop cut
// the run off before this service's own stop did (the agent stops its
// turns first): the run is then recorded as interrupted, not failed.
var ErrStopping = errors.New("schedule: the gateway is stopping")

// Runner carries out a job firing and returns a short result text.
type Runner func(ctx context.Context, j api.Job) (string, error)

// Options configure the service.
type Options struct {
	Store    *store.DB
	Location *time.Location // default zone of cron expressions
	Run      Runner
	Log      *slog.Logger
	// JobTimeout bounds one firing (default 5 minutes).
	JobTimeout time.Duration
	// CheckCommand, when set, vets a job's command when it is added, so a
	// command that would be refused when due is refused now.
	CheckCommand func(line string) error
	// CheckChannel, when set, vets the channel a job delivers to when it is
	// added, so a result is never sent to a channel that cannot take it.
	CheckChannel func(channel string) error
	// OnChange, when set, is called after a job is added, removed, enabled,
	// disabled, or has run and its outcome is recorded (the page's event
	// stream). It must not block, and must not call back into the service
	// synchronously.
	OnChange func()
}

var _ api.Jobs = (*Service)(nil)

// Service schedules and runs jobs.
type Service struct {
	opts Options
	log  *slog.Logger

	mu      sync.Mutex
	cron    *cron.Cron
	entries map[string]cron.EntryID
	ctx     context.Context
	cancel  context.CancelFunc
	running sync.WaitGroup
	started bool
	// runs holds the cancel of each job's run in progress: a job runs
	// once at a time, whoever starts it (the clock, a catch-up at start),
	// and a job removed stops its run.
	runs map[string]context.CancelFunc
}

// A sender nobody vouched for on a chat channel open to anyone may set
// reminders for their own chat (an automation over MQTT has no chat and no
// such limits), but each is a message the platform may
// count against the owner's quota (LINE's free plan has a few hundred
// pushes a month): at most maxStrangerJobs per chat, none more often than
// hourly.
const (
	maxStrangerJobs = 5
	minStrangerGap  = time.Hour
)

func (s *Service) strangerLimits(spec api.JobSpec) error {
	runs, err := Preview(spec.Schedule, s.opts.Location, time.Now(), 4)
	if err != nil {
		return err
	}
	for i := 1; i < len(runs); i++ {
		if runs[i].Sub(runs[i-1]) < minStrangerGap {
			return fmt.Errorf("a reminder set from a chat anyone may use repeats at most hourly (%s is more often); the owner can add it with perch cron add", spec.Schedule.Describe())
		}
	}
	recs, err := s.load()
	if err != nil {
		return err
	}
	n := 0
	for _, r := range recs {
		if r.Restricted && r.Channel == spec.Channel && r.To == spec.To {
			n++
		}
	}
	if n >= maxStrangerJobs {
		return fmt.Errorf("this chat has %d reminders, as many as a chat anyone may use can have; remove one first", n)
	}
	return nil
}

// New returns a stopped service.
func New(opts Options) *Service {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Location == nil {
		opts.Location = time.Local
	}
	if opts.JobTimeout <= 0 {
		opts.JobTimeout = 5 * time.Minute
	}
	return &Service{opts: opts, log: opts.Log, entries: map[string]cron.EntryID{}}
}

// Start loads the stored jobs and starts the clock.
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return nil
	}
	s.ctx, s.cancel = context.WithCancel(context.WithoutCancel(ctx))
	s.cron = cron.New(cron.WithLocation(s.opts.Location))
	jobs, err := s.load()
	if err != nil {
		return err
	}
	now := time.Now()
	for _, j := range jobs {
		if j.Started != nil {
			j = s.interruptedLocked(j)
		}
		if !j.Enabled {
			continue
		}
		if j.At != nil && !j.At.After(now) {
			// Its moment passed while we were down: late beats never.
			s.log.Info("cron job missed while stopped; running it now", "job", j.ID, "was_due", j.At.Format(time.RFC3339))
			s.fireNowLocked(j.ID)
			continue
		}
		if due := missedEvery(j, now); !due.IsZero() {
			// A run fell due while we were down: made up now, once,
			// and the rhythm goes on from this run, not the missed one.
			s.log.Info("cron job missed while stopped; running it now", "job", j.ID, "was_due", due.UTC().Format(time.RFC3339))
			since := rhythmFrom(now.UTC())
			j.Since = &since
			if err := s.opts.Store.Put(store.BucketCron, j.ID, j); err != nil {
				s.log.Warn("cron job: recording the made-up run's rhythm failed", "job", j.ID, "err", err)
			}
			s.fireNowLocked(j.ID)
		}
		if err := s.scheduleLocked(j); err != nil {
			s.log.Warn("cron job not scheduled", "job", j.ID, "err", err)
		}
	}
	s.cron.Start()
	s.started = true
	return nil
}

// Stop stops the clock and waits for running jobs until ctx ends.
func (s *Service) Stop(ctx context.Context) error {
	s.mu.Lock()
	if !s.started {
		s.mu.Unlock()
		return nil
	}
	s.started = false
	s.cancel()
	stopped := s.cron.Stop()
	s.mu.Unlock()
	done := make(chan struct{})
	go func() { <-stopped.Done(); s.running.Wait(); close(done) }()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("schedule: stop: %w", ctx.Err())
	}
}

func (s *Service) load() ([]record, error) {
	var jobs []record
	err := s.opts.Store.List(store.BucketCron, func(id string, data []byte) error {
		var j record
		if err := json.Unmarshal(data, &j); err != nil {
			s.log.Error("cron job record unreadable; skipped (fix or remove it)", "job", id, "err", err)
			return nil
		}
		jobs = append(jobs, j)
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("schedule: read jobs: %w", err)
	}
	sort.Slice(jobs, func(a, b int) bool { return jobs[a].Created.Before(jobs[b].Created) })
	return jobs, nil
}

func (s *Service) robfigSchedule(j record) (cron.Schedule, error) {
	sc := j.Schedule
	switch {
	case sc.AtSeconds != nil:
		if j.At == nil {
			return nil, errors.New("one-time job without a fixed moment")
		}
		return onceAt{*j.At}, nil
	case sc.EverySeconds != nil:
		return everyN{time.Duration(*sc.EverySeconds) * time.Second, j.rhythm()}, nil
	case sc.CronExpr != "":
		spec := sc.CronExpr
		if sc.TZ != "" {
			spec = "CRON_TZ=" + sc.TZ + " " + spec
		}
		return cron.ParseStandard(spec)
	}
	return nil, errors.New("job has no schedule")
}

// missedEvery is the run of an every_seconds job j that fell due before
// now and did not run (the gateway was stopped), or zero.
func missedEvery(j record, now time.Time) time.Time {
	if j.Schedule.EverySeconds == nil {
		return time.Time{}
	}
	e := everyN{time.Duration(*j.Schedule.EverySeconds) * time.Second, j.rhythm()}
	prev := e.Prev(now)
	if prev.IsZero() || (j.LastRun != nil && !j.LastRun.Before(prev)) {
		return time.Time{}
	}
	return prev
}

// scheduleLocked adds j to the clock and records its next run.
func (s *Service) scheduleLocked(j record) error {
	sched, err := s.robfigSchedule(j)
	if err != nil {
		return err
	}
	if old, ok := s.entries[j.ID]; ok {
		s.cron.Remove(old)
	}
	id := j.ID
	job := cron.NewChain(cron.SkipIfStillRunning(cron.DiscardLogger)).Then(cron.FuncJob(func() {
		s.running.Add(1)
		defer s.running.Done()
		s.fire(id)
	}))
	s.entries[j.ID] = s.cron.Schedule(sched, job)
	return nil
}

// interruptedText is the result of a run that the gateway's end cut off
// without a clean stop.
const interruptedText = "error: interrupted: the gateway stopped without a clean stop (power cut or kill) while this run was in progress; it was not run again, as it may have sent its message or run its command already"

// interruptedLocked records j's run that began before the gateway last
// ended without a clean stop, and returns j as recorded. Such a run is
// not repeated, as a systemd timer's is not: it may have delivered its
// message, run its command or used tools before the power went, and twice
// can be worse than once missed (a relay switched twice, a reminder sent
// twice). The job goes on with its next run; a one-time job is over. A
// graceful stop leaves this only when its deadline passed before the run
// ended (a command or a provider that ignored the cancel): it cancels the
// run and records it otherwise.
func (s *Service) interruptedLocked(j record) record {
	s.log.Warn("cron job was running when the gateway last stopped without a clean stop; not run again", "job", j.ID,
		"started", j.Started.UTC().Format(time.RFC3339))
	j = interrupted(j)
	if err := s.opts.Store.Put(store.BucketCron, j.ID, j); err != nil {
		s.log.Error("recording an interrupted cron run failed", "job", j.ID, "err", err)
	}
	return j
}

// interrupted is j with its run begun at j.Started recorded as cut off.
func interrupted(j record) record {
	t := j.Started.UTC().Truncate(time.Second)
	j.LastRun, j.LastResult, j.LastFailed, j.Started = &t, interruptedText, true, nil
	if j.Schedule.AtSeconds != nil {
		j.Enabled, j.NextRun = false, nil
	}
	return j
}

// fire runs job id and records the outcome.
func (s *Service) fire(id string) {
	var j record
	ctx, cancel := context.WithTimeout(s.ctx, s.opts.JobTimeout)
	defer cancel()
	if !s.begin(id, &j, cancel) {
		return
	}
	defer func() {
		s.mu.Lock()
		delete(s.runs, id)
		s.mu.Unlock()
	}()
	start := time.Now()
	out, err := s.opts.Run(ctx, j.Job)
	now := time.Now().UTC().Truncate(time.Second)
	stopped := err != nil && (s.ctx.Err() != nil || errors.Is(err, ErrStopping))
	result := out
	switch {
	case stopped:
	case err != nil && errors.Is(ctx.Err(), context.Canceled):
		s.log.Info("cron job removed while it ran; its run was stopped", "job", id)
	case err != nil:
		result = "error: " + err.Error()
		s.log.Warn("cron job failed", "job", id, "err", err)
	default:
		s.log.Info("cron job ran", "job", id, "took", time.Since(start).Round(time.Millisecond))
	}
	if len(result) > 500 {
		result = result[:500] + "…"
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// Re-read: the job may have been changed or removed while it ran.
	var cur record
	if err := s.opts.Store.Get(store.BucketCron, id, &cur); err != nil {
		return
	}
	if stopped && cur.Command != "" {
		// A command the stop killed may have done part of its work (a
		// relay switched, a file half written): as after a power cut,
		// it is not run again.
		cur.Started = &start
		cur = interrupted(cur)
		cur.LastResult = "error: interrupted by the gateway's stop while its command ran; not run again, as it may have done part of its work"
		s.log.Warn("cron job's command interrupted by the stop; not run again", "job", id)
		s.saveRun(cur)
		return
	}
	if stopped {
		// A message to send or the agent's turn, cut off by the
		// gateway's stop (a restart, an upgrade): the run did not count,
		// and a one-time or interval job runs again at the next start
		// (one missed while down is made up), as a chat's turn cut off
		// by a stop is answered then (the turn's rounds that ran tools
		// are in its session, for the model to see).
		cur.Started, cur.LastFailed = nil, true
		cur.LastResult = "error: interrupted by the gateway's stop"
		if cur.At != nil || cur.Schedule.EverySeconds != nil {
			cur.LastResult += runsAgain
		}
		s.log.Info("cron job interrupted by the stop", "job", id)
		s.saveRun(cur)
		return
	}
	cur.LastRun, cur.LastResult, cur.LastFailed, cur.Started = &now, result, err != nil, nil
	if cur.Schedule.AtSeconds != nil {
		cur.Enabled, cur.NextRun = false, nil
		if e, ok := s.entries[id]; ok && s.cron != nil {
			s.cron.Remove(e)
			delete(s.entries, id)
		}
	} else {
		cur.NextRun = s.nextLocked(id)
	}
	s.saveRun(cur)
}

// saveRun stores a run's outcome and tells the page.
func (s *Service) saveRun(j record) {
	if err := s.opts.Store.Put(store.BucketCron, j.ID, j); err != nil {
		s.log.Error("recording cron run failed", "job", j.ID, "err", err)
	}
	s.changed()
}

// begin reads job id into j and, when it is enabled and not running
// already, marks its run begun in the store, so a run cut off by a power
// cut is known at the next start and not repeated (interruptedLocked).
// When the mark cannot be written the job still runs: the database's
// trouble is logged, and a run missed is worse than one that may repeat.
// A job still running skips this run, as the clock's own runs do: a
// catch-up run at start and the clock's next tick came together, and a
// job that delivers or runs a command did it twice.
func (s *Service) begin(id string, j *record, cancel context.CancelFunc) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.opts.Store.Get(store.BucketCron, id, j); err != nil || !j.Enabled {
		return false
	}
	if _, ok := s.runs[id]; ok {
		s.log.Info("cron job still running; this run is skipped", "job", id)
		return false
	}
	if s.runs == nil {
		s.runs = map[string]context.CancelFunc{}
	}
	s.runs[id] = cancel
	now := time.Now().UTC()
	j.Started = &now
	if err := s.opts.Store.Put(store.BucketCron, id, *j); err != nil {
		s.log.Error("cron job: marking its run begun failed; running it anyway", "job", id, "err", err)
	}
	return true
}

func (s *Service) changed() {
	if s.opts.OnChange != nil {
		s.opts.OnChange()
	}
}

// nextLocked is the clock's next activation of id, or nil.
func (s *Service) nextLocked(id string) *time.Time {
	e, ok := s.entries[id]
	if !ok || s.cron == nil {
		return nil
	}
	n := s.cron.Entry(e).Next
	if n.IsZero() {
		// The clock fills Next only while running; compute it ourselves.
		if sched := s.cron.Entry(e).Schedule; sched != nil {
			n = sched.Next(time.Now().In(s.opts.Location))
		}
	}
	if n.IsZero() {
		return nil
	}
	n = n.UTC()
	return &n
}

// Add validates, stores and schedules a new job and returns it.
func (s *Service) Add(_ context.Context, spec api.JobSpec) (api.Job, error) {
	if err := Validate(spec); err != nil {
		return api.Job{}, fmt.Errorf("schedule: %w", err)
	}
	if spec.Command != "" && s.opts.CheckCommand != nil {
		if err := s.opts.CheckCommand(spec.Command); err != nil {
			return api.Job{}, fmt.Errorf("schedule: command: %w", err)
		}
	}
	if spec.Channel != "" && s.opts.CheckChannel != nil {
		if err := s.opts.CheckChannel(spec.Channel); err != nil {
			return api.Job{}, fmt.Errorf("schedule: %w", err)
		}
	}
	if spec.Restricted && spec.To != "" {
		if err := s.strangerLimits(spec); err != nil {
			return api.Job{}, fmt.Errorf("schedule: %w", err)
		}
	}
	j := record{Job: api.Job{ID: newID(), JobSpec: spec, Enabled: true}, Created: time.Now().UTC()}
	if j.Schedule.AtSeconds != nil {
		// A later moment falls on a whole second, as the times of the
		// other schedules do; "now" stays now, already due.
		at := j.Created
		if n := *j.Schedule.AtSeconds; n > 0 {
			at = wholeSecond(at.Add(time.Duration(n) * time.Second))
		}
		j.At = &at
	}
	if j.Schedule.EverySeconds != nil {
		since := rhythmFrom(j.Created)
		j.Since = &since
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// A moment already reached (at_seconds 0) is never a next activation
	// for the clock, so such a job is run directly.
	due := j.At != nil && !j.At.After(time.Now())
	if s.cron != nil && s.started && !due {
		if err := s.scheduleLocked(j); err != nil {
			return api.Job{}, fmt.Errorf("schedule: %w", err)
		}
		j.NextRun = s.nextLocked(j.ID)
	} else {
		j.NextRun = s.offlineNext(j)
	}
	if err := s.opts.Store.Put(store.BucketCron, j.ID, j); err != nil {
		if e, ok := s.entries[j.ID]; ok {
			s.cron.Remove(e)
			delete(s.entries, j.ID)
		}
		return api.Job{}, fmt.Errorf("schedule: save job: %w", err)
	}
	if due && s.started {
		s.fireNowLocked(j.ID)
	}
	s.changed()
	return j.Job, nil
}

// fireNowLocked runs job id in the background, counted as running so Stop
// waits for it.
func (s *Service) fireNowLocked(id string) {
	s.running.Add(1)
	go func() { defer s.running.Done(); s.fire(id) }()
}

// offlineNext computes the next run without a running clock (CLI use).
func (s *Service) offlineNext(j record) *time.Time {
	if j.At != nil {
		t := j.At.UTC()
		return &t
	}
	sched, err := s.robfigSchedule(j)
	if err != nil {
		return nil
	}
	n := sched.Next(time.Now().In(s.opts.Location)).UTC()
	return &n
}

// List returns every job, oldest first, with fresh next-run times.
func (s *Service) List(context.Context) ([]api.Job, error) {
	recs, err := s.load()
	if err != nil {
		return nil, err
	}
	jobs := make([]api.Job, len(recs))
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, r := range recs {
		if r.Started != nil {
			if !s.started {
				// Begun in a gateway that is gone without a clean stop:
				// listed as its next start will record it.
				r = interrupted(r)
			} else {
				r.RunningSince = r.Started
			}
		}
		jobs[i] = r.Job
		if !r.Enabled {
			jobs[i].NextRun = nil
			continue
		}
		if s.started {
			if n := s.nextLocked(r.ID); n != nil {
				jobs[i].NextRun = n
			}
		} else {
			jobs[i].NextRun = s.offlineNext(r)
		}
	}
	return jobs, nil
}

// Remove deletes job id and returns it as it was.
func (s *Service) Remove(_ context.Context, id string) (api.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var j record
	if err := s.opts.Store.Get(store.BucketCron, id, &j); err != nil {
		return api.Job{}, s.notFound(id, err)
	}
	if e, ok := s.entries[id]; ok {
		s.cron.Remove(e)
		delete(s.entries, id)
	}
	if err := s.opts.Store.Delete(store.BucketCron, id); err != nil {
		return api.Job{}, fmt.Errorf("schedule: remove job %s: %w", id, err)
	}
	if stop, ok := s.runs[id]; ok {
		// Its run would still deliver its message or finish its
		// command, for a job the owner just removed.
		stop()
	}
	s.changed()
	return j.Job, nil
}

// SetEnabled enables or disables job id.
func (s *Service) SetEnabled(_ context.Context, id string, on bool) (api.Job, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var j record
	if err := s.opts.Store.Get(store.BucketCron, id, &j); err != nil {
		return api.Job{}, s.notFound(id, err)
	}
	if on && !j.Enabled && j.Schedule.EverySeconds != nil {
		// Enabled again: its runs count from now, not from before the
		// pause (which would make up a missed run at the next start).
		since := rhythmFrom(time.Now().UTC())
		j.Since = &since
	}
	j.Enabled = on
	if !on {
		// A run the stop cut off no longer runs at the next start.
		j.LastResult = strings.TrimSuffix(j.LastResult, runsAgain)
	}
	if e, ok := s.entries[id]; ok {
		s.cron.Remove(e)
		delete(s.entries, id)
	}
	j.NextRun = nil
	if on {
		if j.At != nil && !j.At.After(time.Now()) {
			return api.Job{}, fmt.Errorf("schedule: job %s was a one-time job whose moment has passed; add a new one instead", id)
		}
		if s.started {
			if err := s.scheduleLocked(j); err != nil {
				return api.Job{}, fmt.Errorf("schedule: %w", err)
			}
			j.NextRun = s.nextLocked(id)
		} else {
			j.NextRun = s.offlineNext(j)
		}
	}
	if err := s.opts.Store.Put(store.BucketCron, id, j); err != nil {
		return api.Job{}, fmt.Errorf("schedule: save job: %w", err)
	}
	s.changed()
	return j.Job, nil
}

func (s *Service) notFound(id string, err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("%w %q (see 'perch cron list')", ErrNotFound, id)
	}
	return fmt.Errorf("schedule: read job %s: %w", id, err)
}

func newID() string {
	var b [4]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
