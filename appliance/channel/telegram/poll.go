package telegram

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/perchhq/perch/appliance/channel"
)

// errConflict explains Telegram's 409 to the owner.
var errConflict = errors.New("another program is polling this bot with the same token (409 Conflict): stop the other perch (or bot) that uses channels.telegram.token, or give this one its own bot from BotFather")

// getUpdates asks for updates from offset on, waiting up to timeout for
// the first. Asking with an offset confirms every update before it.
func (c *Channel) getUpdates(ctx context.Context, offset int64, timeout time.Duration, limit int) ([]json.RawMessage, error) {
	b, err := channel.JSONBody(map[string]any{
		"offset": offset, "timeout": int(timeout / time.Second), "limit": limit,
		"allowed_updates": []string{"message"},
	})
	if err != nil {
		return nil, err
	}
	var ups []json.RawMessage
	if err := c.call(ctx, "getUpdates", b, maxUpdateBytes, &ups); err != nil {
		return nil, err
	}
	return ups, nil
}

// poll holds one polling connection: it asks getMe (unless Start's just
// did), then long-polls until an error or ctx ends. getMe answering is the
// channel working: a long poll with nothing to deliver holds for
// PollTimeout before its first answer, and /ready should not fail that long
// after every start and reconnect.
func (c *Channel) poll(ctx context.Context, alive func()) error {
	if !c.startedMe.Swap(false) {
		gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := c.getMe(gctx)
		cancel()
		if err != nil {
			return c.classify(err)
		}
	}
	alive()
	for {
		ups, err := c.getUpdates(ctx, c.offset, c.opts.PollTimeout, 100)
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return c.classify(err)
		}
		if c.conflicts > 0 {
			c.log.Info("Telegram polling works again; the other poller is gone")
			c.conflicts = 0
		}
		alive()
		ups = c.restOfAlbum(ctx, ups)
		// Handling is not the connection going quiet: a photo's download
		// and a voice message's transcription take up to two minutes each,
		// longer than Quiet. The watchdog hears from a ticker meanwhile,
		// and the handling runs under the channel's life, so only Stop ends
		// it; a getUpdates that hangs is still caught.
		stop := keepAlive(alive, c.opts.Quiet/4)
		err = c.handle(c.life, ups)
		stop()
		if err != nil {
			return err
		}
	}
}

// albumWait is how long the rest of an album is waited for when an
// answer ends with one of its photos: a phone sends them within moments.
const albumWait = time.Second

// restOfAlbum returns ups, or, when its last update is a photo of an
// album whose other photos may still be on their way, the updates from the
// same offset a moment later (those and whatever came since). Asking from
// a later offset would confirm the updates before it to Telegram before
// they are stored.
func (c *Channel) restOfAlbum(ctx context.Context, ups []json.RawMessage) []json.RawMessage {
	if len(ups) == 0 || albumOf(ups[len(ups)-1]) == "" {
		return ups
	}
	if !channel.Sleep(ctx, albumWait) {
		return ups
	}
	more, err := c.getUpdates(ctx, c.offset, 0, 100)
	if err != nil || len(more) < len(ups) {
		return ups
	}
	return more
}

// albumOf is the media_group_id of an update's message.
func albumOf(raw json.RawMessage) string {
	var u struct {
		Message *struct {
			MediaGroupID string `json:"media_group_id"`
		} `json:"message"`
	}
	if json.Unmarshal(raw, &u) != nil || u.Message == nil {
		return ""
	}
	return u.Message.MediaGroupID
}

// keepAlive calls alive every d until stop, which returns once it no
// longer does (a connection that ended must not report itself alive).
func keepAlive(alive func(), d time.Duration) (stop func()) {
	d = max(d, 10*time.Millisecond)
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(d)
		defer t.Stop()
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				alive()
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}

// handle hands the updates of one getUpdates answer to the intake in order
// and saves the offset past those handled. An error means one was not
// made durable: it is polled again.
func (c *Channel) handle(ctx context.Context, ups []json.RawMessage) error {
	next := c.offset
	type parsed struct {
		id    int64
		msg   *channel.Message
		album string
	}
	var all []parsed
	for _, raw := range ups {
		id, msg, album, err := c.parse(raw)
		if id == 0 {
			c.log.Warn("Telegram update without an id ignored", "err", err, "update", clipRaw(raw))
			continue
		}
		if err != nil {
			c.log.Warn("Telegram update not understood; skipped", "update_id", id, "err", err)
		}
		if msg != nil && c.seenBare(id) {
			c.log.Debug("redelivered event dropped", "event", id)
			msg = nil
		}
		all = append(all, parsed{id, msg, album})
	}
	for i := 0; i < len(all); i++ {
		if ctx.Err() != nil {
			break // not handled: it comes again after the restart
		}
		id, msg := all[i].id, all[i].msg
		// An album is one message to the agent: its photos arrive as
		// messages of their own, one of them with the caption (and, in a
		// group, the mention), and answering each would answer the
		// captionless ones with guesses.
		for msg != nil && all[i].album != "" && i+1 < len(all) && all[i+1].album == all[i].album && all[i+1].msg != nil {
			i++
			join(msg, *all[i].msg)
			id = all[i].id
		}
		if msg != nil {
			if err := c.intake.Receive(ctx, *msg); err != nil {
				c.saveOffset(next)
				return err // not durable: poll it again
			}
		}
		next = id + 1
	}
	c.saveOffset(next)
	return nil
}

