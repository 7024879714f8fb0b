package channel

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/store"
)

// TranscribeFunc turns the audio file at path into text, through a
// Whisper-compatible {api_base}/audio/transcriptions.
type TranscribeFunc func(ctx context.Context, path string) (string, error)

// HubOptions configure a Hub.
type HubOptions struct {
	Bus   *bus.Bus
	Store *store.DB // nil: dedupe and inbox in memory only (perch agent, tests)
	Log   *slog.Logger
	// Workspace is where received media are saved (under media/).
	Workspace string
	// Transcribe turns voice messages into text; nil when no provider with
	// a speech-to-text endpoint has a key.
	Transcribe TranscribeFunc
	// SaveAllowFrom adds id to channels.<channel>.allow_from in the config
	// file; nil keeps approvals in memory only.
	SaveAllowFrom func(channel, id string) error
	// SeenEvents is how many event ids per channel are remembered for
	// dedupe (default 4096).
	SeenEvents int
	// ReplyRetryFor is how long a reply that could not be sent is retried
	// before it is given up (default 24 h).
	ReplyRetryFor time.Duration
	// Now is the clock (tests).
	Now func() time.Time
}

// Hub is what the channels of one gateway share: the durable inbox that
// makes every accepted message answered exactly once across restarts, the
// seen event ids, the allow lists and pairing codes, transcription, and each
// channel's state. The Manager starts and stops it.
type Hub struct {
	o   HubOptions
	log *slog.Logger

	mu      sync.Mutex
	intakes map[string]*Intake
	typing  map[uint64]context.CancelFunc
	// unsent holds inbox entries whose turn has not been handed to the
	// agent yet (the bus was full); the sweeper hands them over.
	unsent map[uint64]bus.Inbound
	// replaying is set from Prepare to the end of the replay in Start:
	// new messages wait in unsent meanwhile.
	replaying bool
	// sending holds the inbox entries whose reply a channel's sender has
	// (Hold): the sweeper leaves them to it.
	sending map[uint64]bool
	// kept are the inbox entries holding a reply the platform has not
	// taken yet, by id, with their chat (chatKey): a later reply to that
	// chat waits behind them, so a chat reads its answers in order.
	kept map[uint64]string
	// memSeen is the dedupe set without a store.
	memSeen  map[string]bool
	memOrder []string
	memSeq   uint64

	stopped bool
	// left is the inbox as the last run left it, read by Prepare.
	left     []inboxItem
	prepared bool

	send   func(ctx context.Context, out bus.Outbound) error
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	kick   chan struct{}
	// feedKick wakes the feeder (feed).
	feedKick chan struct{}
}

// NewHub returns a hub; the Manager starts it.
func NewHub(o HubOptions) *Hub {
	if o.Log == nil {
		o.Log = slog.Default()
	}
	if o.SeenEvents <= 0 {
		o.SeenEvents = 4096
	}
	if o.ReplyRetryFor <= 0 {
		o.ReplyRetryFor = 24 * time.Hour
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	h := &Hub{o: o, log: o.Log, intakes: map[string]*Intake{}, typing: map[uint64]context.CancelFunc{},
		unsent: map[uint64]bus.Inbound{}, sending: map[uint64]bool{}, kept: map[uint64]string{}, memSeen: map[string]bool{}, kick: make(chan struct{}, 1), feedKick: make(chan struct{}, 1)}
	h.ctx, h.cancel = context.WithCancel(context.Background())
	return h
}

// entry is an inbox record: a message handed to the agent and not yet
// answered, or answered with a reply the platform has not taken yet.
type entry struct {
	In      bus.Inbound   `json:"in"`
	Created time.Time     `json:"created"`
	Turns   int           `json:"turns"` // turns started for it
	Reply   *bus.Outbound `json:"reply,omitempty"`
	Tries   int           `json:"tries,omitempty"` // failed sends of Reply
	// NotBefore is when the platform asked not to be sent to again
	// (a 429's retry_after longer than a send waits).
	NotBefore time.Time `json:"not_before,omitzero"`
}

// maxTurns bounds how often one message's turn is started: a message whose
// turn keeps the gateway from finishing (a crash, say) is not retried
// forever.
const maxTurns = 3

func (h *Hub) register(in *Intake) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.intakes[in.name] = in
}

