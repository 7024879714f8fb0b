package telegram

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"

	"github.com/go-telegram/bot"
	"github.com/go-telegram/bot/models"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/channel"
)

// format is how Telegram shows text: HTML parse mode, 4096 UTF-16 units.
var format = channel.Format{Limit: Limit, Measure: utf16Len, Render: channel.TelegramHTML}

func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}

// callTimeout bounds one Bot API call of a send.
const callTimeout = 30 * time.Second

// Send implements channel.Channel: the text in parts within Telegram's
// limit (the first quoting the message it answers), then each image as a
// photo.
func (c *Channel) Send(ctx context.Context, out bus.Outbound) error {
	chat, err := strconv.ParseInt(out.ChatID, 10, 64)
	if err != nil {
		return channel.Fail(channel.Permanent, fmt.Errorf("telegram: chat id %q is not a number", out.ChatID))
	}
	thread := atoi(out.ThreadID)
	replyTo := atoi(out.ReplyTo)
	if strings.TrimSpace(out.Text) != "" {
		parts := channel.Prepare(out.Text, format)
		err := c.sender.SendParts(ctx, out.ChatID, parts, format, func(ctx context.Context, text string, formatted bool) error {
			p := &bot.SendMessageParams{ChatID: chat, MessageThreadID: thread, Text: text,
				LinkPreviewOptions: &models.LinkPreviewOptions{IsDisabled: bot.True()}}
			if formatted {
				p.ParseMode = models.ParseModeHTML
			}
			if replyTo != 0 {
				// Only the first part quotes the message; a quoted message
				// deleted meanwhile does not stop the answer.
				p.ReplyParameters = &models.ReplyParameters{MessageID: replyTo, AllowSendingWithoutReply: true}
			}
			err := c.call(ctx, func(ctx context.Context) error {
				_, err := c.bot.SendMessage(ctx, p)
				return err
			})
			var me *bot.MigrateError
			if errors.As(err, &me) && me.MigrateToChatID != 0 {
				// The group became a supergroup: the answer goes there.
				p.ChatID = int64(me.MigrateToChatID)
				chat = int64(me.MigrateToChatID)
				err = c.call(ctx, func(ctx context.Context) error {
					_, err := c.bot.SendMessage(ctx, p)
					return err
				})
			}
			if err == nil {
				replyTo = 0
			}
			return err
		})
		if err != nil {
			return err
		}
	}
	for _, m := range out.Media {
		if err := c.sendMedia(ctx, chat, thread, m); err != nil {
			c.state.Fail(fmt.Errorf("sending an image to chat %s failed: %w", out.ChatID, err))
			c.log.Warn("sending an image failed for good", "channel", Name, "chat", out.ChatID, "err", err)
			return err
		}
		c.state.CountOut()
	}
	return nil
}

// sendMedia sends one attachment: images as photos, anything else as a
// document.
func (c *Channel) sendMedia(ctx context.Context, chat int64, thread int, m bus.Media) error {
	var file models.InputFile
	name := m.Name
	if strings.HasPrefix(m.URL, "https://") || strings.HasPrefix(m.URL, "http://") {
		file = &models.InputFileString{Data: m.URL}
	} else {
		up, err := channel.OpenMedia(m, 10<<20) // the Bot API takes photos up to 10 MB
		if err != nil {
			return channel.Fail(channel.Permanent, err)
		}
		if name == "" {
			name = up.Name
		}
		file = &models.InputFileUpload{Filename: up.Name, Data: up.Reader()}
		if m.Kind != "image" || !strings.HasPrefix(up.MIME, "image/") {
			return c.sender.Do(ctx, "sendDocument", func(ctx context.Context) error {
				return c.call(ctx, func(ctx context.Context) error {
					_, err := c.bot.SendDocument(ctx, &bot.SendDocumentParams{ChatID: chat, MessageThreadID: thread,
						Document: &models.InputFileUpload{Filename: up.Name, Data: up.Reader()}})
					return err
				})
			})
		}
	}
	caption := name
	if len([]rune(caption)) > 200 {
		caption = string([]rune(caption)[:200]) + "…"
	}
	return c.sender.Do(ctx, "sendPhoto", func(ctx context.Context) error {
		if up, ok := file.(*models.InputFileUpload); ok {
			// A retry must upload from the start again.
			if r, ok := up.Data.(interface {
				Seek(int64, int) (int64, error)
			}); ok {
				r.Seek(0, 0)
			}
		}
		return c.call(ctx, func(ctx context.Context) error {
			_, err := c.bot.SendPhoto(ctx, &bot.SendPhotoParams{ChatID: chat, MessageThreadID: thread, Photo: file, Caption: caption})
			return err
		})
	})
}

// call runs one Bot API call within callTimeout and classifies its error.
func (c *Channel) call(ctx context.Context, fn func(ctx context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return c.sendError(fn(cctx))
}

// sendError classifies a send's error for channel.Sender.
func (c *Channel) sendError(err error) error {
	if err == nil {
		return nil
	}
	var tm *bot.TooManyRequestsError
	var me *bot.MigrateError
	switch {
	case errors.As(err, &tm):
		return channel.RetryAfter(time.Duration(max(tm.RetryAfter, 1))*time.Second, errors.New(c.redact(err)))
	case errors.As(err, &me):
		return err // Send follows the migration
	case errors.Is(err, bot.ErrorBadRequest):
		msg := strings.ToLower(err.Error())
		switch {
		case strings.Contains(msg, "can't parse entities"), strings.Contains(msg, "unsupported start tag"),
			strings.Contains(msg, "can't find end tag"), strings.Contains(msg, "entity"):
			return channel.Fail(channel.BadFormat, errors.New(c.redact(err)))
		case strings.Contains(msg, "too long"):
			return channel.Fail(channel.TooLong, errors.New(c.redact(err)))
		}
		return channel.Fail(channel.Permanent, errors.New(c.redact(err)))
	case errors.Is(err, bot.ErrorForbidden), errors.Is(err, bot.ErrorUnauthorized), errors.Is(err, bot.ErrorNotFound):
		// Blocked by the user, removed from the group, token revoked.
		return channel.Fail(channel.Permanent, errors.New(c.redact(err)))
	}
	return errors.New(c.redact(err))
}
