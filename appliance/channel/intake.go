package channel

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/store"
)

// DefaultMaxMediaMB caps a received attachment when the channel sets no
// channels.<p>.max_media_mb.
const DefaultMaxMediaMB = 20

// IntakeOptions are a platform's hooks into its Intake.
type IntakeOptions struct {
	// Title is the platform's display name in messages ("Telegram").
	Title string
	// Typing shows the platform's typing indicator in in's chat. It is
	// called when a message reaches the agent and again every TypingEvery
	// (0: once, as LINE's loading indicator lasts by itself) until the
	// reply is sent or TypingFor passes (default: as long as a turn may
	// run, agents.defaults.turn_timeout_seconds, and its reply be sent).
	Typing      func(ctx context.Context, in bus.Inbound) error
	TypingEvery time.Duration
	TypingFor   time.Duration
	// Answering is called for a message that will be answered: once it is
	// durable and before the agent gets it, or before a stranger's pairing
	// answer. The platform keeps there what the answer needs (LINE's reply
	// token) and nothing for the many messages the rules drop.
	Answering func(m Message)
	// IsID reports whether an allow_from entry has the shape of the
	// platform's user ids. Such an entry admits that account only, never
	// someone whose username happens to read the same: anyone can read an
	// owner's numeric Discord id and take it as their username. Entries
	// written "@name" are usernames whatever their shape. Default: an entry
	// of digits is an id.
	IsID func(entry string) bool
}