func (h *Hub) intake(name string) *Intake {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.intakes[name]
}

// Restricted reports whether the registered channel name gives its
// senders only the restricted tools (allow_from empty, allow_all_tools
// off); false for a channel it does not know.
func (h *Hub) Restricted(name string) bool {
	in := h.intake(name)
	return in != nil && in.Restricted()
}

// Status returns every registered channel's state, by name.
func (h *Hub) Status() map[string]Status {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]Status, len(h.intakes))
	for n, in := range h.intakes {
		out[n] = in.state.Status()
	}
	return out
}

// Connects is how many times the channels' connections came up, summed:
// it changes when a channel connects late or reconnects, work the start-up
// trim did not see. It allocates nothing, for the idle trimmer's ticks.
func (h *Hub) Connects() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	var n uint64
	for _, in := range h.intakes {
		n += in.state.connectCount()
	}
	return n
}

// admit makes in durable before it reaches the agent: it returns the inbox
// id, or dup when eventID was admitted before.
func (h *Hub) admit(channel, eventID string, in bus.Inbound) (uint64, bool, error) {
	now := h.o.Now()
	if h.o.Store == nil {
		h.mu.Lock()
		defer h.mu.Unlock()
		if eventID != "" {
			k := channel + "\x00" + eventID
			if h.memSeen[k] {
				return 0, true, nil
			}
			h.memSeen[k] = true
			h.memOrder = append(h.memOrder, k)
			if len(h.memOrder) > h.o.SeenEvents {
				delete(h.memSeen, h.memOrder[0])
				h.memOrder = h.memOrder[1:]
			}
		}
		h.memSeq++
		return h.memSeq, false, nil
	}
	return h.o.Store.Admit(channel, eventID, h.o.SeenEvents, func(id uint64) ([]byte, error) {
		in.InboxID = id
		return json.Marshal(entry{In: in, Created: now, Turns: 1})
	})
}

// seen reports whether channel admitted eventID already.
func (h *Hub) seen(channel, eventID string) bool {
	if eventID == "" {
		return false
	}
	if h.o.Store == nil {
		h.mu.Lock()
		defer h.mu.Unlock()
		return h.memSeen[channel+"\x00"+eventID]
	}
	ok, err := h.o.Store.Seen(channel, eventID)
	return err == nil && ok
}

// publish hands in to the agent; when the bus has no room within half a
// second the sweeper tries again, so an admitted message is never dropped
// and Receive returns promptly (Slack wants its envelope acknowledged
// within 3 s). While messages wait so, a new one waits behind them: one
// handed over at once could be answered before an earlier message of its
// chat.
func (h *Hub) publish(ctx context.Context, in bus.Inbound) {
	h.mu.Lock()
	behind := len(h.unsent) > 0 || h.replaying
	if behind {
		h.unsent[in.InboxID] = in
	}
	h.mu.Unlock()
	if behind {
		h.pokeFeed()
		return
	}
	if err := h.handOver(ctx, in); err != nil {
		if errors.Is(err, bus.ErrClosed) {
			return // shutting down: the inbox replays it at the next start
		}
		h.log.Warn("the agent's queue is full; the message waits in the inbox", "channel", in.Channel, "chat", in.ChatID, "err", err)
		h.mu.Lock()
		h.unsent[in.InboxID] = in
		h.mu.Unlock()
		h.pokeFeed()
	}
}

// handOver puts in on the bus within half a second.
func (h *Hub) handOver(ctx context.Context, in bus.Inbound) error {
	pctx, cancel := context.WithTimeout(ctx, 500*time.Millisecond)
	defer cancel()
	if err := h.o.Bus.PublishInbound(pctx, in); err != nil {
		return err
	}
	if it := h.intake(in.Channel); it != nil {
		it.startTyping(h.ctx, in)
	}
	return nil
}

