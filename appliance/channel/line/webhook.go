package line

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf16"

	"github.com/perchhq/perch/appliance/channel"
)

// maxBody caps a webhook request (LINE's are a few KB).
const maxBody = 1 << 20

// ValidSignature reports whether sig (X-Line-Signature, base64) is the
// HMAC-SHA256 of body keyed by secret. The comparison takes the same time
// whatever the signature, so it leaks nothing about the right one.
func ValidSignature(secret, body []byte, sig string) bool {
	got, err := base64.StdEncoding.DecodeString(strings.TrimSpace(sig))
	if err != nil || len(got) != sha256.Size {
		return false
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return hmac.Equal(got, mac.Sum(nil))
}

// Sign returns the X-Line-Signature of body under secret.
func Sign(secret, body []byte) string {
	mac := hmac.New(sha256.New, secret)
	mac.Write(body)
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// event is a webhook event (the fields Perch reads).
type event struct {
	Type            string `json:"type"`
	Mode            string `json:"mode"`
	WebhookEventID  string `json:"webhookEventId"`
	ReplyToken      string `json:"replyToken"`
	DeliveryContext struct {
		IsRedelivery bool `json:"isRedelivery"`
	} `json:"deliveryContext"`
	Source struct {
		Type    string `json:"type"`
		UserID  string `json:"userId"`
		GroupID string `json:"groupId"`
		RoomID  string `json:"roomId"`
	} `json:"source"`
	Message *struct {
		ID              string  `json:"id"`
		Type            string  `json:"type"`
		Text            string  `json:"text"`
		QuoteToken      string  `json:"quoteToken"`
		QuotedMessageID string  `json:"quotedMessageId"`
		FileName        string  `json:"fileName"`
		FileSize        int64   `json:"fileSize"`
		Title           string  `json:"title"`
		Address         string  `json:"address"`
		Latitude        float64 `json:"latitude"`
		Longitude       float64 `json:"longitude"`
		ContentProvider struct {
			Type               string `json:"type"`
			OriginalContentURL string `json:"originalContentUrl"`
		} `json:"contentProvider"`
		Mention *struct {
			Mentionees []struct {
				Index  int    `json:"index"`
				Length int    `json:"length"`
				Type   string `json:"type"`
				UserID string `json:"userId"`
				IsSelf bool   `json:"isSelf"`
			} `json:"mentionees"`
		} `json:"mention"`
	} `json:"message"`
}

// webhook receives LINE's events. The signature is checked first; each
// message event is handed to the framework, and the answer is 200 only
// once all are durable (otherwise 500, and LINE's redelivery, deduplicated
// by webhookEventId, brings them again).
func (c *Channel) webhook(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || len(body) > maxBody {
		writeJSON(w, http.StatusRequestEntityTooLarge, `{"error":"line webhook: body too large or unreadable"}`)
		return
	}
	if !ValidSignature(c.secret, body, r.Header.Get("X-Line-Signature")) {
		c.log.Debug("LINE webhook request with a missing or wrong signature refused", "remote", r.RemoteAddr)
		writeJSON(w, http.StatusForbidden, `{"error":"line webhook: missing or invalid X-Line-Signature (is channels.line.channel_secret the channel's secret?)"}`)
		return
	}
	c.mu.Lock()
	running := c.running
	c.mu.Unlock()
	if !running {
		writeJSON(w, http.StatusServiceUnavailable, `{"error":"line webhook: the channel is not running"}`)
		return
	}
	var req struct {
		Events []json.RawMessage `json:"events"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		writeJSON(w, http.StatusBadRequest, `{"error":"line webhook: the body is not a webhook JSON object"}`)
		return
	}
	// The work finishes even when LINE stops waiting for the answer.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(r.Context()), 2*time.Minute)
	defer cancel()
	for _, raw := range req.Events {
		var ev event
		if err := json.Unmarshal(raw, &ev); err != nil {
			c.log.Warn("LINE event not understood; skipped", "err", err)
			continue
		}
		m, ok := c.message(ev)
		if !ok {
			continue
		}
		c.receiving(m.MessageID, ev)
		err := c.intake.Receive(ctx, m)
		c.received(m.MessageID)
		if err != nil {
			c.log.Warn("LINE event not stored; LINE will deliver it again", "err", err)
			writeJSON(w, http.StatusInternalServerError, `{"error":"line webhook: the event could not be stored; deliver it again"}`)
			return
		}
	}
	writeJSON(w, http.StatusOK, `{}`)
}

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	io.WriteString(w, body)
}

// message turns a message event into the framework's Message.
func (c *Channel) message(ev event) (channel.Message, bool) {
	if ev.Type != "message" || ev.Message == nil || ev.Mode == "standby" {
		return channel.Message{}, false
	}
	em := ev.Message
	m := channel.Message{EventID: ev.WebhookEventID, MessageID: em.ID, SenderID: ev.Source.UserID}
	switch ev.Source.Type {
	case "group":
		m.ChatID, m.IsGroup = ev.Source.GroupID, true
	case "room":
		m.ChatID, m.IsGroup = ev.Source.RoomID, true
	default:
		m.ChatID = ev.Source.UserID
	}
	if m.ChatID == "" {
		return channel.Message{}, false
	}
	botID, botName := c.identity()
	m.ReplyToBot = em.QuotedMessageID != "" && c.sentByBot(em.QuotedMessageID)
	switch em.Type {
	case "text":
		m.Text = em.Text
		// Only a group needs to be told who is addressed; in a one-to-one
		// chat "What does a perch eat?" means the fish.
		if !m.IsGroup {
			break
		}
		if em.Mention != nil {
			for _, mt := range em.Mention.Mentionees {
				if mt.IsSelf || (botID != "" && mt.UserID == botID) {
					m.Text, m.Mentioned = cutUTF16(em.Text, mt.Index, mt.Length), true
					break
				}
			}
		}
		if !m.Mentioned && botName != "" {
			m.Text, m.Mentioned = channel.StripName(m.Text, botName)
		}
		if !m.Mentioned && botID != "" {
			m.Text, m.Mentioned = channel.StripName(m.Text, botID)
		}
	case "image":
		m.Media = append(m.Media, c.content(channel.MediaImage, em.ID, "", em.ContentProvider.Type, em.ContentProvider.OriginalContentURL))
	case "video":
		m.Media = append(m.Media, c.content(channel.MediaVideo, em.ID, "", em.ContentProvider.Type, em.ContentProvider.OriginalContentURL))
	case "audio":
		// LINE's voice messages are audio messages (m4a).
		m.Media = append(m.Media, c.content(channel.MediaVoice, em.ID, "audio/m4a", em.ContentProvider.Type, em.ContentProvider.OriginalContentURL))
	case "file":
		m.Media = append(m.Media, channel.MediaRef{Kind: channel.MediaFile, Name: em.FileName, Size: em.FileSize})
	case "sticker":
		m.Media = append(m.Media, channel.MediaRef{Kind: channel.MediaSticker})
	case "location":
		m.Text = strings.TrimSpace(fmt.Sprintf("[location: %s %s (%.6f, %.6f)]", em.Title, em.Address, em.Latitude, em.Longitude))
	default:
		m.Text = "[" + em.Type + " message]"
	}
	return m, true
}

// cutUTF16 removes n UTF-16 units at off from s (LINE's mention indexes
// count UTF-16 units).
func cutUTF16(s string, off, n int) string {
	u := utf16.Encode([]rune(s))
	if off < 0 || n <= 0 || off+n > len(u) {
		return s
	}
	before := string(utf16.Decode(u[:off]))
	return channel.Cut(before+string(utf16.Decode(u[off+n:])), len(before), len(before))
}

// content is an attachment downloaded from the data API (or, for content
// LINE only links to, from its original URL).
func (c *Channel) content(kind channel.MediaKind, id, mime, provider, original string) channel.MediaRef {
	url := c.dataBase + "/v2/bot/message/" + id + "/content"
	auth := true
	if provider == "external" && strings.HasPrefix(original, "https://") {
		url, auth = original, false
	}
	return channel.MediaRef{Kind: kind, MIME: mime, Fetch: func(ctx context.Context) (io.ReadCloser, int64, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, 0, err
		}
		if auth {
			req.Header.Set("Authorization", "Bearer "+c.token.Value())
		}
		resp, err := c.client.Do(req)
		if err != nil {
			return nil, 0, fmt.Errorf("line: content: %w", err)
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, 0, fmt.Errorf("line: content: HTTP %d", resp.StatusCode)
		}
		return resp.Body, resp.ContentLength, nil
	}}
}

// receiving holds the event's tokens while the intake decides whether
// its message will be answered (keepToken) or dropped.
func (c *Channel) receiving(msgID string, ev event) {
	if msgID == "" {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.pending[msgID] = replyToken{token: ev.ReplyToken, quote: ev.Message.QuoteToken}
}

func (c *Channel) received(msgID string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.pending, msgID)
}

// keepToken keeps the reply token (for ReplyTTL) and the quote token (for
// an hour) of a message that will be answered. Only those are kept: a busy
// group's chatter, which the bot never answers, would otherwise fill the
// table, and every answer would go by push (paid) without its quote. Full,
// the table drops its oldest entry, whose reply token is the stalest.
func (c *Channel) keepToken(m channel.Message) {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.pending[m.MessageID]
	if !ok {
		return
	}
	for id, t := range c.tokens {
		if now.After(t.kept) || (t.taken && now.After(t.expires)) {
			delete(c.tokens, id)
		}
	}
	for len(c.tokens) >= c.opts.ReplyTokens {
		oldest := ""
		for id, t := range c.tokens {
			if oldest == "" || t.kept.Before(c.tokens[oldest].kept) {
				oldest = id
			}
		}
		delete(c.tokens, oldest)
	}
	t.expires, t.kept = now.Add(c.opts.ReplyTTL), now.Add(time.Hour)
	c.tokens[m.MessageID] = t
}

// takeToken returns the fresh reply token of message msgID (once: reply
// tokens are single-use) and its quote token.
func (c *Channel) takeToken(msgID string) (reply, quote string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	t, ok := c.tokens[msgID]
	if !ok {
		return "", ""
	}
	if time.Now().Before(t.expires) {
		reply = t.token
	}
	t.token, t.taken = "", true
	c.tokens[msgID] = t
	return reply, t.quote
}

// sentByBot reports whether the bot sent message id: a quote-reply to it
// in a group is for the bot. The ids are kept in the store too, so a
// reply to an answer sent before a restart still reaches the bot.
func (c *Channel) sentByBot(id string) bool {
	c.mu.Lock()
	held := c.sentIDs.Has(id)
	c.mu.Unlock()
	if held {
		return true
	}
	held, err := c.intake.Remembered("sent", id)
	if err != nil {
		c.log.Warn("cannot read the ids of the bot's messages; a reply to one in a group needs a mention", "err", err)
	}
	return held
}

// keptSent is how many ids of sent messages the store keeps: a reply to
// anything older needs a mention.
const keptSent = 4096

func (c *Channel) noteSent(ids []string) {
	if len(ids) == 0 {
		return
	}
	c.mu.Lock()
	for _, id := range ids {
		c.sentIDs.Add(id)
	}
	c.mu.Unlock()
	if err := c.intake.Remember("sent", keptSent, ids...); err != nil {
		c.log.Warn("cannot keep the ids of the bot's messages; after a restart a reply to them in a group needs a mention", "err", err)
	}
}