// savedOffset is the store's telegram/offset. Update ids are each bot's
// own sequence, so the offset names its bot: after the token changes to
// another bot, asking that bot for updates from the old one's offset
// would make Telegram drop the new bot's messages below it.
type savedOffset struct {
	Bot  int64 `json:"bot"`
	Next int64 `json:"next"`
}

// loadOffset reads the saved offset; getMe decides whether it is this
// bot's (adoptOffset). An offset saved as a bare number, before offsets
// named their bot, is taken as this bot's: the token rarely changes
// with the upgrade, and dropping it would answer the updates still
// waiting on Telegram's side a second time.
func (c *Channel) loadOffset() error {
	var raw json.RawMessage
	ok, err := c.intake.LoadState("offset", &raw)
	if err != nil {
		return fmt.Errorf("telegram: read the saved update offset: %w", err)
	}
	if !ok {
		return nil
	}
	var s savedOffset
	if err := json.Unmarshal(raw, &s.Next); err == nil {
		c.saved, c.bareIDs = &s, true
		return nil
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return fmt.Errorf("telegram: read the saved update offset %s: %w", clipRaw(raw), err)
	}
	c.saved = &s
	return nil
}

// adoptOffset sets the offset for bot, the token's bot as getMe names it:
// the saved one when it is this bot's, else none (Telegram's first waiting
// update).
func (c *Channel) adoptOffset(bot int64) {
	if c.offsetBot == bot {
		return
	}
	c.offsetBot = bot
	s := c.saved
	next := int64(0)
	switch {
	case s == nil:
	case s.Bot == bot || c.bareIDs:
		next = s.Next
	default:
		c.log.Info("the saved Telegram update offset is another bot's: channels.telegram.token now names bot "+strconv.FormatInt(bot, 10)+"; starting from the updates waiting for it",
			"saved_for_bot", s.Bot)
	}
	c.offsetMu.Lock()
	c.offset = next
	c.offsetMu.Unlock()
	if c.bareIDs && next != 0 {
		c.storeOffset(next) // from now on it names its bot
	}
}

// eventID is the intake's id of update id: with the bot, since another
// bot numbers its updates from its own start.
func (c *Channel) eventID(id int64) string {
	return strconv.FormatInt(c.offsetBot, 10) + ":" + strconv.FormatInt(id, 10)
}

// seenBare reports whether update id was received before event ids named
// the bot (as the bare update id).
func (c *Channel) seenBare(id int64) bool {
	return c.bareIDs && c.intake.Seen(strconv.FormatInt(id, 10))
}

// saveOffset keeps the next update id durable (the store) before Telegram
// hears of it (the next getUpdates).
func (c *Channel) saveOffset(next int64) {
	if next == c.offset {
		return
	}
	c.offsetMu.Lock()
	c.offset = next
	c.offsetMu.Unlock()
	c.storeOffset(next)
}

func (c *Channel) storeOffset(next int64) {
	if err := c.intake.SaveState("offset", savedOffset{Bot: c.offsetBot, Next: next}); err != nil {
		// The events are in the inbox with their ids: a redelivery after
		// a restart is dropped as a duplicate.
		c.log.Warn("cannot save the Telegram offset", "err", err)
	}
}

// confirm tells Telegram the offset, so updates handled here are not
// delivered again to whoever polls next.
func (c *Channel) confirm(ctx context.Context) {
	c.offsetMu.Lock()
	off := c.offset
	c.offsetMu.Unlock()
	if off == 0 {
		return
	}
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := c.getUpdates(cctx, off, 0, 1); err != nil {
		c.log.Debug("could not confirm the offset to Telegram at stop (it is saved and used at the next start)", "err", err)
	}
}

// classify turns a failed call into what the supervisor should do.
func (c *Channel) classify(err error) error {
	var ae *apiError
	if errors.As(err, &ae) {
		switch ae.Code {
		case http.StatusUnauthorized, http.StatusNotFound:
			c.log.Error("Telegram rejects the bot token; fix channels.telegram.token and restart")
			return channel.RetryAfter(5*time.Minute, ErrTokenRejected)
		case http.StatusConflict:
			if strings.Contains(strings.ToLower(ae.Description), "webhook") && !c.webhookGone {
				// A webhook left by another program blocks polling.
				c.webhookGone = true
				c.log.Warn("a webhook is set for this bot; deleting it so polling works (updates wait on Telegram's side)")
				dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				derr := c.apiDeleteWebhook(dctx)
				cancel()
				if derr == nil {
					return channel.RetryAfter(time.Millisecond, fmt.Errorf("telegram: the bot had a webhook; deleted it"))
				}
				return fmt.Errorf("telegram: the bot has a webhook and deleting it failed: %w", derr)
			}
			wait := c.opts.ConflictWait << min(c.conflicts, 4)
			wait = min(wait, 5*time.Minute)
			if c.conflicts == 0 {
				c.log.Error(errConflict.Error())
			}
			c.conflicts++
			return channel.RetryAfter(wait, errConflict)
		case http.StatusTooManyRequests:
			return channel.RetryAfter(time.Duration(max(ae.RetryAfter, 1))*time.Second, err)
		}
	}
	// Any other answer, no answer, or one not the Bot API's: the
	// supervisor backs off and retries.
	return err
}

func clipRaw(raw []byte) string {
	if len(raw) > 200 {
		return string(raw[:200]) + "…"
	}
	return string(raw)
}