// startTyping runs fn in the background for the inbox entry id until the
// reply settles it or bound passes.
func (h *Hub) startTyping(id uint64, bound time.Duration, run func(ctx context.Context)) {
	if id == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(h.ctx, bound)
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		cancel()
		return
	}
	if old := h.typing[id]; old != nil {
		old()
	}
	h.typing[id] = cancel
	h.wg.Add(1)
	h.mu.Unlock()
	go func() {
		defer h.wg.Done()
		defer cancel()
		run(ctx)
		h.mu.Lock()
		if h.typing[id] != nil && ctx.Err() != nil {
			delete(h.typing, id)
		}
		h.mu.Unlock()
	}()
}

func (h *Hub) stopTyping(id uint64) {
	h.mu.Lock()
	cancel := h.typing[id]
	delete(h.typing, id)
	h.mu.Unlock()
	if cancel != nil {
		cancel()
	}
}

// Hold records out as its message's reply before a channel's sender takes
// it: the model's answer is in the history by now, so a gateway stopped or
// cut off while the reply goes out (a long answer's parts, a platform's
// rate limit to wait out) sends this reply at its next start instead of
// running the turn again (a second, different answer after the first one's
// start). Settle, or Release when the reply was not taken, ends the hold.
func (h *Hub) Hold(out bus.Outbound) {
	if out.InboxID == 0 || h.o.Store == nil {
		return
	}
	h.mu.Lock()
	h.sending[out.InboxID] = true
	h.mu.Unlock()
	e, ok := h.load(out.InboxID)
	if !ok {
		return
	}
	if e.Reply != nil {
		out.Delivered = max(out.Delivered, e.Reply.Delivered)
	}
	e.Reply = &out
	if err := h.save(out.InboxID, e); err != nil {
		h.log.Error("cannot keep a reply before sending it; a restart meanwhile answers its message again", "channel", out.Channel, "chat", out.ChatID, "err", err)
	}
}

// Release ends a hold whose reply no sender took (its queue was full): the
// sweeper sends it.
func (h *Hub) Release(out bus.Outbound) {
	h.unhold(out.InboxID)
	h.poke()
}

// unhold ends the hold on inbox entry id: the sweeper may send its reply.
func (h *Hub) unhold(id uint64) {
	h.mu.Lock()
	delete(h.sending, id)
	h.mu.Unlock()
}

// Stopped is the sender's report on out when the gateway stopped while it
// went out: the reply stays in its entry, with how much of it was
// delivered, for the next start.
func (h *Hub) Stopped(out bus.Outbound, err error) {
	if out.InboxID == 0 {
		if err != nil {
			h.Keep(out, err)
		}
		return
	}
	h.stopTyping(out.InboxID)
	// The entry is settled before the hold ends: in between, the sweeper
	// would find the reply unheld and send it a second time.
	defer h.unhold(out.InboxID)
	if err == nil {
		h.clear(out.InboxID)
		return
	}
	h.keepReply(out, err)
}

// Settle is the dispatcher's report on out after the channel's Send: it
// stops the typing indicator and clears out's inbox entry once the reply
// was delivered or failed for good. A reply that failed for now (network,
// rate limit) is kept in the entry and sent again by the sweeper.
func (h *Hub) Settle(out bus.Outbound, err error) {
	if out.InboxID == 0 {
		if k := KindOf(err); err != nil && (k == Transient || k == RateLimited) {
			h.Keep(out, err)
		}
		return
	}
	h.stopTyping(out.InboxID)
	// Settled before the hold ends (see Stopped).
	defer h.unhold(out.InboxID)
	switch {
	case err == nil:
		h.clear(out.InboxID)
	case KindOf(err) == Transient || KindOf(err) == RateLimited:
		h.keepReply(out, err)
		h.poke()
	default:
		h.log.Warn("a reply failed for good; its message is dropped from the inbox", "channel", out.Channel, "chat", out.ChatID, "err", err)
		h.clear(out.InboxID)
	}
}

