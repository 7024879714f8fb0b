package telegram

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"unicode/utf16"

	"github.com/perchhq/perch/appliance/channel"
)

// parse decodes one update. id is 0 when not even the update id can be
// read; msg is nil for updates that carry no message for the agent. album
// names the album the message is a part of ("" for none).
func (c *Channel) parse(raw json.RawMessage) (id int64, msg *channel.Message, album string, err error) {
	var u update
	if err := json.Unmarshal(raw, &u); err != nil {
		var head struct {
			ID int64 `json:"update_id"`
		}
		json.Unmarshal(raw, &head)
		return head.ID, nil, "", err
	}
	if u.Message == nil || u.Message.From == nil || u.Message.From.IsBot {
		return u.ID, nil, "", nil
	}
	m := c.message(u.Message)
	m.EventID = c.eventID(u.ID)
	if g := u.Message.MediaGroupID; g != "" {
		album = m.ChatID + "/" + g
	}
	return u.ID, &m, album, nil
}

// join adds part, a later message of the same album, to m: its media, and
// its text when m has none (the caption is on one photo of the album, not
// always the first).
func join(m *channel.Message, part channel.Message) {
	m.Media = append(m.Media, part.Media...)
	if strings.TrimSpace(m.Text) == "" {
		m.Text = part.Text
	}
	m.Mentioned = m.Mentioned || part.Mentioned
	m.ReplyToBot = m.ReplyToBot || part.ReplyToBot
}

// message turns a Telegram message into the framework's.
func (c *Channel) message(tm *message) channel.Message {
	m := channel.Message{
		ChatID:     strconv.FormatInt(tm.Chat.ID, 10),
		MessageID:  strconv.Itoa(tm.ID),
		SenderID:   strconv.FormatInt(tm.From.ID, 10),
		Username:   tm.From.Username,
		SenderName: strings.TrimSpace(tm.From.FirstName + " " + tm.From.LastName),
		IsGroup:    tm.Chat.Type == "group" || tm.Chat.Type == "supergroup",
	}
	if tm.IsTopicMessage && tm.MessageThreadID != 0 {
		// Forum topics are conversations of their own.
		m.ThreadID = strconv.Itoa(tm.MessageThreadID)
	}
	text, entities := tm.Text, tm.Entities
	if text == "" {
		text, entities = tm.Caption, tm.CaptionEntities
	}
	me := c.identity()
	if me != nil {
		if tm.ReplyToMessage != nil && tm.ReplyToMessage.From != nil && tm.ReplyToMessage.From.ID == me.ID {
			m.ReplyToBot = true
		}
		if m.IsGroup {
			// Only a group needs to be told who is addressed; in a
			// private chat "What do perch eat?" means the fish.
			text, m.Mentioned = mention(text, entities, me)
		}
	}
	m.Text = text
	m.Media = c.media(tm)
	return m
}

// mention decides whether text addresses the bot and removes the mention:
// mention entities first (@username, a text mention of the bot's account,
// a command addressed to the bot), then the bot's display name in the
// text, then its user id.
func mention(text string, entities []entity, me *user) (string, bool) {
	units := utf16.Encode([]rune(text))
	cut := func(off, n int) string {
		if off < 0 || off+n > len(units) {
			return text
		}
		before := string(utf16.Decode(units[:off]))
		return channel.Cut(before+string(utf16.Decode(units[off+n:])), len(before), len(before))
	}
	sub := func(off, n int) string {
		if off < 0 || off+n > len(units) {
			return ""
		}
		return string(utf16.Decode(units[off : off+n]))
	}
	for _, e := range entities {
		switch e.Type {
		case "mention":
			if me.Username != "" && strings.EqualFold(sub(e.Offset, e.Length), "@"+me.Username) {
				return cut(e.Offset, e.Length), true
			}
		case "text_mention":
			if e.User != nil && e.User.ID == me.ID {
				return cut(e.Offset, e.Length), true
			}
		case "bot_command":
			// "/help@perch_bot": kept whole, the agent's command parser
			// strips the address.
			cmd := strings.ToLower(sub(e.Offset, e.Length))
			if me.Username != "" && strings.HasSuffix(cmd, "@"+strings.ToLower(me.Username)) {
				return text, true
			}
			// A bare "/status" that opens the message is for every bot in
			// the group, this one included: Telegram delivers commands to
			// bots in privacy mode for that reason.
			if e.Offset == 0 && !strings.Contains(cmd, "@") {
				return text, true
			}
		}
	}
	for _, name := range []string{me.FirstName, strings.TrimSpace(me.FirstName + " " + me.LastName)} {
		if rest, ok := channel.StripName(text, name); ok {
			return rest, true
		}
	}
	if rest, ok := channel.StripName(text, strconv.FormatInt(me.ID, 10)); ok {
		return rest, true
	}
	return text, false
}

// media lists the attachments of tm.
func (c *Channel) media(tm *message) []channel.MediaRef {
	var out []channel.MediaRef
	if n := len(tm.Photo); n > 0 {
		// Sizes come smallest first; take the largest within the cap.
		best := tm.Photo[n-1]
		for i := n - 1; i >= 0; i-- {
			if tm.Photo[i].FileSize <= c.intake.MaxMediaBytes() {
				best = tm.Photo[i]
				break
			}
		}
		out = append(out, c.ref(channel.MediaImage, best.FileID, "", "image/jpeg", best.FileSize))
	}
	if v := tm.Voice; v != nil {
		out = append(out, c.ref(channel.MediaVoice, v.FileID, "", v.MimeType, v.FileSize))
	}
	if a := tm.Audio; a != nil {
		out = append(out, c.ref(channel.MediaAudio, a.FileID, a.FileName, a.MimeType, a.FileSize))
	}
	if v := tm.Video; v != nil {
		out = append(out, c.ref(channel.MediaVideo, v.FileID, v.FileName, v.MimeType, v.FileSize))
	}
	if v := tm.VideoNote; v != nil {
		out = append(out, c.ref(channel.MediaVideo, v.FileID, "", "video/mp4", v.FileSize))
	}
	if a := tm.Animation; a != nil {
		out = append(out, c.ref(channel.MediaVideo, a.FileID, a.FileName, a.MimeType, a.FileSize))
	}
	if d := tm.Document; d != nil {
		out = append(out, channel.MediaRef{Kind: channel.MediaFile, Name: d.FileName, MIME: d.MimeType, Size: d.FileSize})
	}
	if tm.Sticker != nil {
		out = append(out, channel.MediaRef{Kind: channel.MediaSticker})
	}
	return out
}

// ref is an attachment downloaded through getFile.
func (c *Channel) ref(kind channel.MediaKind, fileID, name, mime string, size int64) channel.MediaRef {
	return channel.MediaRef{Kind: kind, Name: name, MIME: mime, Size: size, Fetch: func(ctx context.Context) (io.ReadCloser, int64, error) {
		f, err := c.apiGetFile(ctx, fileID)
		if err != nil {
			return nil, 0, err
		}
		if f.FileSize > c.intake.MaxMediaBytes() {
			return nil, f.FileSize, fmt.Errorf("%d bytes, over channels.telegram.max_media_mb", f.FileSize)
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.fileURL(f), nil)
		if err != nil {
			return nil, 0, c.netErr("download", err)
		}
		resp, err := c.client.Do(req)
		if err != nil {
			return nil, 0, c.netErr("download", err)
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, 0, fmt.Errorf("telegram: download: HTTP %d", resp.StatusCode)
		}
		return resp.Body, resp.ContentLength, nil
	}}
}
