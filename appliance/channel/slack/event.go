package slack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/perchhq/perch/appliance/channel"
)

// eventPayload is the part of an events_api envelope's payload the
// channel reads: only the fields used (parent_user_id, files, the
// rich_text mention elements among them).
type eventPayload struct {
	Type    string `json:"type"`
	EventID string `json:"event_id"`
	Event   event  `json:"event"`
	// A slash_commands envelope's payload has no type but these.
	slashPayload
}

// slashPayload is a slash command's: someone typed the app's command.
type slashPayload struct {
	Command   string `json:"command"`
	Text      string `json:"text"`
	ChannelID string `json:"channel_id"`
	UserID    string `json:"user_id"`
	TriggerID string `json:"trigger_id"`
}

// slash turns a slash command into a message to the bot: the app's own
// command (/perch) carries a chat command's name or a question, a chat
// command registered as a slash command of its own (/status) itself.
// Slack's client takes a message that starts with "/" for one of its own
// commands ("/help is not a valid command"), so on Slack the agent's chat
// commands are reached this way: "/perch status" is /status.
func (c *Channel) slash(ctx context.Context, s slashPayload) (channel.Message, bool) {
	if s.UserID == "" || s.ChannelID == "" || s.TriggerID == "" {
		return channel.Message{}, false
	}
	name := strings.TrimPrefix(s.Command, "/")
	args := strings.TrimSpace(s.Text)
	var text string
	switch first, _, _ := strings.Cut(args, " "); {
	case c.isCommand(name):
		text = strings.TrimSpace("/" + name + " " + args)
	case args == "":
		text = "/help"
	case c.isCommand(strings.TrimPrefix(first, "/")):
		text = "/" + strings.TrimPrefix(args, "/")
	default:
		text = plainIncoming(args)
	}
	// A slash command is addressed to the bot: no mention needed. It is no
	// message of the channel's, so the answer is not threaded.
	m := channel.Message{
		EventID: "slash:" + s.TriggerID, ChatID: s.ChannelID, SenderID: s.UserID, Text: text,
		IsGroup: !strings.HasPrefix(s.ChannelID, "D"), Mentioned: true,
	}
	c.identify(ctx, &m)
	return m, true
}

type event struct {
	Type         string          `json:"type"`
	Subtype      string          `json:"subtype"`
	Channel      string          `json:"channel"`
	ChannelType  string          `json:"channel_type"`
	User         string          `json:"user"`
	BotID        string          `json:"bot_id"`
	Text         string          `json:"text"`
	TS           string          `json:"ts"`
	ThreadTS     string          `json:"thread_ts"`
	ParentUserID string          `json:"parent_user_id"`
	Blocks       json.RawMessage `json:"blocks"`
	Files        []file          `json:"files"`
}

type file struct {
	ID       string `json:"id"`
	Name     string `json:"name"`
	Mimetype string `json:"mimetype"`
	Filetype string `json:"filetype"`
	Size     int64  `json:"size"`
	URL      string `json:"url_private_download"`
	// Subtype "slack_audio" is a voice clip recorded in Slack.
	Subtype string `json:"subtype"`
	// Mode "tombstone" or "hidden_by_limit": the file is not available.
	Mode string `json:"mode"`
}

// handle processes one envelope's payload and reports whether it may be
// acknowledged: true unless the message could not be made durable (then
// Slack's redelivery gets another chance).
func (c *Channel) handle(ctx context.Context, payload []byte) bool {
	var p eventPayload
	if err := json.Unmarshal(payload, &p); err != nil {
		c.log.Debug("event not understood", "err", err)
		return true
	}
	var m channel.Message
	var ok bool
	if p.Type == "" && p.Command != "" {
		m, ok = c.slash(ctx, p.slashPayload)
	} else {
		m, ok = c.message(ctx, p.Event)
	}
	if !ok {
		return true
	}
	if err := c.in.Receive(ctx, m); err != nil {
		c.log.Warn("message not received; Slack will deliver it again", "chat", m.ChatID, "err", err)
		return false
	}
	return true
}

