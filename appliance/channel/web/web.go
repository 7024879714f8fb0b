// Package web is the web page as a chat channel ("web"): what Perch sends a
// page's chat (a reminder, a cron report, a USB notice, a subagent's
// result) is kept in that chat's history and pushed at once to the pages
// that are open, over one server-sent event stream per page that also
// carries the dashboard's live updates (sensor readings, USB devices,
// schedules, status).
//
// # Concepts
//
// A page's chat is the session "web:<chat>"; the page sends its turns to
// POST /chat with channel "web" and chat_id <chat>, so tools act in it and
// what they send later comes back here. Send appends the message to the
// session's history (where it waits as unread until a page shows it: the
// page compares message times with the last one it showed) and publishes a
// "message" event. Messages are appended without the agent's session lock:
// a turn writes its tool calls and results in one transaction at its end,
// so a message landing meanwhile never splits a call from its result.
//
// The stream: EventSource cannot send an Authorization header, and a token
// in a URL ends up in logs and browser history. So a page first asks for a
// ticket with an authenticated POST /events/ticket (the API token, like
// every protected route), then opens GET /events?ticket=…: a ticket is
// random, good for 30 seconds and one connection. Events carry ids
// "<epoch>-<n>"; a page that reconnects sends the last one as since= and
// receives what it missed from a ring of the latest 256 events (256 KiB at
// most), or a "resync" event telling it to reload its panels when it was
// away longer, or the gateway restarted (a new epoch). Every page has a
// queue of 64 events; a page that cannot keep up is disconnected rather
// than buffered without bound, and reconnects. An idle stream costs a
// comment line every 25 seconds and, while at least one page is open, a
// status event every 30 seconds.
package web

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/chat"
)

// Name is the channel's name, in jobs' channel and /chat's channel.
const Name = "web"

// DefaultChat is the page's chat until the owner starts another one, and
// where deliveries go when no page has spoken yet: every browser of the
// owner opens it, so a reminder set from the terminal is read on the page.
const DefaultChat = "home"

// SessionKey is the session of a page's chat.
func SessionKey(chat string) string { return Name + ":" + chat }

// ValidChat reports whether chat is a page chat id: 1-64 letters, digits,
// '_', '.' or '-'.
//
// A loop, not a regexp: `{1,64}` compiles to 64 copies of the class, a
// millisecond and 60 KB at every start for a check this simple.
func ValidChat(chat string) bool {
	if chat == "" || len(chat) > 64 {
		return false
	}
	for _, c := range []byte(chat) {
		ok := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '.' || c == '-'
		if !ok {
			return false
		}
	}
	return true
}

// History is the store's session history; *store.DB implements it.
type History interface {
	Append(key string, msgs []chat.Message, usage chat.Usage, limit int, route ...string) error
	History(key string) ([]chat.Message, error)
}

// Options configure the channel.
type Options struct {
	Store History
	// HistoryLimit is agents.defaults.history_limit.
	HistoryLimit int
	// Status, when set, is the snapshot sent as a "status" event to a page
	// when it connects and every StatusEvery while a page is connected.
	Status      func(ctx context.Context) any
	StatusEvery time.Duration
	Log         *slog.Logger
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Channel is the web page channel.
type Channel struct {
	opts    Options
	log     *slog.Logger
	hub     *hub
	tickets *tickets

	mu         sync.Mutex
	stopStatus context.CancelFunc
	statusDone chan struct{}
	wake       chan struct{}
}

// New returns the channel; Start begins the status updates.
func New(opts Options) *Channel {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.StatusEvery <= 0 {
		opts.StatusEvery = 30 * time.Second
	}
	if opts.HistoryLimit <= 0 {
		opts.HistoryLimit = 200
	}
	c := &Channel{opts: opts, log: opts.Log, hub: newHub(opts.Log), tickets: newTickets(opts.Now), wake: make(chan struct{}, 1)}
	c.hub.onChange = func(int) { c.RefreshStatus() }
	return c
}

// Name is "web".
func (c *Channel) Name() string { return Name }

// Start runs the status updates: a goroutine that sleeps while no page is
// connected.
func (c *Channel) Start(ctx context.Context) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.statusDone != nil || c.opts.Status == nil {
		return nil
	}
	ctx, c.stopStatus = context.WithCancel(context.WithoutCancel(ctx))
	c.statusDone = make(chan struct{})
	go c.statusLoop(ctx)
	return nil
}

// CloseStreams ends every page's event stream. The gateway calls it as it
// stops, before its HTTP server's shutdown: that waits for requests to
// finish, and a page's stream never does by itself (a stop with one page
// open took 32 s, the shutdown's whole deadline, and left the board
// unreachable meanwhile). Pages reconnect to the next gateway.
func (c *Channel) CloseStreams() { c.hub.close() }

// Stop ends every page's stream and the status updates.
func (c *Channel) Stop(ctx context.Context) error {
	c.CloseStreams()
	c.mu.Lock()
	stop, done := c.stopStatus, c.statusDone
	c.mu.Unlock()
	if stop == nil {
		return nil
	}
	stop()
	select {
	case <-done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("web: stop: %w", ctx.Err())
	}
}