func (h *Hub) clear(id uint64) {
	h.mu.Lock()
	delete(h.unsent, id)
	delete(h.kept, id)
	h.mu.Unlock()
	if h.o.Store == nil {
		return
	}
	if err := h.o.Store.InboxDelete(id); err != nil {
		h.log.Error("cannot clear an answered message from the inbox; it may be answered again after a restart", "id", id, "err", err)
	}
}

// Keep stores a message that answers nobody's message (a reminder, a
// heartbeat, a device notice, a pairing answer) which the platform did not
// take for now (down, rate limiting; failed is nil when the channel's queue
// was full), in the inbox as a kept reply: the sweeper sends it when the
// platform answers again, across restarts, for as long as a reply is
// retried. It reports whether the message was kept.
func (h *Hub) Keep(out bus.Outbound, failed error) bool {
	if h.o.Store == nil || out.InboxID != 0 || h.intake(out.Channel) == nil {
		return false // the sweeper sends only to the chat platforms
	}
	out.Delivered = max(out.Delivered, Delivered(failed))
	e := entry{In: bus.Inbound{Channel: out.Channel, ChatID: out.ChatID, ThreadID: out.ThreadID}, Created: h.o.Now(), Reply: &out}
	if failed != nil {
		e.Tries = 1
	}
	var se *SendError
	if errors.As(failed, &se) && se.RetryAfter > 0 {
		e.NotBefore = h.o.Now().Add(se.RetryAfter)
	}
	id, _, err := h.o.Store.Admit(out.Channel, "", h.o.SeenEvents, func(uint64) ([]byte, error) { return json.Marshal(e) })
	if err != nil {
		h.log.Error("cannot keep an unsent message; it is lost", "channel", out.Channel, "chat", out.ChatID, "err", err)
		return false
	}
	h.markKept(id, out)
	h.log.Info("the message could not be sent yet; it will be sent again", "channel", out.Channel, "chat", out.ChatID, "err", failed)
	h.poke()
	return true
}

// chatKey names out's chat among all channels'.
func chatKey(out bus.Outbound) string { return out.Channel + "\x00" + out.ChatID }

func (h *Hub) markKept(id uint64, out bus.Outbound) {
	h.mu.Lock()
	h.kept[id] = chatKey(out)
	h.mu.Unlock()
}

// Behind reports whether an earlier reply to out's chat waits in the inbox
// (the platform was down or rate limiting): out must go after it.
func (h *Hub) Behind(out bus.Outbound) bool {
	key := chatKey(out)
	h.mu.Lock()
	defer h.mu.Unlock()
	for id, k := range h.kept {
		if k == key && (out.InboxID == 0 || id < out.InboxID) {
			return true
		}
	}
	return false
}

// Wait keeps out for the sweeper, which sends a chat's kept replies in the
// order their messages came, behind the earlier one Behind found. A reply
// sent at once would reach the chat before the answer to the message
// before it. It reports whether out was kept.
func (h *Hub) Wait(out bus.Outbound) bool {
	if out.InboxID == 0 {
		return h.Keep(out, nil)
	}
	if h.o.Store == nil {
		return false
	}
	e, ok := h.load(out.InboxID)
	if !ok {
		return false
	}
	h.stopTyping(out.InboxID)
	if e.Reply != nil {
		out.Delivered = max(out.Delivered, e.Reply.Delivered)
	}
	e.Reply = &out
	if err := h.save(out.InboxID, e); err != nil {
		h.log.Error("cannot keep a reply behind an earlier one; sending it now", "channel", out.Channel, "chat", out.ChatID, "err", err)
		return false
	}
	h.markKept(out.InboxID, out)
	h.log.Info("the reply waits behind an earlier one to the same chat", "channel", out.Channel, "chat", out.ChatID)
	h.poke()
	return true
}