// message turns a Slack event into a channel.Message; ok is false for
// events that are not a person's new message.
func (c *Channel) message(ctx context.Context, e event) (channel.Message, bool) {
	bot := c.identity()
	switch {
	case e.Type != "message" && e.Type != "app_mention":
		return channel.Message{}, false
	case e.Subtype != "" && e.Subtype != "file_share" && e.Subtype != "thread_broadcast":
		// Edits, deletions, joins and bot messages are not questions.
		return channel.Message{}, false
	case e.BotID != "" || e.User == "" || e.User == bot.UserID:
		return channel.Message{}, false
	}
	// One message arrives as a "message" and, when it mentions the bot, an
	// "app_mention" event with another event_id; Slack's retries keep the
	// message's ts. The channel and ts name the message itself.
	m := channel.Message{
		EventID:   e.Channel + ":" + e.TS,
		ChatID:    e.Channel,
		MessageID: e.TS,
		SenderID:  e.User,
		IsGroup:   e.Type == "app_mention" || e.ChannelType != "im",
	}
	if c.in.Seen(m.EventID) {
		return m, true // Receive drops it; no lookups for a redelivery
	}
	// In a channel every conversation with the bot is a thread: the reply
	// to a top-level message starts one, so the follow-ups share a session.
	// A direct message is a conversation of its own, answered in place.
	switch {
	case e.ThreadTS != "":
		m.ThreadID = e.ThreadTS
	case m.IsGroup:
		m.ThreadID = e.TS
	}
	text, mentioned := stripMention(e.Text, c.mentions(), mentionedInBlocks(e.Blocks, bot.UserID))
	m.Mentioned = mentioned || e.Type == "app_mention"
	m.Text = plainIncoming(text)
	m.ReplyToBot = e.ThreadTS != "" && (e.ParentUserID == bot.UserID || c.botInThread(e.Channel, e.ThreadTS))
	if m.IsGroup && !m.Mentioned && !m.ReplyToBot {
		return m, true // Receive drops it; no lookups
	}
	c.identify(ctx, &m)
	for _, f := range e.Files {
		if ref, ok := c.media(f); ok {
			m.Media = append(m.Media, ref)
		}
	}
	return m, true
}

// botInThread reports whether the bot has answered in the thread: a reply
// there is a reply to the bot, without a mention. The store keeps the
// threads it answered in (see answeredIn), apart from the session, which
// /new and the session's expiry empty; a session with messages also counts,
// for threads answered before that record was kept.
func (c *Channel) botInThread(chat, thread string) bool {
	key := chat + ":" + thread
	c.mu.Lock()
	held := c.threads.Has(key)
	c.mu.Unlock()
	if held {
		return true
	}
	if ok, err := c.in.Remembered("threads", key); err != nil {
		c.log.Warn("cannot read the threads the bot answered in; a reply there needs a mention", "err", err)
	} else if ok {
		return true
	}
	if c.store == nil {
		return false
	}
	info, err := c.store.Session(Name + ":" + key)
	return err == nil && info.Count > 0
}

// keptThreads is how many threads the store remembers the bot answered
// in: in an older one, a reply needs a mention again.
const keptThreads = 4096

// answeredIn records that the bot answered in thread, so the thread's
// replies reach it without a mention, after a restart or /new too.
func (c *Channel) answeredIn(chat, thread string) {
	if thread == "" {
		return
	}
	key := chat + ":" + thread
	c.mu.Lock()
	held := c.threads.Has(key)
	c.threads.Add(key)
	c.mu.Unlock()
	if held {
		return
	}
	if err := c.in.Remember("threads", keptThreads, key); err != nil {
		c.log.Warn("cannot record the thread the bot answered in; after /new or a restart a reply there needs a mention", "err", err)
	}
}

