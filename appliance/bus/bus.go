// Package bus carries messages between the chat channels and the agent.
//
// Inbound messages come from channels, /chat, cron jobs, heartbeats and device
// events; outbound messages go from the agent (or a tool) to the dispatcher,
// which hands each to the channel it names. Both directions are bounded
// queues: a full queue is reported to the sender instead of growing memory.
package bus

import (
	"context"
	"errors"
	"sync"
)

// Internal channels never reach an external platform; their messages are
// logged only: they have no platform to deliver to.
const (
	ChannelCLI      = "cli"
	ChannelSystem   = "system"
	ChannelSubagent = "subagent"
)

// IsInternal reports whether channel is one of the internal channels.
func IsInternal(channel string) bool {
	switch channel {
	case ChannelCLI, ChannelSystem, ChannelSubagent, "":
		return true
	}
	return false
}

// Media is a file attached to a message: for inbound messages already saved
// locally (Path); for outbound ones a local file (Path) or a data: or
// https: URL (URL), such as an image generate_image made.
type Media struct {
	Kind string `json:"kind"` // image, audio, video, file, sticker, voice
	Path string `json:"path,omitempty"`
	URL  string `json:"url,omitempty"`
	Name string `json:"name,omitempty"`
	MIME string `json:"mime,omitempty"`
}

// Inbound is a message for the agent.
type Inbound struct {
	Channel    string
	ChatID     string
	SenderID   string
	SessionKey string // "<channel>:<chat>" unless the source chose one
	Text       string
	Media      []Media
	// ThreadID names the thread (Slack) or forum topic (Telegram) the
	// message came from, so the answer goes back there.
	ThreadID string
	// ReplyTo identifies the platform message to quote in the answer.
	ReplyTo  string
	Metadata map[string]string
	// InboxID is the durable inbox entry of a channel message (0 for other
	// sources). The agent copies it onto the reply, and the dispatcher
	// clears the entry once the reply was sent: a message is never lost
	// nor answered twice across a restart.
	InboxID uint64
	// RestrictTools asks for a turn with only the tools that cannot change
	// the board (no exec, file writes, hardware writes or cron commands):
	// sources set it for senders they cannot vouch for, such as any client
	// of an MQTT broker unless mqtt.allow_all_tools is true.
	RestrictTools bool
}

// MetaReplay marks (in Inbound.Metadata) a channel message whose turn was
// interrupted by a shutdown and runs again: its text may be in the
// session's history already.
const MetaReplay = "replay"

// Key returns the message's session key, deriving "<channel>:<chat>" when the
// source gave none.
func (m Inbound) Key() string {
	if m.SessionKey != "" {
		return m.SessionKey
	}
	return m.Channel + ":" + m.ChatID
}

// Outbound is a message for a channel.
type Outbound struct {
	Channel  string
	ChatID   string
	ThreadID string
	Text     string
	ReplyTo  string
	Media    []Media
	// InboxID is the inbox entry this message answers (0 for notices,
	// deliveries and tool messages). A reply with an InboxID and no text
	// or media only clears the entry.
	InboxID uint64
	// Delivered counts the units of this message (its text's parts, then
	// its media) an earlier attempt delivered; sending it again sends only
	// the rest, so the chat never reads a part twice.
	Delivered int `json:",omitempty"`
}

// ErrFull is returned when a queue has no room; the caller decides whether to
// drop, retry or answer "busy".
var ErrFull = errors.New("bus: queue full")

// ErrClosed is returned after Close.
var ErrClosed = errors.New("bus: closed")

// Bus is a pair of bounded queues.
type Bus struct {
	in  chan Inbound
	out chan Outbound

	// done is closed first by Close, to wake publishers waiting for room:
	// they hold mu's read lock, which Close needs before closing the queues.
	done      chan struct{}
	closeOnce sync.Once

	mu     sync.RWMutex
	closed bool
}

// New returns a bus whose queues hold size messages each.
func New(size int) *Bus {
	if size < 1 {
		size = 1
	}
	return &Bus{in: make(chan Inbound, size), out: make(chan Outbound, size), done: make(chan struct{})}
}

// PublishInbound queues m for the agent, waiting for room until ctx ends.
func (b *Bus) PublishInbound(ctx context.Context, m Inbound) error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return ErrClosed
	}
	select {
	case b.in <- m:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-b.done:
		return ErrClosed
	}
}

// PublishOutbound queues m for the dispatcher without waiting: the agent must
// never stall on a slow channel.
func (b *Bus) PublishOutbound(m Outbound) error {
	b.mu.RLock()
	defer b.mu.RUnlock()
	if b.closed {
		return ErrClosed
	}
	select {
	case b.out <- m:
		return nil
	default:
		return ErrFull
	}
}

// Inbound returns the queue the agent reads.
func (b *Bus) Inbound() <-chan Inbound { return b.in }

// Outbound returns the queue the dispatcher reads.
func (b *Bus) Outbound() <-chan Outbound { return b.out }

// InboundDepth and OutboundDepth report queued messages, for /admin/status.
func (b *Bus) InboundDepth() int  { return len(b.in) }
func (b *Bus) OutboundDepth() int { return len(b.out) }

// Close stops accepting messages and closes both queues so readers finish.
func (b *Bus) Close() {
	b.closeOnce.Do(func() { close(b.done) })
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return
	}
	b.closed = true
	close(b.in)
	close(b.out)
}
