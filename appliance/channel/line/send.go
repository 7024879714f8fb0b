package line

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"time"
	"unicode/utf16"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/channel"
)

// format is LINE's: plain text, 5000 units a message.
var format = channel.Format{Limit: TextLimit, Measure: utf16Len}

func utf16Len(s string) int {
	n := 0
	for _, r := range s {
		n += utf16.RuneLen(r)
	}
	return n
}

// message is a Messaging API message object.
type message struct {
	Type               string `json:"type"`
	Text               string `json:"text,omitempty"`
	QuoteToken         string `json:"quoteToken,omitempty"`
	OriginalContentURL string `json:"originalContentUrl,omitempty"`
	PreviewImageURL    string `json:"previewImageUrl,omitempty"`
}

type sendResult struct {
	SentMessages []struct {
		ID string `json:"id"`
	} `json:"sentMessages"`
}

// Send implements channel.Channel: the reply in plain-text messages of at
// most 5000 units, the first quoting the message it answers, five to a
// request; the first request through the free reply API while the reply
// token is fresh, the rest (and every answer after the token expired)
// through the push API, counted per month.
func (c *Channel) Send(ctx context.Context, out bus.Outbound) error {
	var msgs []message
	if strings.TrimSpace(out.Text) != "" {
		for _, p := range channel.Prepare(channel.PlainText(out.Text), format) {
			msgs = append(msgs, message{Type: "text", Text: p.Text})
		}
	}
	for _, m := range out.Media {
		if strings.HasPrefix(m.URL, "https://") {
			msgs = append(msgs, message{Type: "image", OriginalContentURL: m.URL, PreviewImageURL: m.URL})
			continue
		}
		// LINE fetches images itself, from a public https address; a
		// picture made here has none.
		msgs = append(msgs, message{Type: "text", Text: "(I made an image, but LINE shows only images at a public https:// address; it is on the web page's canvas.)"})
	}
	reply, quote := c.takeToken(out.ReplyTo)
	if out.Delivered > 0 {
		// An earlier attempt delivered the first messages, the quote with
		// them; its reply token is spent.
		reply, quote = "", ""
	}
	first := min(max(out.Delivered, 0), len(msgs))
	if first == len(msgs) {
		return nil
	}
	if quote != "" && msgs[first].Type == "text" {
		msgs[first].QuoteToken = quote
	}
	for start := first; start < len(msgs); start += MaxPerRequest {
		batch := msgs[start:min(start+MaxPerRequest, len(msgs))]
		var err error
		if reply != "" {
			err = c.reply(ctx, out.ChatID, reply, batch)
			reply = "" // single use
			if refusedToken(err) {
				c.log.Info("the reply token was no longer valid; pushing the answer instead", "chat", out.ChatID)
				err = c.push(ctx, out.ChatID, batch)
			}
		} else {
			err = c.push(ctx, out.ChatID, batch)
		}
		if err != nil {
			c.log.Warn("sending failed for good", "channel", Name, "chat", out.ChatID, "kind", channel.KindOf(err).String(), "err", err)
			c.state.Fail(fmt.Errorf("sending to chat %s failed: %w", out.ChatID, err))
			return channel.Partial(start, err)
		}
		for range batch {
			c.state.CountOut()
		}
	}
	return nil
}

// reply sends batch with a reply token (free). A reply token is single
// use, so a retry after an attempt whose answer was lost (a timeout, a
// connection reset once the request was out) is refused when that attempt
// did reach LINE: the reply is then taken as delivered, since pushing it
// would show it twice (and cost a push).
func (c *Channel) reply(ctx context.Context, chat, token string, batch []message) error {
	var res sendResult
	lost := false
	err := c.sender.Do(ctx, "reply", func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, c.opts.MessageTimeout)
		defer cancel()
		err := c.post(ctx, c.apiBase+"/v2/bot/message/reply", "", map[string]any{"replyToken": token, "messages": batch}, &res)
		if lost && refusedToken(err) {
			c.log.Info("LINE refused the reply token on a retry after a try whose answer was lost; that try delivered the reply, so it is not pushed again", "chat", chat)
			return nil
		}
		if mayHaveArrived(err) {
			lost = true
		}
		return classify(err)
	})
	if err == nil {
		c.noteResult(res)
	}
	return err
}

// refusedToken reports whether LINE refused a reply's token (used or
// expired).
func refusedToken(err error) bool {
	var ae *apiError
	return errors.As(err, &ae) && ae.Status == http.StatusBadRequest && strings.Contains(strings.ToLower(ae.Message), "reply token")
}

// mayHaveArrived reports whether a failed call may have reached LINE all
// the same: no answer came, and the failure was not in making the
// connection.
func mayHaveArrived(err error) bool {
	if err == nil {
		return false
	}
	var ae *apiError
	if errors.As(err, &ae) {
		return false
	}
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return false
	}
	var dns *net.DNSError
	return !errors.As(err, &dns)
}

// push sends batch to chat through the push API, with a retry key so a
// retry after a lost answer cannot deliver it twice (LINE answers 409 to
// a key it already accepted).
func (c *Channel) push(ctx context.Context, chat string, batch []message) error {
	key := retryKey()
	var res sendResult
	err := c.sender.Do(ctx, "push", func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, c.opts.MessageTimeout)
		defer cancel()
		err := c.post(ctx, c.apiBase+"/v2/bot/message/push", key, map[string]any{"to": chat, "messages": batch}, &res)
		var ae *apiError
		if errors.As(err, &ae) && ae.Status == http.StatusConflict {
			return nil // accepted by an earlier try
		}
		return classify(err)
	})
	if err == nil {
		c.noteResult(res)
		c.countPushes(len(batch))
	}
	return err
}

func (c *Channel) noteResult(res sendResult) {
	ids := make([]string, 0, len(res.SentMessages))
	for _, m := range res.SentMessages {
		ids = append(ids, m.ID)
	}
	c.noteSent(ids)
}

// retryKey is a random UUID (version 4) for X-Line-Retry-Key.
func retryKey() string {
	var b [16]byte
	rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// pushCount is the month's push tally, kept in the store so a restart
// does not forget it.
type pushCount struct {
	Month string `json:"month"`
	Count int    `json:"count"`
}

func (c *Channel) loadPushes() {
	var p pushCount
	if ok, err := c.intake.LoadState("pushes", &p); err != nil {
		c.log.Warn("cannot read the LINE push count", "err", err)
	} else if ok {
		c.mu.Lock()
		c.pushes = p
		c.mu.Unlock()
	}
	c.countPushes(0)
}

// countPushes adds n pushed messages to this month's count.
func (c *Channel) countPushes(n int) {
	month := time.Now().Format("2006-01")
	c.mu.Lock()
	if c.pushes.Month != month {
		c.pushes = pushCount{Month: month}
	}
	c.pushes.Count += n
	p := c.pushes
	c.mu.Unlock()
	c.state.SetExtra("pushes_this_month", p.Count)
	if n > 0 {
		if err := c.intake.SaveState("pushes", p); err != nil {
			c.log.Warn("cannot save the LINE push count", "err", err)
		}
	}
}

// PushesThisMonth is the number of messages pushed this month.
func (c *Channel) PushesThisMonth() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.pushes.Month != time.Now().Format("2006-01") {
		return 0
	}
	return c.pushes.Count
}
