package discord

import (
	"cmp"
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"

	"github.com/perchhq/perch/appliance/channel"
)

// Discord does not deliver again what was written while the bot had no
// session (the gateway restarting, a resume Discord refused): a new
// session starts with what is written from then on. So the channel keeps
// the chats it talks in and the newest message id it saw, and a new
// session first fetches, in each of those chats, what came after it.
// Message ids are snowflakes: they grow with time across every channel,
// so one id serves as the mark for all chats.

// cursor is what the channel keeps for the fetch (Intake state "cursor").
type cursor struct {
	// Last is the newest message id seen.
	Last string `json:"last"`
	// Chats are the chats talked in lately, the newest first.
	Chats []chatRef `json:"chats"`
	// Waiting are chats of senders not (yet) admitted, the newest first:
	// a sender the owner approves meanwhile has the chat fetched too.
	Waiting []chatRef `json:"waiting,omitempty"`
}

// chatRef is a chat talked in: a server's channel or thread (Guild set),
// or a direct message. A fetched message does not say its server, and
// without it a server's message would read as a direct one.
type chatRef struct {
	ID    string `json:"id"`
	Guild string `json:"guild,omitempty"`
	// At is when a message there last reached the agent (Unix seconds).
	At int64 `json:"at"`
	// From, when set, is where this chat's next fetch begins if it is
	// before Last: its fetch failed, or stopped at catchUpPages, so what
	// came after From there was not received.
	From string `json:"from,omitempty"`
	// Sender and User name the sender of a waiting chat's message.
	Sender string `json:"sender,omitempty"`
	User   string `json:"user,omitempty"`
}

const (
	cursorKey = "cursor"
	// catchUpChats bounds the chats asked at a new session: a call each.
	catchUpChats = 20
	// catchUpWaiting bounds the chats of senders not admitted kept in
	// case the owner approves one.
	catchUpWaiting = 10
	// catchUpWindow is how far back the fetch goes: an answer to a
	// message days old comes too late to help, as Telegram keeps
	// undelivered updates for a day.
	catchUpWindow = 24 * time.Hour
	// catchUpChatAge is how long a chat stays in the list after its last
	// message reached the agent: someone who writes once a week is still
	// answered after a restart.
	catchUpChatAge = 30 * 24 * time.Hour
	// catchUpFor bounds a whole catch-up: the session's own messages wait
	// behind it (and, their queue full, the connection's heartbeats).
	// Chats not fetched in time are fetched at the next session.
	catchUpFor = time.Minute
	// catchUpPage is Discord's most messages per call; catchUpPages
	// bounds the calls per chat and session (the rest waits for the
	// next session, from the chat's From).
	catchUpPage  = 100
	catchUpPages = 4
	// catchUpTries bounds the attempts of one call that failed for now
	// (a 5xx, no answer); a rate limit is waited out by the client.
	catchUpTries = 3
	// cursorSaveEvery spaces the cursor's writes when only its mark
	// moved: one lost to a crash only makes the next fetch ask for
	// messages the inbox already knows. A chat new to the list is
	// written at once.
	cursorSaveEvery = 5 * time.Second
)

// discordEpoch is the first millisecond of 2015, where snowflakes count from.
const discordEpoch = 1420070400000

// snowflakeAt is the smallest message id of moment t.
func snowflakeAt(t time.Time) uint64 {
	ms := t.UnixMilli() - discordEpoch
	if ms < 0 {
		return 0
	}
	return uint64(ms) << 22
}

// snowflake parses a message id; 0 when it is none.
func snowflake(id string) uint64 {
	n, err := strconv.ParseUint(id, 10, 64)
	if err != nil {
		return 0
	}
	return n
}