// mentionedInBlocks finds a rich_text user element naming the bot: the
// mention metadata Slack's clients attach.
func mentionedInBlocks(raw json.RawMessage, botID string) bool {
	if len(raw) == 0 || botID == "" {
		return false
	}
	var blocks any
	if json.Unmarshal(raw, &blocks) != nil {
		return false
	}
	var walk func(v any) bool
	walk = func(v any) bool {
		switch v := v.(type) {
		case map[string]any:
			if v["type"] == "user" && v["user_id"] == botID {
				return true
			}
			for _, x := range v {
				if walk(x) {
					return true
				}
			}
		case []any:
			for _, x := range v {
				if walk(x) {
					return true
				}
			}
		}
		return false
	}
	return walk(blocks)
}

// mentionPatterns find the bot's mention in a message. They depend only on
// the bot's identity, so they are compiled once when auth.test answers (a
// connection's start-up work), not for every message.
type mentionPatterns struct {
	bot              botIdentity
	markup, name, id *regexp.Regexp
}

// newMentionPatterns compiles the patterns of bot; nil when its user id is
// not known yet.
func newMentionPatterns(bot botIdentity) *mentionPatterns {
	if bot.UserID == "" {
		return nil
	}
	p := &mentionPatterns{bot: bot,
		markup: regexp.MustCompile(`<@` + regexp.QuoteMeta(bot.UserID) + `(?:\|[^>]*)?>` + sep),
		id:     regexp.MustCompile(`(^|\W)` + regexp.QuoteMeta(bot.UserID) + `\b` + sep),
	}
	if bot.Name != "" {
		p.name = regexp.MustCompile(`(?i)(^|[^\w@])@` + regexp.QuoteMeta(bot.Name) + `\b` + sep)
	}
	return p
}

// stripMention finds the bot's mention — Slack's <@U…> markup (or the
// block metadata), then "@name" typed as text, then the bare user id —
// and removes it with the separator after it ("@perch, what…"). The rest
// of the text is left as typed (indented code stays indented).
func stripMention(text string, p *mentionPatterns, inBlocks bool) (string, bool) {
	if p == nil {
		return strings.TrimSpace(text), inBlocks
	}
	if p.markup.MatchString(text) {
		return strings.TrimSpace(p.markup.ReplaceAllString(text, "")), true
	}
	if inBlocks {
		return strings.TrimSpace(text), true
	}
	if p.name != nil && p.name.MatchString(text) {
		return strings.TrimSpace(p.name.ReplaceAllString(text, "$1")), true
	}
	if p.id.MatchString(text) {
		return strings.TrimSpace(p.id.ReplaceAllString(text, "$1")), true
	}
	return strings.TrimSpace(text), false
}

// sep is what follows a mention and goes with it: spaces and one comma or
// colon.
const sep = `[ \t]*[,:]?[ \t]*`

var reSlackMarkup = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`<([^<>]+)>`) })

// plainIncoming turns Slack's markup in a received message into what the
// person typed: <url|label> links, <@U…> mentions, <#C…|name> channels,
// <!here>, and the &amp; &lt; &gt; escapes.
func plainIncoming(s string) string {
	s = reSlackMarkup().ReplaceAllStringFunc(s, func(m string) string {
		inner := m[1 : len(m)-1]
		target, label, hasLabel := strings.Cut(inner, "|")
		switch {
		case strings.HasPrefix(target, "@"):
			if hasLabel {
				return "@" + label
			}
			return target
		case strings.HasPrefix(target, "#"):
			if hasLabel {
				return "#" + label
			}
			return target
		case strings.HasPrefix(target, "!"):
			if hasLabel {
				return label
			}
			return "@" + strings.TrimPrefix(strings.SplitN(target, "^", 2)[0], "!")
		case hasLabel && label != target:
			return label + " (" + target + ")"
		}
		return target
	})
	return strings.NewReplacer("&lt;", "<", "&gt;", ">", "&amp;", "&").Replace(s)
}

// media describes a shared file for the intake, which downloads it with
// the size cap.
func (c *Channel) media(f file) (channel.MediaRef, bool) {
	if f.Mode == "tombstone" || f.Mode == "hidden_by_limit" {
		return channel.MediaRef{}, false
	}
	ref := channel.MediaRef{Kind: mediaKind(f), Name: f.Name, MIME: f.Mimetype, Size: f.Size}
	if ref.Kind == channel.MediaFile || f.URL == "" {
		return ref, true
	}
	target := f.URL
	ref.Fetch = func(ctx context.Context) (io.ReadCloser, int64, error) { return c.download(ctx, target) }
	return ref, true
}