// keepReply stores out in its inbox entry for the sweeper, with what
// failed: how much of it was delivered, and how long the platform asked to
// be left alone.
func (h *Hub) keepReply(out bus.Outbound, failed error) {
	if h.o.Store == nil {
		return
	}
	e, ok := h.load(out.InboxID)
	if !ok {
		return
	}
	out.Delivered = max(out.Delivered, Delivered(failed))
	e.Reply = &out
	e.Tries++
	e.NotBefore = time.Time{}
	var se *SendError
	if errors.As(failed, &se) && se.RetryAfter > 0 {
		e.NotBefore = h.o.Now().Add(se.RetryAfter)
	}
	if err := h.save(out.InboxID, e); err != nil {
		h.log.Error("cannot keep an unsent reply", "channel", out.Channel, "chat", out.ChatID, "err", err)
		return
	}
	h.markKept(out.InboxID, out)
	h.log.Info("the reply could not be sent yet; it will be sent again", "channel", out.Channel, "chat", out.ChatID,
		"delivered_parts", out.Delivered, "err", failed)
}

func (h *Hub) load(id uint64) (entry, bool) {
	var e entry
	found, err := h.o.Store.InboxGet(id, func(data []byte) error { return json.Unmarshal(data, &e) })
	return e, found && err == nil
}

func (h *Hub) save(id uint64, e entry) error {
	data, err := json.Marshal(e)
	if err != nil {
		return err
	}
	return h.o.Store.InboxPut(id, data)
}

