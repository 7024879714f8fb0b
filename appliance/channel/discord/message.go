package discord

import (
	"context"
	"regexp"
	"slices"
	"strings"
	"sync"

	"github.com/perchhq/perch/appliance/channel"
)

// user is the part of a Discord user the channel reads.
type user struct {
	ID         string `json:"id"`
	Username   string `json:"username"`
	GlobalName string `json:"global_name"`
	Bot        bool   `json:"bot"`
}

// message is the part of a MESSAGE_CREATE the channel reads.
type message struct {
	ID        string  `json:"id"`
	ChannelID string  `json:"channel_id"`
	GuildID   string  `json:"guild_id"`
	Author    *user   `json:"author"`
	Content   string  `json:"content"`
	Mentions  []*user `json:"mentions"`
	// MentionRoles are the roles mentioned (<@&id>); picking the bot in
	// a server's @ list may pick its role rather than its user.
	MentionRoles []string `json:"mention_roles"`
	Member       *struct {
		Nick string `json:"nick"`
	} `json:"member"`
	Type              int           `json:"type"`
	Flags             int           `json:"flags"`
	Attachments       []*attachment `json:"attachments"`
	ReferencedMessage *struct {
		Author *user `json:"author"`
	} `json:"referenced_message"`
	StickerItems []*struct {
		Name string `json:"name"`
	} `json:"sticker_items"`
}

// attachment is a file on a message; URL is signed and needs no token.
type attachment struct {
	Filename    string `json:"filename"`
	ContentType string `json:"content_type"`
	Size        int64  `json:"size"`
	URL         string `json:"url"`
}

// Message types a person's message has; the others are joins, pins,
// boosts and the like.
const (
	messageTypeDefault = 0
	messageTypeReply   = 19
)

// flagVoiceMessage is IS_VOICE_MESSAGE.
const flagVoiceMessage = 1 << 13

// message turns a MESSAGE_CREATE into a channel.Message; ok is false for
// what is not a person's message (the bot's own, other bots', joins, pins).
func (c *Channel) message(ctx context.Context, m *message) (channel.Message, bool) {
	bot := c.identity()
	switch {
	case m.Author == nil || m.Author.Bot || m.Author.ID == bot.ID:
		return channel.Message{}, false
	case m.Type != messageTypeDefault && m.Type != messageTypeReply:
		return channel.Message{}, false
	}
	// A thread is a channel of its own on Discord: its id is the chat, and
	// replies posted there stay in the thread.
	out := channel.Message{
		EventID:   m.ID,
		ChatID:    m.ChannelID,
		MessageID: m.ID,
		SenderID:  m.Author.ID,
		Username:  m.Author.Username,
		IsGroup:   m.GuildID != "",
	}
	out.SenderName = m.Author.GlobalName
	if m.Member != nil && m.Member.Nick != "" {
		out.SenderName = m.Member.Nick
	}
	if out.SenderName == "" {
		out.SenderName = m.Author.Username
	}
	mentioned := false
	for _, u := range m.Mentions {
		if u != nil && u.ID == bot.ID {
			mentioned = true
		}
	}
	out.Text, out.Mentioned = stripMention(m.Content, c.mentions(), mentioned)
	if !out.Mentioned && m.GuildID != "" && len(m.MentionRoles) > 0 {
		if r := c.botRole(ctx, m.GuildID); r != "" && slices.Contains(m.MentionRoles, r) {
			out.Text, out.Mentioned = cutMarkup(out.Text, "<@&"+r+">"), true
		}
	}
	out.ReplyToBot = m.ReferencedMessage != nil && m.ReferencedMessage.Author != nil && m.ReferencedMessage.Author.ID == bot.ID
	for _, a := range m.Attachments {
		if a == nil {
			continue
		}
		ref := channel.MediaRef{Kind: attachmentKind(m, a), Name: a.Filename, MIME: a.ContentType, Size: a.Size}
		if ref.Kind != channel.MediaFile && a.URL != "" {
			ref.Fetch = c.fetch(a.URL)
		}
		out.Media = append(out.Media, ref)
	}
	for _, s := range m.StickerItems {
		if s != nil {
			out.Media = append(out.Media, channel.MediaRef{Kind: channel.MediaSticker, Name: s.Name})
		}
	}
	return out, true
}

func attachmentKind(m *message, a *attachment) channel.MediaKind {
	switch ct := a.ContentType; {
	case m.Flags&flagVoiceMessage != 0:
		return channel.MediaVoice
	case strings.HasPrefix(ct, "image/"):
		return channel.MediaImage
	case strings.HasPrefix(ct, "audio/"):
		return channel.MediaAudio
	case strings.HasPrefix(ct, "video/"):
		return channel.MediaVideo
	}
	return channel.MediaFile
}

// mentionPatterns find the bot's mention in a message. They depend only on
// the bot's identity, so they are compiled once when READY names the bot
// (a connection's start-up work), not for every message.
type mentionPatterns struct {
	bot    readyUser
	markup *regexp.Regexp
	names  []*regexp.Regexp // global name, then username
	id     *regexp.Regexp
}