// RefreshStatus sends a status event soon (a page connected, the provider
// changed), instead of at the next tick.
func (c *Channel) RefreshStatus() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

func (c *Channel) statusLoop(ctx context.Context) {
	defer close(c.statusDone)
	t := time.NewTicker(c.opts.StatusEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-c.wake:
		}
		if c.hub.count() == 0 {
			continue // nobody looks: no work
		}
		sctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		st := c.opts.Status(sctx)
		cancel()
		c.hub.publish("status", st)
	}
}

// Publish sends an event of kind to every open page (sensors, usb, jobs,
// …). It never blocks.
func (c *Channel) Publish(kind string, v any) { c.hub.publish(kind, v) }

// Pages is the number of pages holding a stream.
func (c *Channel) Pages() int { return c.hub.count() }

// Check is always ok: the page is served whether or not one is open.
func (c *Channel) Check(context.Context) (bool, string) {
	n := c.hub.count()
	switch n {
	case 0:
		return true, "no page open; messages wait in their chat as unread"
	case 1:
		return true, "1 page open"
	}
	return true, fmt.Sprintf("%d pages open", n)
}

// Message is a chat message as the page shows it (history and events).
type Message struct {
	// Chat is the page chat it belongs to.
	Chat string `json:"chat"`
	Role string `json:"role"` // user or assistant
	Text string `json:"text"`
	// T is Unix milliseconds.
	T int64 `json:"t"`
	// Pushed marks a message sent to the chat (a reminder, a notice),
	// rather than a reply to the page's own message.
	Pushed bool `json:"pushed,omitempty"`
	// Page, on an exchange's messages, is the page that asked: it shows
	// them from its own answer and leaves the event alone.
	Page string `json:"page,omitempty"`
}

// maxPageID bounds the page id an event repeats: it comes from a header.
const maxPageID = 64

// Exchange shows a turn answered through /chat on a page's chat in every
// other page open on it: two tabs, or the phone and the laptop, follow one
// conversation without a reload. The turn has already stored both
// messages; this only publishes them. What makes a turn the page's is its
// session, web:<chat>, whichever client sent it (`perch agent -s
// web:home` too); turns on other sessions are left out.
func (c *Channel) Exchange(in bus.Inbound, asked time.Time, reply string, answered time.Time, page string) {
	id, ok := strings.CutPrefix(in.SessionKey, Name+":")
	if !ok || !ValidChat(id) {
		return
	}
	if len(page) > maxPageID {
		page = ""
	}
	c.hub.publish("message", Message{Chat: id, Role: chat.RoleUser, Text: in.Text, T: asked.UnixMilli(), Page: page})
	if strings.TrimSpace(reply) != "" {
		c.hub.publish("message", Message{Chat: id, Role: chat.RoleAssistant, Text: reply, T: answered.UnixMilli(), Page: page})
	}
}

// Send keeps m in its chat's history and pushes it to the open pages. An
// error means the message is not kept (a chat id that is not a page's, or
// the database refused it): the caller records the delivery as failed.
func (c *Channel) Send(_ context.Context, m bus.Outbound) error {
	if !ValidChat(m.ChatID) {
		return fmt.Errorf("web: %q is not a page chat (1-64 letters, digits, '_', '.' or '-')", m.ChatID)
	}
	text := m.Text
	for _, md := range m.Media {
		name := md.Name
		if name == "" {
			name = md.Path
		}
		text = strings.TrimSpace(text + "\n[" + md.Kind + ": " + name + "]")
	}
	if strings.TrimSpace(text) == "" {
		return nil
	}
	now := c.opts.Now()
	msg := chat.Message{Role: chat.RoleAssistant, Content: text, Time: now.UnixMilli()}
	if err := c.opts.Store.Append(SessionKey(m.ChatID), []chat.Message{msg}, chat.Usage{}, c.opts.HistoryLimit, Name, m.ChatID); err != nil {
		return fmt.Errorf("web: keep the message for chat %s: %w", m.ChatID, err)
	}
	c.hub.publish("message", Message{Chat: m.ChatID, Role: chat.RoleAssistant, Text: text, T: msg.Time, Pushed: true})
	return nil
}

// maxHistory bounds the messages GET /web/history returns.
const maxHistory = 100

// history returns the chat's latest user and assistant messages with text.
func (c *Channel) history(chatID string) ([]Message, error) {
	msgs, err := c.opts.Store.History(SessionKey(chatID))
	if err != nil {
		return nil, err
	}
	out := []Message{}
	for i, m := range msgs {
		if m.Role != chat.RoleUser && m.Role != chat.RoleAssistant || strings.TrimSpace(m.Content) == "" {
			continue
		}
		// A message pushed to the chat is an assistant message that does
		// not close a turn: the one before it is not the user's question
		// or a tool result it answers.
		pushed := m.Role == chat.RoleAssistant && len(m.ToolCalls) == 0 &&
			(i == 0 || msgs[i-1].Role == chat.RoleAssistant && len(msgs[i-1].ToolCalls) == 0)
		out = append(out, Message{Chat: chatID, Role: m.Role, Text: m.Content, T: m.Time, Pushed: pushed})
	}
	if len(out) > maxHistory {
		out = out[len(out)-maxHistory:]
	}
	return out, nil
}