// saw moves the cursor past message m, and puts its chat first among the
// chats talked in when m reached the agent. It reports whether the cursor
// changed, and whether the chat is new to the list (worth a write at once:
// without it a power cut loses what is written there while stopped).
func (c *cursor) saw(m *message, talked bool, now time.Time) (changed, added bool) {
	if snowflake(m.ID) > snowflake(c.Last) {
		c.Last, changed = m.ID, true
	}
	if !talked || m.ChannelID == "" {
		return changed, false
	}
	i := slices.IndexFunc(c.Chats, func(r chatRef) bool { return r.ID == m.ChannelID })
	if i == 0 && c.Chats[0].Guild == m.GuildID && now.Unix()-c.Chats[0].At < 60 {
		return changed, false // the newest already, and lately: no write for it
	}
	ref := chatRef{ID: m.ChannelID}
	if i >= 0 {
		ref = c.Chats[i]
		c.Chats = slices.Delete(c.Chats, i, i+1)
	}
	ref.Guild, ref.At = m.GuildID, now.Unix()
	c.Chats = slices.Insert(c.Chats, 0, ref)
	if len(c.Chats) > catchUpChats {
		c.Chats = c.Chats[:catchUpChats]
	}
	return true, i < 0
}

// waiting notes m's chat as one whose sender was not admitted, and
// reports whether the list changed.
func (c *cursor) waiting(m *message, now time.Time) bool {
	if m.ChannelID == "" || m.Author == nil {
		return false
	}
	if i := slices.IndexFunc(c.Waiting, func(r chatRef) bool { return r.ID == m.ChannelID && r.Sender == m.Author.ID }); i >= 0 {
		c.Waiting = slices.Delete(c.Waiting, i, i+1)
	}
	c.Waiting = slices.Insert(c.Waiting, 0, chatRef{ID: m.ChannelID, Guild: m.GuildID, At: now.Unix(), Sender: m.Author.ID, User: m.Author.Username})
	if len(c.Waiting) > catchUpWaiting {
		c.Waiting = c.Waiting[:catchUpWaiting]
	}
	return true
}

// admitted moves the waiting chats whose sender admits now decides
// admitted (the owner approved them) to the chats talked in, and reports
// whether any moved.
func (c *cursor) admitted(admits func(id, username string) bool) bool {
	moved := false
	for i := 0; i < len(c.Waiting); {
		w := c.Waiting[i]
		if !admits(w.Sender, w.User) {
			i++
			continue
		}
		c.Waiting = slices.Delete(c.Waiting, i, i+1)
		if !slices.ContainsFunc(c.Chats, func(r chatRef) bool { return r.ID == w.ID }) {
			w.Sender, w.User = "", ""
			c.Chats = slices.Insert(c.Chats, 0, w)
			if len(c.Chats) > catchUpChats {
				c.Chats = c.Chats[:catchUpChats]
			}
		}
		moved = true
	}
	return moved
}

// loadCursor reads the kept cursor; a missing or unreadable one is empty.
func (c *Channel) loadCursor() {
	var cur cursor
	if ok, err := c.in.LoadState(cursorKey, &cur); err != nil {
		c.log.Warn("the mark of the last Discord message seen is unreadable; messages written while disconnected are not fetched this time", "err", err)
	} else if ok {
		c.cur = cur
	}
}

// saveCursor writes the cursor when it changed.
func (c *Channel) saveCursor() {
	if !c.curDirty {
		return
	}
	if err := c.in.SaveState(cursorKey, c.cur); err != nil {
		c.log.Warn("cannot keep the mark of the last Discord message seen; after a restart some messages may be fetched again (and dropped as known) or missed", "err", err)
		return
	}
	c.curDirty = false
}

