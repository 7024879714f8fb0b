package telegram

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
	"unicode/utf16"
	"unicode/utf8"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/channel"
)

// format is how Telegram shows text: HTML parse mode, 4096 UTF-16 units
// of the text the HTML shows (the limit applies after entities are
// parsed: "&amp;&amp;" is two characters, a tag none).
var format = channel.Format{Limit: Limit, Measure: utf16Len, Render: channel.TelegramHTML, MeasureRendered: shownLen}

// shownLen is the length in UTF-16 units of the text that the HTML s
// shows: tags count nothing, an entity (&amp;, &lt;, &#39;, &#x1F600;)
// counts as the character it stands for, an "&" that starts none as itself.
func shownLen(s string) int {
	n := 0
	for i := 0; i < len(s); {
		switch s[i] {
		case '<':
			if j := strings.IndexByte(s[i:], '>'); j >= 0 {
				i += j + 1
				continue
			}
		case '&':
			if r, size := htmlEntity(s[i:]); size > 0 {
				n += utf16.RuneLen(r)
				i += size
				continue
			}
		}
		r, size := utf8.DecodeRuneInString(s[i:])
		n += utf16.RuneLen(r)
		if r == utf8.RuneError {
			n += 1 - utf16.RuneLen(r) // a stray byte: one unit
		}
		i += size
	}
	return n
}

// htmlEntity reads the HTML entity at the start of s: the character and the
// bytes it spans, or size 0 when s does not start one Telegram knows.
func htmlEntity(s string) (rune, int) {
	end := strings.IndexByte(s, ';')
	if end < 2 || end > 10 {
		return 0, 0
	}
	name := s[1:end]
	switch name {
	case "lt":
		return '<', end + 1
	case "gt":
		return '>', end + 1
	case "amp":
		return '&', end + 1
	case "quot":
		return '"', end + 1
	}
	if name[0] != '#' || len(name) < 2 {
		return 0, 0
	}
	base, digits := 10, name[1:]
	if digits[0] == 'x' || digits[0] == 'X' {
		base, digits = 16, digits[1:]
	}
	v, err := strconv.ParseUint(digits, base, 32)
	if err != nil || digits == "" || !utf8.ValidRune(rune(v)) {
		return 0, 0
	}
	return rune(v), end + 1
}

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
	if out.Delivered > 0 {
		// The first part, which quotes the message, went out earlier.
		replyTo = 0
	}
	var parts []channel.Part
	if strings.TrimSpace(out.Text) != "" {
		parts = channel.Prepare(out.Text, format)
		err := c.sender.SendParts(ctx, out.ChatID, parts, out.Delivered, format, func(ctx context.Context, text string, formatted bool) error {
			p := &sendMessageParams{ChatID: chat, MessageThreadID: thread, Text: text}
			p.LinkPreviewOptions.IsDisabled = true
			if formatted {
				p.ParseMode = "HTML"
			}
			if replyTo != 0 {
				// Only the first part quotes the message; a quoted message
				// deleted meanwhile does not stop the answer.
				p.ReplyParameters = &replyParams{MessageID: replyTo, AllowSendingWithoutReply: true}
			}
			send := func(ctx context.Context) error { return c.callJSON(ctx, "sendMessage", p, nil) }
			err := c.attempt(ctx, send)
			var ae *apiError
			if errors.As(err, &ae) && ae.MigrateTo != 0 {
				// The group became a supergroup: the answer goes there.
				p.ChatID = ae.MigrateTo
				chat = ae.MigrateTo
				err = c.attempt(ctx, send)
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
	for i, m := range out.Media {
		unit := len(parts) + i
		if unit < out.Delivered {
			continue
		}
		if err := c.sendMedia(ctx, chat, thread, m); err != nil {
			c.state.Fail(fmt.Errorf("sending an image to chat %s failed: %w", out.ChatID, err))
			c.log.Warn("sending an image failed", "channel", Name, "chat", out.ChatID, "err", err)
			return channel.Partial(unit, err)
		}
		c.state.CountOut()
	}
	return nil
}

// sendMedia sends one attachment: images as photos, anything else as a
// document.
func (c *Channel) sendMedia(ctx context.Context, chat int64, thread int, m bus.Media) error {
	var ref string
	var data []byte
	name := m.Name
	if strings.HasPrefix(m.URL, "https://") || strings.HasPrefix(m.URL, "http://") {
		ref = m.URL // Telegram fetches it
	} else {
		up, err := channel.OpenMedia(m, 10<<20) // the Bot API takes photos up to 10 MB
		if err != nil {
			return channel.Fail(channel.Permanent, err)
		}
		if name == "" {
			name = up.Name
		}
		data = up.Data
		if data == nil {
			data = []byte{}
		}
		if m.Kind != "image" || !strings.HasPrefix(up.MIME, "image/") {
			return c.sender.Do(ctx, "sendDocument", func(ctx context.Context) error {
				return c.attempt(ctx, func(ctx context.Context) error {
					return c.apiSendFile(ctx, "sendDocument", "document", chat, thread, "", "", up.Name, data)
				})
			})
		}
	}
	caption := name
	if len([]rune(caption)) > 200 {
		caption = string([]rune(caption)[:200]) + "…"
	}
	return c.sender.Do(ctx, "sendPhoto", func(ctx context.Context) error {
		// Each try uploads from the start: the body is made anew.
		return c.attempt(ctx, func(ctx context.Context) error {
			return c.apiSendFile(ctx, "sendPhoto", "photo", chat, thread, caption, ref, name, data)
		})
	})
}

// attempt runs one Bot API call within callTimeout and classifies its
// error.
func (c *Channel) attempt(ctx context.Context, fn func(ctx context.Context) error) error {
	cctx, cancel := context.WithTimeout(ctx, callTimeout)
	defer cancel()
	return sendError(fn(cctx))
}

// sendError classifies a send's error for channel.Sender. Errors from the
// client never hold the token, so they pass on as they are.
func sendError(err error) error {
	if err == nil {
		return nil
	}
	var ae *apiError
	if !errors.As(err, &ae) {
		return err // no answer: transient
	}
	switch ae.Code {
	case http.StatusTooManyRequests:
		return channel.RetryAfter(time.Duration(max(ae.RetryAfter, 1))*time.Second, err)
	case http.StatusBadRequest:
		if ae.MigrateTo != 0 {
			return err // Send follows the migration
		}
		msg := strings.ToLower(ae.Description)
		switch {
		case strings.Contains(msg, "can't parse entities"), strings.Contains(msg, "unsupported start tag"),
			strings.Contains(msg, "can't find end tag"), strings.Contains(msg, "entity"):
			return channel.Fail(channel.BadFormat, err)
		case strings.Contains(msg, "too long"):
			return channel.Fail(channel.TooLong, err)
		}
		return channel.Fail(channel.Permanent, err)
	case http.StatusForbidden, http.StatusUnauthorized, http.StatusNotFound:
		// Blocked by the user, removed from the group, token revoked.
		return channel.Fail(channel.Permanent, err)
	}
	return err
}

// Format is how Telegram shows text, for tests and tools that split a reply
// as the channel does.
func Format() channel.Format { return format }