// DigitsID is the default IsID: an entry of digits (with a leading '-', as
// Telegram's group ids have) is an id.
func DigitsID(e string) bool {
	e = strings.TrimPrefix(e, "-")
	if e == "" {
		return false
	}
	for _, c := range []byte(e) {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// Intake is a channel's way in: every platform turns its events into
// Messages and calls Receive, which applies the rules every channel shares
// and hands the message durably to the agent.
type Intake struct {
	name  string
	title string
	hub   *Hub
	log   *slog.Logger
	state *State
	opts  IntakeOptions

	allow         *allowList
	allowAllTools bool
	maxMedia      int64
	workspace     string

	// inflight holds event ids being received, so a redelivery racing the
	// first delivery (LINE retries a slow webhook) is dropped at once.
	mu       sync.Mutex
	inflight map[string]bool
	senders  map[string]bool // logged senders of an open channel
}

// NewIntake returns the intake of the channel d describes and registers it
// with d.Hub (or a private hub when d.Hub is nil).
func NewIntake(d Deps, o IntakeOptions) *Intake {
	hub := d.Hub
	if hub == nil {
		hub = NewHub(HubOptions{Bus: d.Bus, Store: d.Store, Log: d.Log, Workspace: d.Workspace})
	}
	log := d.Log
	if log == nil {
		log = hub.log.With("channel", d.Section.Name)
	}
	title := o.Title
	if title == "" {
		title = d.Section.Name
	}
	if o.TypingFor <= 0 {
		o.TypingFor = workingFor(d.TurnTimeout)
	}
	ws := d.Workspace
	if ws == "" {
		ws = hub.o.Workspace
	}
	mb := d.Section.MaxMediaMB
	if mb <= 0 {
		mb = DefaultMaxMediaMB
	}
	in := &Intake{
		name: d.Section.Name, title: title, hub: hub, log: log, state: NewState(d.Section.Name), opts: o,
		allow: newAllowList(d.Section.AllowFrom, o.IsID), allowAllTools: d.Section.AllowAllTools,
		maxMedia: int64(mb) << 20, workspace: ws, inflight: map[string]bool{},
	}
	hub.register(in)
	return in
}

// Name is the channel's name.
func (in *Intake) Name() string { return in.name }

// State is the channel's state, for the platform to report its connection.
func (in *Intake) State() *State { return in.state }

// Log is the channel's logger.
func (in *Intake) Log() *slog.Logger { return in.log }

// Hub is the hub the intake belongs to.
func (in *Intake) Hub() *Hub { return in.hub }

// Sender returns a Sender logging and recording for this channel.
func (in *Intake) Sender() *Sender {
	return &Sender{Channel: in.name, Log: in.log, State: in.state}
}

// Open reports whether the channel has no allow_from (anyone may talk to
// it, with the restricted tool set unless allow_all_tools).
func (in *Intake) Open() bool { return in.allow.empty() }

// Restricted reports whether messages of this channel get only the tools
// that cannot change the board: allow_from is empty and allow_all_tools
// is off. Senders on a non-empty allow_from are vouched for by the owner.
func (in *Intake) Restricted() bool { return in.allow.empty() && !in.allowAllTools }

// Admits reports whether m's sender may reach the agent here: anyone on a
// channel open to anyone, else a sender on allow_from (a username the
// platform could not look up is not known to be one).
func (in *Intake) Admits(m Message) bool {
	return in.allow.empty() || in.allow.allows(m.SenderID, m.Username)
}

// LoadState reads the platform's saved value key (Telegram's offset) into
// v; ok is false when none was saved.
func (in *Intake) LoadState(key string, v any) (ok bool, err error) {
	db := in.hub.o.Store
	if db == nil {
		return false, nil
	}
	err = db.Get(store.BucketChannels, in.name+"/"+key, v)
	if errors.Is(err, store.ErrNotFound) {
		return false, nil
	}
	return err == nil, err
}

// SaveState durably stores the platform's value key.
func (in *Intake) SaveState(key string, v any) error {
	db := in.hub.o.Store
	if db == nil {
		return nil
	}
	return db.Put(store.BucketChannels, in.name+"/"+key, v)
}

// Remember adds keys to the channel's bounded set name in the store, which
// keeps the newest keep keys across restarts (see store.DB.Remember).
func (in *Intake) Remember(name string, keep int, keys ...string) error {
	db := in.hub.o.Store
	if db == nil {
		return nil
	}
	return db.Remember(in.name+"/"+name, keep, keys...)
}

// Remembered reports whether key is in the channel's set name.
func (in *Intake) Remembered(name, key string) (bool, error) {
	db := in.hub.o.Store
	if db == nil {
		return false, nil
	}
	return db.Remembered(in.name+"/"+name, key)
}

// workingFor bounds the typing indicator: a turn may run turnTimeout (the
// config's default when unknown), and its reply may then take SendTimeout
// to deliver. The indicator stops when the reply is sent; this only bounds
// it when that news never comes.
func workingFor(turnTimeout time.Duration) time.Duration {
	if turnTimeout <= 0 {
		turnTimeout = time.Duration(config.Default().Agents.Defaults.TurnTimeoutSeconds) * time.Second
	}
	return turnTimeout + SendTimeout
}

// TypingFor is how long the typing indicator shows at most.
func (in *Intake) TypingFor() time.Duration { return in.opts.TypingFor }

// Seen reports whether the event id was received before (a platform that
// must acknowledge events can skip the work of parsing a redelivery).
func (in *Intake) Seen(eventID string) bool { return in.hub.seen(in.name, eventID) }

// Receive applies, in order: redelivery dedupe, the group rule (a group
// message reaches the agent only when it mentions the bot or replies to
// it), allow_from (others get at most a pairing answer a day), media
// download and voice transcription, then makes the message durable in the
// inbox and hands it to the agent. It returns once the message is
// durable, so the platform may then acknowledge it (confirm the offset,
// answer the webhook); an error means it is not, and the platform should
// let the platform deliver it again. Dropped messages return nil.
func (in *Intake) Receive(ctx context.Context, m Message) error {
	if m.EventID != "" {
		in.mu.Lock()
		busy := in.inflight[m.EventID]
		in.inflight[m.EventID] = true
		in.mu.Unlock()
		if busy {
			in.log.Debug("redelivery of an event being received dropped", "event", m.EventID)
			return nil
		}
		defer func() {
			in.mu.Lock()
			delete(in.inflight, m.EventID)
			in.mu.Unlock()
		}()
		if in.hub.seen(in.name, m.EventID) {
			in.log.Debug("redelivered event dropped", "event", m.EventID)
			return nil
		}
	}
	if m.IsGroup && !m.Mentioned && !m.ReplyToBot {
		return nil
	}
	if !in.allow.empty() && !in.allow.allows(m.SenderID, m.Username) {
		if m.UsernameUnknown && in.allow.hasNames() {
			// Refusing would answer someone listed by name with a pairing
			// code and drop their message.
			return fmt.Errorf("channel %s: the sender's username could not be looked up, and %s lists usernames", in.name, in.configKey("allow_from"))
		}
		in.refuse(m)
		return nil
	}
	if in.allow.empty() {
		in.noteSender(m)
	}
	ib := bus.Inbound{
		Channel: in.name, ChatID: m.ChatID, SenderID: m.SenderID, ThreadID: m.ThreadID,
		SessionKey: m.SessionKey(in.name), ReplyTo: m.MessageID, RestrictTools: in.Restricted(),
		Metadata: map[string]string{},
	}
	if m.SenderName != "" {
		ib.Metadata["sender_name"] = m.SenderName
	}
	if m.Username != "" {
		ib.Metadata["username"] = m.Username
	}
	if m.IsGroup {
		ib.Metadata["group"] = "true"
	}
	if m.MessageID != "" {
		ib.Metadata["message_id"] = m.MessageID
	}
	media, notes := in.saveMedia(ctx, m)
	ib.Media = media
	ib.Text = strings.TrimSpace(strings.Join(append([]string{strings.TrimSpace(m.Text)}, notes...), "\n"))
	if ib.Text == "" && len(ib.Media) == 0 {
		return nil
	}
	id, dup, err := in.hub.admit(in.name, m.EventID, ib)
	if err != nil {
		in.state.Fail(err)
		return fmt.Errorf("channel %s: %w", in.name, err)
	}
	if dup {
		in.log.Debug("redelivered event dropped", "event", m.EventID)
		return nil
	}
	ib.InboxID = id
	in.state.CountIn()
	if in.opts.Answering != nil {
		in.opts.Answering(m)
	}
	in.hub.publish(context.WithoutCancel(ctx), ib)
	return nil
}

// noteSender logs, once per sender and process, who talks to a channel
// anyone may use: the owner learns the ids to put in allow_from (LINE has
// no usernames to write there instead).
func (in *Intake) noteSender(m Message) {
	in.mu.Lock()
	if in.senders == nil {
		in.senders = map[string]bool{}
	}
	seen := in.senders[m.SenderID] || len(in.senders) >= 256
	in.senders[m.SenderID] = true
	in.mu.Unlock()
	if !seen {
		in.log.Info("a sender on a channel open to anyone; to admit only chosen people, list ids in "+in.configKey("allow_from"),
			"sender", m.SenderID, "username", m.Username, "name", m.SenderName)
	}
}

// refuse answers an unknown sender with a pairing code, at most once a
// day, and leaves one debug line; nothing reaches the model.
func (in *Intake) refuse(m Message) {
	in.log.Debug("message from a sender not on allow_from ignored", "sender", m.SenderID, "username", m.Username)
	db := in.hub.o.Store
	if db == nil || in.hub.o.Bus == nil {
		return
	}
	if m.SenderID == "" {
		// A platform may leave the sender out (LINE, for a group member who
		// has not agreed to share it): there is nobody a code could admit.
		return
	}
	code, err := RequestPairing(db, Pairing{Channel: in.name, SenderID: m.SenderID, Username: m.Username, Name: m.SenderName, ChatID: m.ChatID, ThreadID: m.ThreadID}, in.hub.o.Now())
	if err != nil {
		in.log.Warn("no pairing code for an unknown sender", "sender", m.SenderID, "err", err)
		return
	}
	if code == "" {
		return
	}
	in.log.Info("unknown sender got a pairing code; approve with perch channels approve CODE", "sender", m.SenderID, "username", m.Username, "code", code)
	if in.opts.Answering != nil {
		in.opts.Answering(m)
	}
	text := fmt.Sprintf("I only talk to people my owner approved. To be approved, ask the owner to run: perch channels approve %s (the code is valid for 24 hours).", code)
	if err := in.hub.o.Bus.PublishOutbound(bus.Outbound{Channel: in.name, ChatID: m.ChatID, ThreadID: m.ThreadID, Text: text, ReplyTo: m.MessageID}); err != nil {
		in.log.Warn("pairing answer dropped", "err", err)
	}
}

// startTyping runs the platform's typing indicator for in until its reply
// is settled.
func (in *Intake) startTyping(ctx context.Context, ib bus.Inbound) {
	if in.opts.Typing == nil || ib.InboxID == 0 {
		return
	}
	every, bound := in.opts.TypingEvery, in.opts.TypingFor
	in.hub.startTyping(ib.InboxID, bound, func(ctx context.Context) {
		for {
			if err := in.opts.Typing(ctx, ib); err != nil && ctx.Err() == nil {
				in.log.Debug("typing indicator failed", "chat", ib.ChatID, "err", err)
			}
			if every <= 0 || !Sleep(ctx, every) {
				return
			}
		}
	})
}

// SectionMaxMedia is exported for platforms that must refuse a download
// before asking for it (a size announced in the event).
func (in *Intake) MaxMediaBytes() int64 { return in.maxMedia }

// configKey names a key of this channel's section for messages.
func (in *Intake) configKey(k string) string { return "channels." + in.name + "." + k }

var _ = config.ChannelSection{}