// catchUp fetches, in each chat talked in within catchUpWindow, the
// messages after the cursor, and receives them as if the gateway had sent
// them, oldest first across the chats: the inbox drops those it has had
// already. A chat whose fetch failed, or had more than catchUpPages, keeps
// where it stopped for the next session.
func (c *Channel) catchUp(ctx context.Context) {
	mark := snowflake(c.cur.Last)
	if mark == 0 {
		return // nothing seen yet: a first start
	}
	now := time.Now()
	if c.cur.admitted(func(id, username string) bool { return c.in.Admits(channel.Message{SenderID: id, Username: username}) }) {
		c.curDirty = true
	}
	floor := snowflakeAt(now.Add(-catchUpWindow))
	fctx, cancel := context.WithTimeout(ctx, catchUpFor)
	defer cancel()
	var all []*message
	// Where each chat's next fetch begins, applied only once what was
	// fetched has been received: a stop half-way must not move a chat
	// past messages nobody received.
	from := map[string]string{}
	for _, chat := range c.cur.Chats {
		if now.Sub(time.Unix(chat.At, 0)) > catchUpChatAge {
			continue
		}
		after := mark
		if f := snowflake(chat.From); f != 0 && f < after {
			after = f
		}
		after = max(after, floor)
		if fctx.Err() != nil {
			if ctx.Err() != nil {
				return
			}
			from[chat.ID] = strconv.FormatUint(after, 10) // out of time: the next session
			continue
		}
		msgs, more, err := c.fetchChat(fctx, chat.ID, after)
		if ctx.Err() != nil {
			return
		}
		for _, m := range msgs {
			if m.ChannelID == "" {
				m.ChannelID = chat.ID
			}
			if m.GuildID == "" {
				m.GuildID = chat.Guild
			}
		}
		all = append(all, msgs...)
		switch {
		case err != nil:
			c.log.Warn("cannot fetch the Discord messages written while disconnected; trying again at the next session", "chat", chat.ID, "err", err)
			from[chat.ID] = strconv.FormatUint(after, 10)
			if len(msgs) > 0 {
				from[chat.ID] = msgs[len(msgs)-1].ID
			}
		case more:
			from[chat.ID] = msgs[len(msgs)-1].ID
			c.log.Warn("more Discord messages were written while disconnected than are fetched at once (the bot's own count too); the rest at the next session", "chat", chat.ID, "fetched", len(msgs))
		default:
			from[chat.ID] = ""
		}
	}
	slices.SortFunc(all, byID)
	received := 0
	for _, m := range all {
		if ctx.Err() != nil {
			return
		}
		if c.handle(ctx, m) {
			received++
		}
	}
	if ctx.Err() != nil {
		return
	}
	for i := range c.cur.Chats {
		if f, ok := from[c.cur.Chats[i].ID]; ok && c.cur.Chats[i].From != f {
			c.cur.Chats[i].From, c.curDirty = f, true
		}
	}
	if received > 0 {
		c.log.Info("received the Discord messages written while disconnected", "messages", received)
	}
	c.saveCursor()
}

// byID orders messages oldest first: snowflakes grow with time.
func byID(a, b *message) int { return cmp.Compare(snowflake(a.ID), snowflake(b.ID)) }

// fetchChat fetches chat's messages after id after, oldest first: up to
// catchUpPages calls, each tried again after a failure for now. more says
// that messages are left; an error comes with what was fetched before it.
func (c *Channel) fetchChat(ctx context.Context, chat string, after uint64) (msgs []*message, more bool, err error) {
	for range catchUpPages {
		var page []*message
		for try := 1; ; try++ {
			page, err = c.rest.messagesAfter(ctx, chat, after, catchUpPage)
			if err == nil || try == catchUpTries || channel.KindOf(classify(err)) != channel.Transient {
				break
			}
			if !channel.Sleep(ctx, time.Duration(try)*time.Second) {
				return msgs, false, ctx.Err()
			}
		}
		if err != nil {
			return msgs, false, err
		}
		page = slices.DeleteFunc(page, func(m *message) bool { return m == nil || snowflake(m.ID) <= after })
		slices.SortFunc(page, byID)
		msgs = append(msgs, page...)
		if len(page) < catchUpPage {
			return msgs, false, nil
		}
		after = snowflake(page[len(page)-1].ID)
	}
	return msgs, true, nil
}

// messagesAfter is GET /channels/{id}/messages?after=…: up to limit
// messages written after message id after, in any order.
func (c *restClient) messagesAfter(ctx context.Context, chat string, after uint64, limit int) ([]*message, error) {
	q := url.Values{"after": {strconv.FormatUint(after, 10)}, "limit": {strconv.Itoa(limit)}}
	var msgs []*message
	if err := c.call(ctx, http.MethodGet, "/channels/"+pathSegment(chat)+"/messages?"+q.Encode(), nil, &msgs); err != nil {
		return nil, err
	}
	return msgs, nil
}