// newMentionPatterns compiles the patterns of bot; nil when its id is not
// known yet.
func newMentionPatterns(bot readyUser) *mentionPatterns {
	if bot.ID == "" {
		return nil
	}
	p := &mentionPatterns{bot: bot,
		markup: regexp.MustCompile(`<@!?` + regexp.QuoteMeta(bot.ID) + `>` + sep),
		id:     regexp.MustCompile(`(^|\D)` + regexp.QuoteMeta(bot.ID) + `\b` + sep),
	}
	for _, name := range []string{bot.GlobalName, bot.Username} {
		if name != "" {
			p.names = append(p.names, regexp.MustCompile(`(?i)(^|[^\w@])@`+regexp.QuoteMeta(name)+`\b`+sep))
		}
	}
	return p
}

// stripMention finds the bot's mention — the mention metadata (the
// mentions list, <@id> or <@!id> markup), then "@name" typed as text
// (username or display name), then the bare user id — and removes it with
// the separator after it. The rest of the text is left as typed.
//
// A mention inside code (`<@id>` in backticks) is text Discord shows as
// typed and does not notify: it neither counts nor is removed.
func stripMention(text string, p *mentionPatterns, inMetadata bool) (string, bool) {
	if p == nil {
		return strings.TrimSpace(text), inMetadata
	}
	shown := blankCode(text)
	if p.markup.MatchString(shown) {
		return strings.TrimSpace(replaceOutside(p.markup, text, shown, "")), true
	}
	if inMetadata {
		return strings.TrimSpace(text), true
	}
	for _, re := range p.names {
		if re.MatchString(shown) {
			return strings.TrimSpace(replaceOutside(re, text, shown, "$1")), true
		}
	}
	if p.id.MatchString(shown) {
		return strings.TrimSpace(replaceOutside(p.id, text, shown, "$1")), true
	}
	return strings.TrimSpace(text), false
}

// blankCode is text with every code span and block blanked out, byte for
// byte, so that matches in it have the same places in text.
func blankCode(text string) string {
	if !strings.Contains(text, "`") {
		return text
	}
	b := []byte(text)
	for i := 0; i < len(b); {
		if b[i] != '`' {
			i++
			continue
		}
		n := 1
		for i+n < len(b) && b[i+n] == '`' {
			n++
		}
		fence := strings.Repeat("`", n)
		end := strings.Index(text[i+n:], fence)
		if end < 0 {
			break // an unclosed run of backticks is text
		}
		stop := i + n + end + n
		for j := i; j < stop; j++ {
			if b[j] != '\n' {
				b[j] = ' '
			}
		}
		i = stop
	}
	return string(b)
}

// replaceOutside replaces re's matches in shown (text with code blanked)
// in text, expanding repl against text.
func replaceOutside(re *regexp.Regexp, text, shown, repl string) string {
	var out []byte
	last := 0
	for _, m := range re.FindAllStringSubmatchIndex(shown, -1) {
		out = append(out, text[last:m[0]]...)
		out = re.ExpandString(out, repl, text, m)
		last = m[1]
	}
	return string(append(out, text[last:]...))
}

// cutMarkup removes every markup from text with the separator after it, as
// stripMention does with the bot's user mention.
func cutMarkup(text, markup string) string {
	var b strings.Builder
	for {
		before, after, found := strings.Cut(text, markup)
		b.WriteString(before)
		if !found {
			break
		}
		after = strings.TrimLeft(after, " \t")
		if after != "" && (after[0] == ',' || after[0] == ':') {
			after = after[1:]
		}
		text = strings.TrimLeft(after, " \t")
	}
	return strings.TrimSpace(b.String())
}

// sep is what follows a mention and goes with it: spaces and one comma or
// colon.
const sep = `[ \t]*[,:]?[ \t]*`

var (
	reUnderBold = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`(^|[^\w_])__([^_\n]+?)__([^\w_]|$)`) })
	reDeepHead  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^ {0,3}#{4,6}\s+(.*?)\s*#*\s*$`) })
)

// discordMarkdown renders Markdown for Discord, which shows most of it as
// is. What differs: __text__ is bold in Markdown but underlined on
// Discord, and only #, ## and ### are headings. Code is left alone.
func discordMarkdown(md string) string {
	var b strings.Builder
	b.Grow(len(md))
	fence := ""
	for i, line := range strings.Split(md, "\n") {
		if i > 0 {
			b.WriteByte('\n')
		}
		if opens, closes := channel.Fences(fence, line); opens != "" || closes {
			// Discord knows only backtick fences.
			m, _, _ := channel.Fence(line)
			b.WriteString(strings.Replace(line, m, strings.Repeat("`", len(m)), 1))
			fence = opens
			continue
		}
		if fence != "" {
			b.WriteString(line)
			continue
		}
		if m := reDeepHead().FindStringSubmatch(line); m != nil {
			line = "**" + m[1] + "**"
		}
		b.WriteString(outsideCode(line, func(s string) string {
			s = reUnderBold().ReplaceAllString(s, "$1**$2**$3")
			return reUnderBold().ReplaceAllString(s, "$1**$2**$3")
		}))
	}
	return b.String()
}

// outsideCode applies fn to the parts of line outside `code` spans.
func outsideCode(line string, fn func(string) string) string {
	if !strings.Contains(line, "`") {
		return fn(line)
	}
	var b strings.Builder
	for {
		i := strings.IndexByte(line, '`')
		if i < 0 {
			break
		}
		j := strings.IndexByte(line[i+1:], '`')
		if j < 0 {
			break
		}
		b.WriteString(fn(line[:i]))
		b.WriteString(line[i : i+j+2])
		line = line[i+j+2:]
	}
	b.WriteString(fn(line))
	return b.String()
}