func (h *Hub) poke() {
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// Start replays the inbox — turns interrupted by the last shutdown run
// again, replies kept for a platform that was down are sent — and starts
// the sweeper, which retries both until they succeed or expire. send
// delivers an outbound message on its channel.
func (h *Hub) Start(ctx context.Context, send func(ctx context.Context, out bus.Outbound) error) {
	h.mu.Lock()
	h.send = send
	h.wg.Add(1)
	h.mu.Unlock()
	if h.o.Store != nil {
		if !h.prepared {
			h.Prepare()
		}
		h.replay(ctx, h.left)
		h.left = nil
	}
	// What waited for the replay goes now, after it, in inbox order.
	h.mu.Lock()
	wasReplaying := h.replaying
	h.replaying = false
	h.mu.Unlock()
	if wasReplaying {
		h.pokeFeed()
	}
	h.wg.Add(1)
	go func() {
		defer h.wg.Done()
		h.feed()
	}()
	go func() {
		defer h.wg.Done()
		h.sweep()
	}()
}

// Stop ends the sweeper and the typing indicators.
func (h *Hub) Stop() {
	h.mu.Lock()
	h.stopped = true
	h.mu.Unlock()
	h.cancel()
	h.wg.Wait()
}

// inboxItem is an inbox entry as the last run left it.
type inboxItem struct {
	id uint64
	e  entry
}

// Prepare reads the inbox the last run left. The manager calls it before
// the channels start: a message admitted after that is a new one, not an
// interrupted turn, and replaying it too would answer it twice.
func (h *Hub) Prepare() {
	if h.o.Store == nil {
		return
	}
	var items []inboxItem
	err := h.o.Store.InboxList(func(id uint64, data []byte) error {
		var e entry
		if err := json.Unmarshal(data, &e); err != nil {
			h.log.Error("unreadable inbox entry dropped", "id", id, "err", err)
			items = append(items, inboxItem{id: id, e: entry{Turns: -1}})
			return nil
		}
		items = append(items, inboxItem{id, e})
		if e.Reply != nil {
			h.markKept(id, *e.Reply)
		}
		return nil
	})
	if err != nil {
		h.log.Error("cannot read the inbox; interrupted turns are not replayed", "err", err)
		items = nil
	}
	h.left, h.prepared = items, true
	// Channels start before the replay (Start): a message they take
	// meanwhile waits behind what the last run left of its chat.
	h.mu.Lock()
	h.replaying = len(items) > 0
	h.mu.Unlock()
}

// replay republishes the entries left by the last run.
func (h *Hub) replay(ctx context.Context, items []inboxItem) {
	now := h.o.Now()
	for _, it := range items {
		e := it.e
		in := e.In
		switch {
		case e.Turns < 0:
			h.clear(it.id)
		case now.Sub(e.Created) > h.o.ReplyRetryFor:
			h.log.Warn("a message left unanswered too long is dropped from the inbox", "channel", in.Channel, "chat", in.ChatID, "age", now.Sub(e.Created).Round(time.Minute))
			h.clear(it.id)
		case h.intake(in.Channel) == nil:
			h.log.Warn("a message of a channel that no longer runs waits in the inbox", "channel", in.Channel, "chat", in.ChatID)
		case e.Reply != nil:
			h.poke() // the sweeper sends it
		case e.Turns >= maxTurns:
			h.log.Error("a message whose turn was interrupted repeatedly is dropped", "channel", in.Channel, "chat", in.ChatID, "turns", e.Turns)
			if it := h.intake(in.Channel); it != nil {
				it.state.Fail(fmt.Errorf("a message from chat %s was dropped after %d interrupted turns", in.ChatID, e.Turns))
			}
			h.clear(it.id)
		default:
			e.Turns++
			if err := h.save(it.id, e); err != nil {
				h.log.Error("cannot update an inbox entry", "err", err)
			}
			in.InboxID = it.id
			if in.Metadata == nil {
				in.Metadata = map[string]string{}
			}
			// The agent stored the message when the turn first ran.
			in.Metadata[bus.MetaReplay] = "true"
			h.log.Info("answering a message whose turn was interrupted", "channel", in.Channel, "chat", in.ChatID)
			h.publish(ctx, in)
		}
	}
}

// feed hands the agent the messages that wait in unsent, in the order
// they came, as its queue makes room. It is a loop of its own: the
// sweeper can spend minutes on replies to a platform that is down.
func (h *Hub) feed() {
	for {
		wait := time.Hour
		if h.feedOnce() {
			// The agent's queue makes room as turns end: seconds.
			wait = time.Second
		}
		select {
		case <-h.ctx.Done():
			return
		case <-h.feedKick:
		case <-time.After(wait):
		}
	}
}

// feedOnce hands waiting messages over in inbox order (ids grow), each
// left waiting until the bus took it, new ones queueing behind them
// meanwhile (publish); the first the bus refuses keeps the rest back. It
// reports whether any still wait.
func (h *Hub) feedOnce() bool {
	h.mu.Lock()
	ids := slices.Sorted(maps.Keys(h.unsent))
	h.mu.Unlock()
	for _, id := range ids {
		h.mu.Lock()
		in, ok := h.unsent[id]
		h.mu.Unlock()
		if !ok {
			continue
		}
		if err := h.handOver(h.ctx, in); err != nil {
			if errors.Is(err, bus.ErrClosed) {
				return false // shutting down: the inbox replays them
			}
			break
		}
		h.mu.Lock()
		delete(h.unsent, id)
		h.mu.Unlock()
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.unsent) > 0
}

// pokeFeed asks the feeder to look at unsent now.
func (h *Hub) pokeFeed() {
	select {
	case h.feedKick <- struct{}{}:
	default:
	}
}

// sweep retries the replies the platform did not take.
func (h *Hub) sweep() {
	b := Backoff{Min: 5 * time.Second, Max: 5 * time.Minute}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		pending := h.sweepOnce()
		var wait time.Duration
		if pending {
			wait = b.Next()
		} else {
			b.Reset()
			wait = 10 * time.Minute
		}
		timer.Reset(wait)
		select {
		case <-h.ctx.Done():
			return
		case <-h.kick:
			if !timer.Stop() {
				select {
				case <-timer.C:
				default:
				}
			}
			// A burst of failures should not spin: pace kicks too.
			if !Sleep(h.ctx, 200*time.Millisecond) {
				return
			}
		case <-timer.C:
		}
	}
}

