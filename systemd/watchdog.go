package systemd

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/coreos/go-systemd/v22/daemon"
)

// Watchdog keeps systemd's service watchdog (WatchdogSec= in the unit) fed
// while the gateway is healthy. It pings WATCHDOG=1 at half the interval
// systemd asked for, and only when the health function says yes: a gateway
// whose agent loop or HTTP server is wedged stops pinging, and systemd
// restarts it (Restart=on-failure counts a watchdog timeout as a failure).
//
// Off systemd, or with WatchdogSec= unset, Start starts nothing.
type Watchdog struct {
	healthy func() bool

	mu       sync.Mutex
	interval time.Duration
	cancel   context.CancelFunc
	done     chan struct{}
}

// NewWatchdog returns a stopped watchdog that asks healthy before each ping.
// A nil healthy counts as always healthy. healthy runs on the watchdog's own
// goroutine; if it blocks, no ping is sent, which is what a wedged process
// deserves.
func NewWatchdog(healthy func() bool) *Watchdog {
	if healthy == nil {
		healthy = func() bool { return true }
	}
	return &Watchdog{healthy: healthy}
}

// Start reads WATCHDOG_USEC and WATCHDOG_PID (set by systemd for the main
// process) and, when the watchdog is on, starts pinging. ctx bounds nothing
// here but is accepted to match every other service; the pinging runs until
// Stop. A malformed WATCHDOG_USEC is an error; a missing one is not.
func (w *Watchdog) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.done != nil {
		return errors.New("systemd: watchdog already started")
	}
	interval, err := daemon.SdWatchdogEnabled(false)
	if err != nil {
		return fmt.Errorf("systemd: watchdog: %w (WATCHDOG_USEC must be a positive number of microseconds; set WatchdogSec= in the unit, not the variable)", err)
	}
	w.interval = interval
	if interval <= 0 {
		return nil
	}
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	w.cancel = cancel
	w.done = make(chan struct{})
	go w.loop(loopCtx, interval/2, w.done)
	return nil
}

// Interval is the watchdog timeout systemd set, or 0 when the watchdog is
// off (not under systemd, WatchdogSec= unset, or not started).
func (w *Watchdog) Interval() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.interval
}

// Stop ends the pinging and waits for the goroutine, or for ctx. Stopping a
// watchdog that never ran is a no-op.
func (w *Watchdog) Stop(ctx context.Context) error {
	w.mu.Lock()
	cancel, done := w.cancel, w.done
	w.mu.Unlock()
	if done == nil {
		return nil
	}
	cancel()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("systemd: watchdog stop: the health function has not returned: %w", ctx.Err())
	}
}

func (w *Watchdog) loop(ctx context.Context, every time.Duration, done chan<- struct{}) {
	defer close(done)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !w.healthy() || ctx.Err() != nil {
			continue
		}
		// A failed send cannot be reported to anyone useful; systemd will
		// notice the missing ping, which is the signal that matters.
		_, _ = daemon.SdNotify(false, daemon.SdNotifyWatchdog)
	}
}
