package channel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync/atomic"
	"time"
)

// Backoff spaces reconnection attempts: exponential from Min to Max, each
// wait drawn between half and all of the step ("equal jitter"), so boards
// that lost the same network do not all come back in the same second. The
// zero value waits 1 s to 5 min.
type Backoff struct {
	Min, Max time.Duration
	n        int
}

// Next returns the next wait and advances.
func (b *Backoff) Next() time.Duration {
	lo, hi := b.Min, b.Max
	if lo <= 0 {
		lo = time.Second
	}
	if hi < lo {
		hi = 5 * time.Minute
		if hi < lo {
			hi = lo
		}
	}
	d := lo
	for i := 0; i < b.n && d < hi; i++ {
		d *= 2
	}
	if d > hi {
		d = hi
	}
	if d < hi {
		b.n++
	}
	half := d / 2
	return half + rand.N(half+1)
}

// Reset starts over from Min (after a connection that worked).
func (b *Backoff) Reset() { b.n = 0 }

// AwaitFirst waits for a connection's first outcome on first: its error
// (a credential the platform refused) is Start's error; a platform that has
// not answered within wait, or a ctx that ends, leaves the connection trying
// in the background, and late reports the former.
func AwaitFirst(ctx context.Context, first <-chan error, wait time.Duration) (late bool, err error) {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case err := <-first:
		return false, err
	case <-t.C:
		return true, nil
	case <-ctx.Done():
		return false, nil
	}
}

// Sleep waits d or until ctx ends; it reports whether d passed.
func Sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// ErrQuiet is the cause a Watchdog gives the connection it cancels.
var ErrQuiet = errors.New("connection went quiet (no answer within the liveness bound); replacing it")

// Watchdog notices a connection that looks connected but has gone quiet:
// a long poll that never returns, a socket whose heartbeats are never
// acknowledged. The connection calls Alive whenever the platform answers;
// Watch cancels it when nothing came for longer than the bound.
type Watchdog struct {
	quiet time.Duration
	last  atomic.Int64
}

// NewWatchdog returns a watchdog that tolerates quiet for at most d.
func NewWatchdog(d time.Duration) *Watchdog {
	w := &Watchdog{quiet: d}
	w.Alive()
	return w
}

// Alive records that the platform answered now.
func (w *Watchdog) Alive() { w.last.Store(time.Now().UnixNano()) }

// Quiet is how long the platform has been silent.
func (w *Watchdog) Quiet() time.Duration { return time.Duration(time.Now().UnixNano() - w.last.Load()) }

// Watch calls cancel with ErrQuiet when the platform stays silent past the
// bound, and returns then or when ctx ends. It reports whether it fired.
func (w *Watchdog) Watch(ctx context.Context, cancel context.CancelCauseFunc) bool {
	tick := max(w.quiet/4, 10*time.Millisecond)
	t := time.NewTicker(tick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			if w.Quiet() > w.quiet {
				cancel(ErrQuiet)
				return true
			}
		}
	}
}

// Supervisor keeps one platform connection up: it runs connect, and when
// that returns, waits a backoff and runs it again, until its context ends.
// It owns the connection's goroutines: Run returns only when they are done.
type Supervisor struct {
	// Name is the platform's display name for messages ("Telegram").
	Name  string
	State *State
	Log   *slog.Logger
	// Backoff spaces the attempts (zero value: 1 s to 5 min).
	Backoff Backoff
	// Quiet, when set, bounds how long a connection may go without
	// calling alive before it is cancelled (with ErrQuiet) and replaced.
	Quiet time.Duration
	// Replaced counts connections the watchdog replaced (for tests and
	// the log).
	Replaced atomic.Int64
}

// Run runs connect until ctx ends. connect holds one connection until it
// fails or its context ends; it calls alive when the platform answers
// (the first call marks the channel connected and resets the backoff). An
// error made by RetryAfter sets the next wait; any other waits the backoff.
func (s *Supervisor) Run(ctx context.Context, connect func(ctx context.Context, alive func()) error) {
	log := s.Log
	if log == nil {
		log = slog.Default()
	}
	for ctx.Err() == nil {
		up, err := s.once(ctx, connect)
		if ctx.Err() != nil {
			return
		}
		wait := s.Backoff.Next()
		var se *SendError
		if errors.As(err, &se) && se.RetryAfter > 0 {
			wait = se.RetryAfter
		}
		what := "unreachable"
		if up {
			what = "connection lost"
		}
		why := fmt.Sprintf("%s %s: %v; retrying in %s", s.Name, what, err, roundWait(wait))
		if errors.Is(err, ErrQuiet) {
			s.Replaced.Add(1)
		}
		if s.State != nil {
			s.State.Disconnected(why)
			s.State.Fail(err)
		}
		log.Warn(s.Name+" "+what+"; retrying", "err", err, "in", roundWait(wait))
		if !Sleep(ctx, wait) {
			return
		}
	}
}

func roundWait(d time.Duration) time.Duration {
	if d < time.Second {
		return d.Round(time.Millisecond)
	}
	return d.Round(time.Second)
}

// once runs one connection under the watchdog; up reports whether it
// ever worked.
func (s *Supervisor) once(ctx context.Context, connect func(ctx context.Context, alive func()) error) (bool, error) {
	cctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var dog *Watchdog
	if s.Quiet > 0 {
		dog = NewWatchdog(s.Quiet)
	}
	var up atomic.Bool
	alive := func() {
		if dog != nil {
			dog.Alive()
		}
		if !up.Swap(true) {
			s.Backoff.Reset()
			if s.State != nil {
				s.State.Connected()
			}
		}
	}
	done := make(chan struct{})
	if dog != nil {
		go func() { defer close(done); dog.Watch(cctx, cancel) }()
	} else {
		close(done)
	}
	err := connect(cctx, alive)
	cancel(err)
	<-done
	if cause := context.Cause(cctx); errors.Is(cause, ErrQuiet) {
		return up.Load(), ErrQuiet
	}
	if err == nil {
		err = errors.New("connection closed")
	}
	return up.Load(), err
}
