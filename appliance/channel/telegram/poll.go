package telegram

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/go-telegram/bot"

	"github.com/perchhq/perch/appliance/channel"
)

// apiError is a Bot API error answer.
type apiError struct {
	Method      string
	Code        int
	Description string
	RetryAfter  int
}

func (e *apiError) Error() string {
	return fmt.Sprintf("telegram: %s: %d %s", e.Method, e.Code, e.Description)
}

// errConflict explains Telegram's 409 to the owner.
var errConflict = errors.New("another program is polling this bot with the same token (409 Conflict): stop the other perch (or bot) that uses channels.telegram.token, or give this one its own bot from BotFather")

// maxUpdateBytes caps a getUpdates answer (100 updates of text are far
// below it; files are downloaded separately).
const maxUpdateBytes = 8 << 20

// getUpdates asks for updates from offset on, waiting up to timeout for
// the first. Asking with an offset confirms every update before it.
func (c *Channel) getUpdates(ctx context.Context, offset int64, timeout time.Duration, limit int) ([]json.RawMessage, error) {
	body, _ := json.Marshal(map[string]any{
		"offset": offset, "timeout": int(timeout / time.Second), "limit": limit,
		"allowed_updates": []string{"message"},
	})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/bot"+c.token.Value()+"/getUpdates", bytes.NewReader(body))
	if err != nil {
		return nil, fmt.Errorf("telegram: getUpdates: %s", c.redact(err))
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("telegram: getUpdates: %s", c.redact(err))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxUpdateBytes))
	if err != nil {
		return nil, fmt.Errorf("telegram: getUpdates: reading the answer: %s", c.redact(err))
	}
	var r struct {
		OK          bool              `json:"ok"`
		Result      []json.RawMessage `json:"result"`
		Description string            `json:"description"`
		ErrorCode   int               `json:"error_code"`
		Parameters  struct {
			RetryAfter int `json:"retry_after"`
		} `json:"parameters"`
	}
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("telegram: getUpdates: HTTP %d with a body that is not the Bot API's: %.120q", resp.StatusCode, data)
	}
	if !r.OK {
		code := r.ErrorCode
		if code == 0 {
			code = resp.StatusCode
		}
		return nil, &apiError{Method: "getUpdates", Code: code, Description: r.Description, RetryAfter: r.Parameters.RetryAfter}
	}
	return r.Result, nil
}

// redact removes the token from an error's text (URLs carry it).
func (c *Channel) redact(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		ue.URL = strings.ReplaceAll(ue.URL, c.token.Value(), "<token>")
	}
	s := err.Error()
	if t := c.token.Value(); t != "" {
		s = strings.ReplaceAll(s, t, "<token>")
	}
	return s
}

// poll holds one polling connection: it learns the bot's identity if Start
// could not, then long-polls until an error or ctx ends.
func (c *Channel) poll(ctx context.Context, alive func()) error {
	if c.identity() == nil {
		gctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		err := c.getMe(gctx)
		cancel()
		if err != nil {
			return c.classify(err)
		}
	}
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
		next := c.offset
		for _, raw := range ups {
			if ctx.Err() != nil {
				break // not handled: it comes again after the restart
			}
			id, msg, err := c.parse(raw)
			if id == 0 {
				c.log.Warn("Telegram update without an id ignored", "err", err, "update", clipRaw(raw))
				continue
			}
			if err != nil {
				c.log.Warn("Telegram update not understood; skipped", "update_id", id, "err", err)
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
	}
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
	if err := c.intake.SaveState("offset", next); err != nil {
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
				_, derr := c.bot.DeleteWebhook(dctx, &bot.DeleteWebhookParams{DropPendingUpdates: false})
				cancel()
				if derr == nil {
					return channel.RetryAfter(time.Millisecond, fmt.Errorf("telegram: the bot had a webhook; deleted it"))
				}
				return fmt.Errorf("telegram: the bot has a webhook and deleting it failed: %s", c.redact(derr))
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
		return err
	}
	switch {
	case errors.Is(err, bot.ErrorUnauthorized), errors.Is(err, bot.ErrorNotFound):
		return channel.RetryAfter(5*time.Minute, ErrTokenRejected)
	}
	var tm *bot.TooManyRequestsError
	if errors.As(err, &tm) {
		return channel.RetryAfter(time.Duration(max(tm.RetryAfter, 1))*time.Second, err)
	}
	return errors.New(c.redact(err))
}

func clipRaw(raw []byte) string {
	if len(raw) > 200 {
		return string(raw[:200]) + "…"
	}
	return string(raw)
}
