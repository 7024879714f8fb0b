package channel

import (
	"context"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MediaKind is what an attachment is. The kinds are the ones a chat message
// can carry; each is saved under a fixed name (image.jpg, audio.m4a,
// video.mp4) or, for files, described by its metadata only.
type MediaKind string

// The kinds of media.
const (
	MediaImage   MediaKind = "image"
	MediaAudio   MediaKind = "audio"
	MediaVideo   MediaKind = "video"
	MediaVoice   MediaKind = "voice"
	MediaFile    MediaKind = "file"
	MediaSticker MediaKind = "sticker"
)

// FetchFunc opens an attachment's content for download. size is the length
// the platform announces (-1 when unknown); the framework stops reading past
// the channel's size cap whatever it says.
type FetchFunc func(ctx context.Context) (body io.ReadCloser, size int64, err error)

// MediaRef is an attachment of an incoming message, not yet downloaded.
type MediaRef struct {
	Kind MediaKind
	// Name is the file's own name (documents), shown to the model.
	Name string
	MIME string
	// Size is the size the platform announces, 0 when unknown: a file
	// announced over the cap is not downloaded at all.
	Size int64
	// Fetch downloads the content; nil for kinds saved as metadata only
	// (file, sticker).
	Fetch FetchFunc
}

// Message is one platform message, parsed by the platform's package and
// handed to Intake.Receive.
type Message struct {
	// EventID is the platform's unique id of the delivery (Telegram's
	// update_id, LINE's webhookEventId, Slack's event_id, Discord's message
	// id): a redelivery with the same id is dropped.
	EventID string
	// ChatID is where the answer goes (a user id for one-to-one chats on
	// LINE, a channel id on Slack and Discord, a chat id on Telegram).
	ChatID string
	// ThreadID is the thread or forum topic, when the platform has them;
	// it becomes part of the session key.
	ThreadID string
	// MessageID is the platform's id of this message: the answer quotes it.
	MessageID  string
	SenderID   string
	SenderName string
	// Username is the sender's handle where the platform has one
	// (Telegram's @name): allow_from accepts it as well as the id.
	Username string
	// UsernameUnknown is true when the platform could not tell the
	// username just now (Slack's users.info failed): a sender allow_from
	// may list by name is then not refused, but left for the platform to
	// deliver again.
	UsernameUnknown bool
	// Text is the message with the bot's mention removed.
	Text string
	// IsGroup is true for chats with more than the sender and the bot.
	IsGroup bool
	// Mentioned is true when the message names the bot: mention metadata
	// first, then the bot's display name in the text, then its user id.
	Mentioned bool
	// ReplyToBot is true when the message replies to one of the bot's.
	ReplyToBot bool
	Media      []MediaRef
}

// SessionKey is "<channel>:<chat>" plus ":<thread>" when the message is in a
// thread, so every chat (and thread) is a conversation of its own.
func (m Message) SessionKey(channel string) string {
	k := channel + ":" + m.ChatID
	if m.ThreadID != "" {
		k += ":" + m.ThreadID
	}
	return k
}

// StripName finds name (or @name) as a whole word in text, regardless of
// case, and returns text without it and the punctuation that addressed it
// ("Perch, what's the time?" → "what's the time?"). Platforms use it for the
// display-name and user-id steps of mention detection.
func StripName(text, name string) (string, bool) {
	name = strings.TrimSpace(name)
	if name == "" {
		return text, false
	}
	lower, ln := strings.ToLower(text), strings.ToLower(name)
	for from := 0; from < len(lower); {
		i := strings.Index(lower[from:], ln)
		if i < 0 {
			return text, false
		}
		i += from
		start, end := i, i+len(ln)
		if start > 0 && lower[start-1] == '@' {
			start--
		}
		if wordBoundary(lower, start-1) && wordBoundary(lower, end) {
			// Drop the address's punctuation: "Perch," "Perch:" "@perch!".
			for end < len(text) && strings.ContainsRune(",:;!", rune(text[end])) {
				end++
			}
			return Cut(text, start, end), true
		}
		from = i + 1
	}
	return text, false
}

// Cut returns text without text[start:end] (a mention of the bot). The gap
// closes to one space within a line and to nothing at a line's edge; the
// rest keeps its line breaks and indents, which a code block or a list the
// user sent needs to mean what it meant.
func Cut(text string, start, end int) string {
	before := strings.TrimRight(text[:start], " \t")
	after := strings.TrimLeft(text[end:], " \t")
	sep := " "
	if before == "" || after == "" || strings.HasSuffix(before, "\n") || strings.HasPrefix(after, "\n") || strings.HasPrefix(after, "\r") {
		sep = ""
	}
	out := strings.TrimLeft(before+sep+after, "\r\n")
	return strings.TrimRight(out, " \t\r\n")
}

// wordBoundary reports whether byte i of s is outside a word (or outside s).
func wordBoundary(s string, i int) bool {
	if i < 0 || i >= len(s) {
		return true
	}
	r, _ := utf8.DecodeRuneInString(s[i:])
	if !utf8.RuneStart(s[i]) {
		// Inside a multi-byte rune: look back for its start.
		j := i
		for j > 0 && !utf8.RuneStart(s[j]) {
			j--
		}
		r, _ = utf8.DecodeRuneInString(s[j:])
	}
	return !(unicode.IsLetter(r) || unicode.IsDigit(r) || r == '_')
}
