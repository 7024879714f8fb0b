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
	"strings"
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

	// hub, when set, makes replies durable (see Hub); the dispatcher
	// reports each send to it.
	hub *Hub
	// queues feed one sender goroutine per channel, so a platform that
	// makes us wait (a 429, a slow network) delays only its own chats.
	queues map[string]chan bus.Outbound

	wg          sync.WaitGroup // the dispatcher
	sendersWG   sync.WaitGroup
	cancel      context.CancelFunc
	cancelSends context.CancelFunc
}

// queueSize bounds the replies waiting for one channel's sender; beyond it
// a reply is dropped from memory (its message stays in the inbox and is
// answered again at the next start).
const queueSize = 256

// SendTimeout bounds one outbound message's delivery, rate-limit waits and
// retries included.
const SendTimeout = 3 * time.Minute

// StopDrain bounds how long a stop lets the senders finish: replies they
// did not deliver by then stay in the inbox and go at the next start.
const StopDrain = 5 * time.Second

// NewManager returns a manager dispatching from b.
func NewManager(b *bus.Bus, log *slog.Logger) *Manager {
	if log == nil {
		log = slog.Default()
	}
	return &Manager{bus: b, log: log, channels: map[string]Channel{}, unavailable: map[string]string{}}
}

// UseHub makes m report every send to h and start and stop h with the
// channels. Call it before Start.
func (m *Manager) UseHub(h *Hub) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hub = h
}

// Hub returns the hub set with UseHub (nil when none).
func (m *Manager) Hub() *Hub {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.hub
}

// Status returns the state of every channel that has an Intake, by name,
// plus the channels this build or config could not run.
func (m *Manager) Status() map[string]Status {
	m.mu.RLock()
	hub := m.hub
	out := map[string]Status{}
	for n, why := range m.unavailable {
		out[n] = Status{LastError: why}
	}
	m.mu.RUnlock()
	if hub != nil {
		for n, st := range hub.Status() {
			out[n] = st
		}
	}
	return out
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
	m.mu.RLock()
	hub := m.hub
	m.mu.RUnlock()
	if hub != nil {
		// What the last run left, before a channel can admit anything new.
		hub.Prepare()
	}
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
	dctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	sctx, scancel := context.WithCancel(context.WithoutCancel(ctx))
	m.mu.Lock()
	m.started = started
	m.cancel, m.cancelSends = cancel, scancel
	m.queues = map[string]chan bus.Outbound{}
	for _, c := range started {
		q := make(chan bus.Outbound, queueSize)
		m.queues[c.Name()] = q
		m.sendersWG.Add(1)
		go m.sender(sctx, q)
	}
	m.mu.Unlock()
	m.wg.Add(1)
	go m.dispatch(dctx)
	if hub != nil {
		hub.Start(sctx, m.sendNow)
	}
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
			m.deliver(out)
		}
	}
}

// deliver routes out to its channel's sender.
func (m *Manager) deliver(out bus.Outbound) {
	if bus.IsInternal(out.Channel) {
		m.log.Info("message on internal channel", "channel", out.Channel, "chat", out.ChatID, "text", clip(out.Text, 200))
		return
	}
	m.mu.RLock()
	q, ok := m.queues[out.Channel]
	hub := m.hub
	m.mu.RUnlock()
	if !ok {
		m.log.Warn("message for an unknown channel dropped", "channel", out.Channel, "chat", out.ChatID)
		return
	}
	if out.InboxID != 0 && strings.TrimSpace(out.Text) == "" && len(out.Media) == 0 {
		// An empty reply only clears its message from the inbox.
		if hub != nil {
			hub.Settle(out, nil)
		}
		return
	}
	if hub != nil {
		if hub.Behind(out) && hub.Wait(out) {
			return
		}
		hub.Hold(out)
	}
	select {
	case q <- out:
	default:
		m.log.Warn("too many replies wait for this channel; the sweeper sends this one later", "channel", out.Channel, "chat", out.ChatID)
		if hub != nil {
			hub.Release(out)
			hub.Keep(out, nil) // a message that answers nobody has no entry yet
		}
	}
}

// sender sends one channel's messages in order until its queue closes.
func (m *Manager) sender(ctx context.Context, q chan bus.Outbound) {
	defer m.sendersWG.Done()
	for out := range q {
		err := m.sendNow(ctx, out)
		switch hub := m.Hub(); {
		case hub == nil:
		case ctx.Err() == nil:
			hub.Settle(out, err)
		default:
			// Stopping: what was not delivered goes at the next start.
			hub.Stopped(out, err)
		}
	}
}

// sendNow sends out on its channel within SendTimeout.
func (m *Manager) sendNow(ctx context.Context, out bus.Outbound) error {
	m.mu.RLock()
	c, ok := m.channels[out.Channel]
	m.mu.RUnlock()
	if !ok {
		return Fail(Permanent, fmt.Errorf("channel %s is not running", out.Channel))
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	sctx, cancel := context.WithTimeout(ctx, SendTimeout)
	defer cancel()
	err := c.Send(sctx, out)
	if err != nil {
		m.log.Warn("sending failed", "channel", out.Channel, "chat", out.ChatID, "err", err)
	}
	return err
}

// Stop stops the dispatcher, sends the replies already queued (until ctx
// ends: what is left stays in the inbox for the next start), then stops
// every channel.
func (m *Manager) Stop(ctx context.Context) error {
	if m.cancel != nil {
		m.cancel()
	}
	m.wg.Wait()
	m.mu.Lock()
	queues := m.queues
	m.mu.Unlock()
	if queues != nil {
		// Replies the agent finished before it stopped.
	drain:
		for {
			select {
			case out, ok := <-m.bus.Outbound():
				if !ok {
					break drain
				}
				m.deliver(out)
			default:
				break drain
			}
		}
		m.mu.Lock()
		m.queues = nil
		m.mu.Unlock()
		for _, q := range queues {
			close(q)
		}
		// The senders get a few seconds, not the whole stop's deadline: a
		// send waiting out a long rate limit took it all, and the channels
		// stopped after it had no time left. What is cut short is kept.
		dctx, cancel := context.WithTimeout(ctx, StopDrain)
		stop := context.AfterFunc(dctx, m.cancelSends)
		m.sendersWG.Wait()
		stop()
		cancel()
		m.cancelSends()
	}
	if hub := m.Hub(); hub != nil {
		hub.Stop()
	}
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
