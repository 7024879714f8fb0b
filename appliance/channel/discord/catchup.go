package discord

import (
	"context"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"time"
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
}

// chatRef is a chat talked in: a server's channel or thread (Guild set),
// or a direct message. A fetched message does not say its server, and
// without it a server's message would read as a direct one.
type chatRef struct {
	ID    string `json:"id"`
	Guild string `json:"guild,omitempty"`
	// At is when a message there last reached the agent (Unix seconds).
	At int64 `json:"at"`
}

const (
	cursorKey = "cursor"
	// catchUpChats bounds the chats asked at a new session: a call each.
	catchUpChats = 20
	// catchUpWindow is how far back the fetch goes: an answer to a
	// message days old comes too late to help, as Telegram keeps
	// undelivered updates for a day.
	catchUpWindow = 24 * time.Hour
	// catchUpLimit is the most messages fetched per chat (Discord's most
	// per call is 100).
	catchUpLimit = 50
	// cursorSaveEvery spaces the cursor's writes: one lost to a crash
	// only makes the next fetch ask for messages the inbox already knows.
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

// saw moves the cursor past message m, and notes its chat as talked in
// when m reached the agent. It reports whether the cursor changed.
func (c *cursor) saw(m *message, talked bool, now time.Time) bool {
	changed := false
	if snowflake(m.ID) > snowflake(c.Last) {
		c.Last, changed = m.ID, true
	}
	if !talked || m.ChannelID == "" {
		return changed
	}
	i := slices.IndexFunc(c.Chats, func(r chatRef) bool { return r.ID == m.ChannelID })
	if i == 0 && c.Chats[0].Guild == m.GuildID && now.Unix()-c.Chats[0].At < 60 {
		return changed // the newest already, and lately: no write for it
	}
	if i >= 0 {
		c.Chats = slices.Delete(c.Chats, i, i+1)
	}
	c.Chats = slices.Insert(c.Chats, 0, chatRef{ID: m.ChannelID, Guild: m.GuildID, At: now.Unix()})
	if len(c.Chats) > catchUpChats {
		c.Chats = c.Chats[:catchUpChats]
	}
	return true
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
// messages after the cursor, oldest first, and receives them as if the
// gateway had sent them: the inbox drops those it has had already.
func (c *Channel) catchUp(ctx context.Context) {
	after := snowflake(c.cur.Last)
	if after == 0 {
		return // nothing seen yet: a first start
	}
	now := time.Now()
	if floor := snowflakeAt(now.Add(-catchUpWindow)); after < floor {
		after = floor
	}
	fetched := 0
	for _, chat := range slices.Clone(c.cur.Chats) {
		if now.Sub(time.Unix(chat.At, 0)) > catchUpWindow {
			continue
		}
		msgs, err := c.rest.messagesAfter(ctx, chat.ID, after, catchUpLimit)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			c.log.Warn("cannot fetch the Discord messages written while disconnected; they are not answered", "chat", chat.ID, "err", err)
			continue
		}
		slices.SortFunc(msgs, func(a, b *message) int {
			x, y := snowflake(a.ID), snowflake(b.ID)
			switch {
			case x < y:
				return -1
			case x > y:
				return 1
			}
			return 0
		})
		for _, m := range msgs {
			if m == nil || snowflake(m.ID) <= after {
				continue
			}
			if m.ChannelID == "" {
				m.ChannelID = chat.ID
			}
			if m.GuildID == "" {
				m.GuildID = chat.Guild
			}
			fetched++
			c.handle(ctx, m)
		}
	}
	if fetched > 0 {
		c.log.Info("fetched the Discord messages written while disconnected", "messages", fetched)
	}
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