// sweepOnce reports whether a reply still waits afterwards.
func (h *Hub) sweepOnce() bool {
	pending := false
	h.mu.Lock()
	send := h.send
	h.mu.Unlock()
	if h.o.Store == nil || send == nil {
		return pending
	}
	type item struct {
		id uint64
		e  entry
	}
	var replies []item
	h.o.Store.InboxList(func(id uint64, data []byte) error {
		var e entry
		if json.Unmarshal(data, &e) == nil && e.Reply != nil {
			replies = append(replies, item{id, e})
		}
		return nil
	})
	sort.Slice(replies, func(i, j int) bool { return replies[i].id < replies[j].id })
	// A chat's replies go in the order of their messages: once one of them
	// cannot go, the later ones wait too.
	blocked := map[string]bool{}
	now := h.o.Now()
	for _, it := range replies {
		out := *it.e.Reply
		out.InboxID = it.id
		if h.intake(out.Channel) == nil {
			continue
		}
		key := chatKey(out)
		if blocked[key] {
			pending = true
			continue
		}
		// The sweeper holds the entry while it sends, as a sender does,
		// and reads it again: the list is a snapshot, and a sender may
		// have delivered and cleared the reply since.
		h.mu.Lock()
		held := h.sending[it.id]
		if !held {
			h.sending[it.id] = true
		}
		h.mu.Unlock()
		if held {
			blocked[key] = true
			continue // its sender is on it
		}
		fresh, ok := h.load(it.id)
		if !ok || fresh.Reply == nil {
			h.unhold(it.id)
			continue
		}
		it.e = fresh
		out = *fresh.Reply
		out.InboxID = it.id
		if now.Sub(it.e.Created) > h.o.ReplyRetryFor {
			h.log.Warn("a reply the platform did not take for a day is dropped", "channel", out.Channel, "chat", out.ChatID)
			h.clear(it.id)
			h.unhold(it.id)
			continue
		}
		if now.Before(it.e.NotBefore) {
			h.unhold(it.id)
			blocked[key] = true
			pending = true
			continue
		}
		ctx, cancel := context.WithTimeout(h.ctx, 2*time.Minute)
		err := send(ctx, out)
		cancel()
		if h.ctx.Err() != nil {
			h.unhold(it.id)
			return true
		}
		if err == nil || (KindOf(err) != Transient && KindOf(err) != RateLimited) {
			h.Settle(out, err) // ends the hold
			continue
		}
		h.keepReply(out, err)
		h.unhold(it.id)
		blocked[key] = true
		pending = true
	}
	return pending
}

// Approve admits the sender of a pairing code: the config file gets the
// sender's id in channels.<p>.allow_from, the running channel accepts
// them at once, and they are told so.
func (h *Hub) Approve(code string) (Approval, error) {
	if h.o.Store == nil {
		return Approval{}, errors.New("channels: pairing needs the database")
	}
	save := h.o.SaveAllowFrom
	if save == nil {
		save = func(string, string) error { return nil }
	}
	a, err := Approve(h.o.Store, code, h.o.Now(), save)
	if err != nil {
		return a, err
	}
	if it := h.intake(a.Channel); it != nil {
		it.allow.add(a.SenderID)
		it.log.Info("sender approved", "sender", a.SenderID, "username", a.Username)
	}
	if h.o.Bus != nil && a.ChatID != "" {
		h.o.Bus.PublishOutbound(bus.Outbound{Channel: a.Channel, ChatID: a.ChatID, ThreadID: a.ThreadID,
			Text: "You have been approved: you can talk to me now."})
	}
	return a, nil
}

// Pairings lists the senders waiting for approval.
func (h *Hub) Pairings() ([]Pairing, error) {
	if h.o.Store == nil {
		return nil, nil
	}
	return Pairings(h.o.Store, h.o.Now())
}

func jsonUnmarshal(data []byte, v any) error { return json.Unmarshal(data, v) }

func sortPairings(p []Pairing) {
	sort.Slice(p, func(i, j int) bool { return p[i].Created.Before(p[j].Created) })
}
