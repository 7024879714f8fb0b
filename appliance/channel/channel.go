// Package channel connects chat platforms to the bus.
//
// # Concepts
//
// A Channel is one platform connection (Telegram, Slack, Discord, LINE). The
// Manager starts the enabled ones, and its dispatcher takes each outbound
// message from the bus and hands it to the channel it names. Messages for
// the internal channels (cli, system, subagent) are only logged; messages for
// a channel that is not registered are dropped with a warning, since nothing
// could deliver them.
//
// A channel of one account must run in one gateway only: platforms deliver
// each update once, to whichever connection holds it.
package channel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/perchhq/perch/appliance/bus"
)

// Channel is a chat platform connection.
type Channel interface {
	Name() string
	// Start connects; an error (credential rejected, port busy) stops the
	// gateway's start-up.
	Start(ctx context.Context) error
	Stop(ctx context.Context) error
	Send(ctx context.Context, m bus.Outbound) error
	// Check reports the connection's health for /ready.
	Check(ctx context.Context) (ok bool, msg string)
}

// Manager owns the channels and the dispatcher.
type Manager struct {
	bus *bus.Bus
	log *slog.Logger

	mu       sync.RWMutex
	channels map[string]Channel
	// unavailable records enabled channels this build cannot run, with why.
	unavailable map[string]string
	// started are the channels whose Start succeeded and that have not been
	// stopped: Stop must not stop a channel twice or one that never ran.
	started []Channel

	wg     sync.WaitGroup
	cancel context.CancelFunc
}

// NewManager returns a manager dispatching from b.
func NewManager(b *bus.Bus, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.Default()
	}
	return &Manager{bus: b, log: log, channels: map[string]Channel{}, unavailable: map[string]string{}}
}

// Register adds a channel to start.
func (m *Manager) Register(c Channel) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.channels[c.Name()] = c
}

// Unavailable records an enabled channel that cannot run, so /ready reports
// it instead of the gateway silently ignoring the config.
func (m *Manager) Unavailable(name, why string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.unavailable[name] = why
}

// Names lists the registered channels.
func (m *Manager) Names() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]string, 0, len(m.channels))
	for n := range m.channels {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Checks returns a readiness check per registered or unavailable channel.
func (m *Manager) Checks() map[string]func(ctx context.Context) (bool, string) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := map[string]func(ctx context.Context) (bool, string){}
	for n, c := range m.channels {
		out["channel:"+n] = c.Check
	}
	for n, why := range m.unavailable {
		why := why
		out["channel:"+n] = func(context.Context) (bool, string) { return false, why }
	}
	return out
}

// Start starts every channel, then the dispatcher. On a channel's failure
// the ones already started are stopped and the error names the channel.
func (m *Manager) Start(ctx context.Context) error {
	m.mu.RLock()
	names := make([]string, 0, len(m.channels))
	for n := range m.channels {
		names = append(names, n)
	}
	m.mu.RUnlock()
	sort.Strings(names)
	var started []Channel
	for _, n := range names {
		m.mu.RLock()
		c := m.channels[n]
		m.mu.RUnlock()
		if err := c.Start(ctx); err != nil {
			for _, s := range started {
				s.Stop(context.WithoutCancel(ctx))
			}
			return fmt.Errorf("channel %s: %w; fix the channels.%s section of the config", n, err, n)
		}
		started = append(started, c)
		m.log.Info("channel started", "channel", n)
	}
	m.mu.Lock()
	m.started = started
	m.mu.Unlock()
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	m.cancel = cancel
	m.wg.Add(1)
	go m.dispatch(dctx)
	return nil
}

func (m *Manager) dispatch(ctx context.Context) {
	defer m.wg.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case out, ok := <-m.bus.Outbound():
			if !ok {
				return
			}
			m.deliver(ctx, out)
		}
	}
}

func (m *Manager) deliver(ctx context.Context, out bus.Outbound) {
	if bus.IsInternal(out.Channel) {
		m.log.Info("message on internal channel", "channel", out.Channel, "chat", out.ChatID, "text", clip(out.Text, 200))
		return
	}
	m.mu.RLock()
	c, ok := m.channels[out.Channel]
	m.mu.RUnlock()
	if !ok {
		m.log.Warn("message for an unknown channel dropped", "channel", out.Channel, "chat", out.ChatID)
		return
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := c.Send(sctx, out); err != nil {
		m.log.Warn("sending failed", "channel", out.Channel, "chat", out.ChatID, "err", err)
	}
}

// Stop stops the dispatcher, then every channel.
func (m *Manager) Stop(ctx context.Context) error {
	if m.cancel != nil {
		m.cancel()
	}
	m.wg.Wait()
	m.mu.Lock()
	started := m.started
	m.started = nil
	m.mu.Unlock()
	var errs []error
	for _, c := range started {
		if err := c.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("channel %s: %w", c.Name(), err))
		}
	}
	return errors.Join(errs...)
}

// clip shortens s to at most n bytes, cutting at a rune boundary.
func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}