func mediaKind(f file) channel.MediaKind {
	switch {
	case f.Subtype == "slack_audio":
		return channel.MediaVoice
	case strings.HasPrefix(f.Mimetype, "image/"):
		return channel.MediaImage
	case strings.HasPrefix(f.Mimetype, "audio/"):
		return channel.MediaAudio
	case strings.HasPrefix(f.Mimetype, "video/"):
		return channel.MediaVideo
	}
	return channel.MediaFile
}

// download fetches a private file with the bot token, which is sent only
// to Slack's own https hosts or the configured API host.
func (c *Channel) download(ctx context.Context, raw string) (io.ReadCloser, int64, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, 0, fmt.Errorf("slack: file URL %q: %w", raw, err)
	}
	if !tokenMayGo(c.base, u) {
		return nil, 0, fmt.Errorf("slack: file URL host %q is neither Slack's nor the API's; not sending the token there", u.Host)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Authorization", "Bearer "+c.botTok)
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, 0, fmt.Errorf("slack: downloading a file: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, 0, fmt.Errorf("slack: downloading a file: %s", resp.Status)
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html") {
		// Slack's answer to a download without access is its sign-in page.
		resp.Body.Close()
		return nil, 0, fmt.Errorf("slack: downloading a file was refused; the bot needs the files:read scope")
	}
	return resp.Body, resp.ContentLength, nil
}

func tokenMayGo(api, u *url.URL) bool {
	if u.Scheme == "https" {
		host := strings.ToLower(u.Hostname())
		if host == "slack.com" || strings.HasSuffix(host, ".slack.com") || strings.HasSuffix(host, ".slack-edge.com") {
			return true
		}
	}
	return u.Scheme == api.Scheme && strings.EqualFold(u.Host, api.Host)
}

// user is a workspace member as users.info describes them.
type user struct {
	TeamID, Name, RealName, DisplayName string
}

func (u user) display() string {
	if u.DisplayName != "" {
		return u.DisplayName
	}
	if u.RealName != "" {
		return u.RealName
	}
	return u.Name
}

// identify sets the sender's name and username from users.info.
func (c *Channel) identify(ctx context.Context, m *channel.Message) {
	u, ok, known := c.user(ctx, m.SenderID)
	switch {
	case !known:
		m.UsernameUnknown = true
	case ok:
		m.SenderName = u.display()
		// A username names a person only within its workspace: a Slack
		// Connect guest from another organisation may hold the same one
		// as someone on allow_from. Ids stay unique everywhere.
		if u.TeamID == c.identity().TeamID {
			m.Username = u.Name
		}
	}
}

// user looks a sender up (cached), for allow_from by username and the
// name the model sees. Without the users:read scope the id is all there
// is: Slack's refusal (ok false) is an answer and is kept, but a failure
// to get one (unreachable, 429, 5xx, slow) is not: known is false, and the
// next message asks again. Keeping it for the cache's hour silenced a
// person allowed by name after one failed lookup.
func (c *Channel) user(ctx context.Context, id string) (u user, ok, known bool) {
	if u, ok, cached := c.users.get(id); cached {
		return u, ok, true
	}
	lctx, cancel := context.WithTimeout(ctx, 1500*time.Millisecond)
	defer cancel()
	u, err := c.api.userInfo(lctx, id)
	if err != nil {
		var refused *apiError
		if !errors.As(err, &refused) {
			c.log.Info("users.info failed; the sender's name is unknown for now", "user", id, "err", err)
			return user{}, false, false
		}
		c.log.Debug("users.info refused; the sender is known by id only", "user", id, "err", err)
		c.users.put(id, user{}, false)
		return user{}, false, true
	}
	c.users.put(id, u, true)
	return u, true, true
}
