// Package discord is the Discord channel: the gateway WebSocket (identify
// with the message content intent, heartbeats, resume after a drop, a
// connection whose heartbeats go unacknowledged replaced) for messages
// in, a small REST client of its own (api.go) for replies, which quote
// the message they answer, and for the messages written while the bot had
// no session, fetched at each new one (catchup.go).
package discord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/channel"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/version"
)

// Name is the platform's key under channels in the config.
const Name = "discord"

// DefaultAPIBase is Discord's REST API.
const DefaultAPIBase = "https://discord.com/api/v10"

// textLimit is Discord's limit on a message's content, in characters.
const textLimit = 2000

// uploadMax is the largest file a bot may upload without a boosted server.
const uploadMax = 10 << 20

// Platform is Discord in the channel table.
var Platform = channel.Platform{Name: Name, New: New}

// options are the timings; tests shorten them.
type options struct {
	Backoff     channel.Backoff
	SendBackoff channel.Backoff
	// IntakeBackoff spaces the attempts to store a received message.
	IntakeBackoff channel.Backoff
	StartWait     time.Duration
	HelloTimeout  time.Duration
}

func defaultOptions() options {
	return options{
		Backoff:     channel.Backoff{Min: time.Second, Max: 5 * time.Minute},
		SendBackoff: channel.Backoff{Min: 500 * time.Millisecond, Max: 30 * time.Second},
		// Five tries within about half a minute.
		IntakeBackoff: channel.Backoff{Min: 2 * time.Second, Max: 16 * time.Second},
		StartWait:     15 * time.Second, HelloTimeout: 20 * time.Second,
	}
}

// Channel is a running Discord connection.
type Channel struct {
	in     *channel.Intake
	state  *channel.State
	log    *slog.Logger
	rest   *restClient
	files  *http.Client
	token  string
	opts   options
	format channel.Format
	sender *channel.Sender

	mu      sync.Mutex
	bot     readyUser
	mention *mentionPatterns // of bot
	// roles are the bot's own role per server, asked for when a message
	// mentions roles; the worker alone uses them.
	roles map[string]botRole

	// events carries MESSAGE_CREATE payloads from the gateway's reader to
	// the worker, so a slow store never stalls heartbeat acks. A nil one
	// marks a new session: the worker fetches what was missed first.
	events chan json.RawMessage
	// cur is the mark of the messages seen (catchup.go); the worker
	// alone uses it after Start.
	cur      cursor
	curDirty bool
	cancel   context.CancelFunc
	done     chan struct{}
}

// New builds the Discord channel of d; it connects in Start.
func New(d channel.Deps) (channel.Channel, error) { return newChannel(d, defaultOptions()) }

func newChannel(d channel.Deps, o options) (*Channel, error) {
	s, ok := d.Section.Settings.(*config.BotChannel)
	if !ok {
		return nil, fmt.Errorf("discord: settings are %T, not a bot channel section", d.Section.Settings)
	}
	base, err := apiBase(d.Section.APIBase)
	if err != nil {
		return nil, err
	}
	token := strings.TrimPrefix(strings.TrimSpace(s.Token.Value()), "Bot ")
	rest := newREST(&http.Client{Timeout: 30 * time.Second}, base.String(), token, version.Get().Version)
	c := &Channel{
		rest: rest, token: token, opts: o, files: &http.Client{Timeout: 5 * time.Minute},
		events: make(chan json.RawMessage, 256),
	}
	c.in = channel.NewIntake(d, channel.IntakeOptions{Title: "Discord", Typing: c.typing, TypingEvery: 8 * time.Second})
	c.state = c.in.State()
	c.log = c.in.Log()
	c.sender = c.in.Sender()
	c.sender.Backoff = o.SendBackoff
	c.format = channel.Format{Limit: textLimit, Render: discordMarkdown}
	return c, nil
}

// apiBase checks channels.discord.api_base.
func apiBase(raw string) (*url.URL, error) {
	if raw == "" {
		raw = DefaultAPIBase
	}
	u, err := url.Parse(strings.TrimSuffix(raw, "/"))
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("discord: channels.discord.api_base %q is not an http(s) URL; leave it empty for %s", config.ShowURL(raw), DefaultAPIBase)
	}
	return u, nil
}

// Name is the channel's name.
func (c *Channel) Name() string { return Name }

// Check is the /ready check.
func (c *Channel) Check(context.Context) (bool, string) { return c.state.Check() }

func (c *Channel) identity() readyUser {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bot
}

// mentions are the patterns of the bot's mention; nil until READY.
func (c *Channel) mentions() *mentionPatterns {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mention
}

// Start connects. A token Discord refuses (401, close 4004) or a message
// content intent the bot may not use (4014) is an error naming what to
// fix, which stops the gateway; Discord merely unreachable is not: the
// channel keeps trying and its check says so.
func (c *Channel) Start(ctx context.Context) error {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	first := make(chan error, 1)
	var once sync.Once
	report := func(err error) bool {
		sent := false
		once.Do(func() { first <- err; sent = true })
		return sent
	}
	gw := newGateway(gatewayConfig{
		Token: c.token,
		URL:   c.gatewayURL,
		Dispatch: func(ctx context.Context, typ string, data json.RawMessage) {
			if typ != "MESSAGE_CREATE" {
				return
			}
			select {
			case c.events <- data:
			case <-ctx.Done():
			}
		},
		Ready: func(u readyUser) {
			p := c.mentions()
			if p == nil || p.bot != u {
				p = newMentionPatterns(u)
			}
			c.mu.Lock()
			c.bot, c.mention = u, p
			c.mu.Unlock()
			// Ahead of the session's first dispatch: what was written
			// without a session is received before what comes after.
			select {
			case c.events <- nil:
			case <-runCtx.Done():
			}
		},
		Connected: func(ok bool, err error) {
			if ok {
				c.state.Connected()
				report(nil)
				return
			}
			if err != nil && runCtx.Err() == nil {
				c.state.Disconnected(fmt.Sprintf("Discord connection down: %v; reconnecting", err))
				c.state.Fail(err)
				var ge *gatewayError
				if !errors.As(err, &ge) || !ge.Fatal {
					c.log.Warn("Discord connection down; reconnecting", "err", err)
					report(nil)
				}
			}
		},
		Log:          c.log,
		Backoff:      c.opts.Backoff,
		HelloTimeout: c.opts.HelloTimeout,
	})
	c.cancel, c.done = cancel, make(chan struct{})
	c.loadCursor()
	var wg sync.WaitGroup
	wg.Go(func() { c.work(runCtx) })
	go func() {
		defer close(c.done)
		defer wg.Wait()
		err := gw.run(runCtx)
		if err != nil && runCtx.Err() == nil {
			err = fatalError(err)
			c.state.Disconnected(err.Error())
			if !report(err) {
				c.log.Error("Discord channel stopped", "err", err)
			}
		}
		cancel()
	}()
	late, err := channel.AwaitFirst(ctx, first, c.opts.StartWait)
	if err != nil {
		cancel()
		<-c.done
		return err
	}
	if late {
		c.log.Warn("Discord has not answered yet; still trying in the background")
	}
	return nil
}

// fatalError names the config key to fix in a refusal.
func fatalError(err error) error {
	var ge *gatewayError
	if errors.As(err, &ge) && ge.Auth {
		return fmt.Errorf("%w; set channels.discord.token to the bot token from the developer portal (Bot → Reset Token)", err)
	}
	return err
}

// Stop closes the connection (ending the session, so the bot shows
// offline at once) and waits for its goroutines.
func (c *Channel) Stop(context.Context) error {
	if c.cancel == nil {
		return nil
	}
	c.cancel()
	<-c.done
	return nil
}

// gatewayURL asks GET /gateway/bot where to connect; it also proves the
// token before the gateway does.
func (c *Channel) gatewayURL(ctx context.Context) (string, error) {
	u, err := c.rest.gatewayBot(ctx)
	if err != nil {
		if tokenRejected(err) {
			return "", &gatewayError{Fatal: true, Auth: true, Err: errors.New("discord: Discord refused the bot token (401 on GET /gateway/bot)")}
		}
		return "", fmt.Errorf("discord: cannot reach Discord: %w", err)
	}
	if u == "" {
		return "", errors.New("discord: GET /gateway/bot named no gateway")
	}
	return u, nil
}

// work turns the gateway's messages into channel messages, in order.
func (c *Channel) work(ctx context.Context) {
	defer c.saveCursor()
	// save fires cursorSaveEvery after the cursor first changed since its
	// last write; nil while it is unchanged, so an idle board never wakes.
	var save <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-save:
			c.saveCursor()
			save = nil
		case data := <-c.events:
			if ctx.Err() != nil {
				return // stopping: what was queued is fetched at the next session
			}
			if data == nil {
				c.catchUp(ctx)
			} else {
				var m message
				if err := json.Unmarshal(data, &m); err != nil {
					c.log.Debug("MESSAGE_CREATE not understood", "err", err)
					continue
				}
				c.handle(ctx, &m)
			}
			if c.curDirty && save == nil {
				save = time.After(cursorSaveEvery)
			}
		}
	}
}

// handle receives m if it is a person's message, moves the cursor past
// it, and reports whether it was received. A chat counts as talked in
// when its message reaches the agent: a stranger answered with a pairing
// code would otherwise push the owner's chats out of the list.
func (c *Channel) handle(ctx context.Context, m *message) bool {
	msg, ok := c.message(ctx, m)
	addressed := ok && (!msg.IsGroup || msg.Mentioned || msg.ReplyToBot)
	talked := addressed && c.in.Admits(msg)
	if ok {
		c.receive(ctx, msg)
	}
	if ctx.Err() != nil {
		// Abandoned by the stop (not stored, or a mention not checked):
		// the mark stays before it, so the next session fetches it.
		return false
	}
	changed, added := c.cur.saw(m, talked, time.Now())
	if addressed && !talked && c.cur.waiting(m, time.Now()) {
		changed = true
	}
	c.curDirty = c.curDirty || changed
	if added {
		c.saveCursor()
	}
	return ok
}

// receiveTries bounds the attempts to store one received message.
const receiveTries = 5

// receive hands msg to the intake, again after a failure (a store write
// that failed): Discord delivers a message once, and the gateway's
// sequence has moved past it, so nothing brings it back. The messages
// after it wait meanwhile, keeping their order.
func (c *Channel) receive(ctx context.Context, msg channel.Message) {
	b := c.opts.IntakeBackoff
	for try := 1; ; try++ {
		err := c.in.Receive(ctx, msg)
		if err == nil || ctx.Err() != nil {
			return
		}
		if try == receiveTries {
			c.log.Error("a Discord message is lost: it could not be stored, and Discord does not deliver it again; err says why the database refused it (a full or failing disk)",
				"chat", msg.ChatID, "sender", msg.SenderID, "message", msg.MessageID, "tries", try, "err", err)
			return
		}
		wait := b.Next()
		c.log.Warn("a Discord message could not be stored; trying again", "chat", msg.ChatID, "message", msg.MessageID, "try", try, "in", wait, "err", err)
		if !channel.Sleep(ctx, wait) {
			return
		}
	}
}

// botRole is the bot's managed role in a server (id "" when it has none)
// and when the server's roles said so.
type botRole struct {
	id string
	at time.Time
}

// roleTTL is how long a server's bot role is trusted: the role is made
// anew when the bot is removed and added again.
const roleTTL = 10 * time.Minute

// botRole returns the id of the bot's managed role in guild, "" when it
// has none or Discord cannot say. The GUILDS intent would bring every
// server's roles at each connect (and every channel and role change
// after); asking for one server's roles when a message mentions a role
// costs a call per server every roleTTL at most.
func (c *Channel) botRole(ctx context.Context, guild string) string {
	if r, ok := c.roles[guild]; ok && time.Since(r.at) < roleTTL {
		return r.id
	}
	bot := c.identity().ID
	if bot == "" {
		return ""
	}
	rctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	roles, err := c.rest.guildRoles(rctx, guild)
	if err != nil {
		c.log.Warn("cannot tell whether a role mentioned is the bot's own: its server's roles did not come; the message counts as not mentioning the bot",
			"guild", guild, "err", err)
		return ""
	}
	r := botRole{at: time.Now()}
	for _, ro := range roles {
		if ro.Managed && ro.Tags != nil && ro.Tags.BotID == bot {
			r.id = ro.ID
		}
	}
	if c.roles == nil || len(c.roles) >= 256 {
		c.roles = map[string]botRole{}
	}
	c.roles[guild] = r
	return r.id
}

// Send posts out in its channel, the first part as a reply to the
// message it answers, split at 2,000 characters.
func (c *Channel) Send(ctx context.Context, out bus.Outbound) error {
	// The first unit, which answers the message, may have gone out in an
	// earlier attempt.
	replied := out.Delivered > 0
	var parts []channel.Part
	if strings.TrimSpace(out.Text) != "" {
		parts = channel.Prepare(out.Text, c.format)
		err := c.sender.SendParts(ctx, out.ChatID, parts, out.Delivered, c.format, func(ctx context.Context, text string, formatted bool) error {
			data := messageSend{Content: text, AllowedMentions: noPings()}
			if !replied && out.ReplyTo != "" {
				data.Reference = reference(out)
			}
			err := c.rest.createMessage(ctx, out.ChatID, data, nil)
			if err == nil {
				replied = true
			}
			return classify(err)
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
		var up *upload
		content := ""
		if strings.HasPrefix(m.URL, "https://") || strings.HasPrefix(m.URL, "http://") {
			// Discord shows a picture at an address itself (an embed):
			// the address is the message.
			content = m.URL
		} else {
			f, err := channel.OpenMedia(m, uploadMax)
			if err != nil {
				c.log.Warn("a file could not be sent", "chat", out.ChatID, "err", err)
				c.state.Fail(fmt.Errorf("sending a file to chat %s: %w", out.ChatID, err))
				continue
			}
			up = &upload{Name: f.Name, MIME: f.MIME, Data: f.Data}
		}
		err := c.sender.Do(ctx, "upload", func(ctx context.Context) error {
			data := messageSend{Content: content, AllowedMentions: noPings()}
			if !replied && out.ReplyTo != "" {
				data.Reference = reference(out)
			}
			err := c.rest.createMessage(ctx, out.ChatID, data, up)
			if err == nil {
				replied = true
			}
			return classify(err)
		})
		if err != nil {
			c.log.Warn("sending a file failed", "chat", out.ChatID, "err", err)
			c.state.Fail(fmt.Errorf("sending a file to chat %s failed: %w", out.ChatID, err))
			return channel.Partial(unit, err)
		}
	}
	return nil
}

// noPings keeps the model's text from pinging @everyone, roles or users;
// the person answered is still notified by the reply.
func noPings() *allowedMentions {
	return &allowedMentions{Parse: []string{}, RepliedUser: true}
}

func reference(out bus.Outbound) *messageReference {
	no := false
	// fail_if_not_exists false: a question deleted meanwhile still gets
	// its answer, just not as a reply.
	return &messageReference{MessageID: out.ReplyTo, ChannelID: out.ChatID, FailIfNotExists: &no}
}

// classify turns a REST error into what the sender should do: a rate
// limit is waited out, a 5xx or no answer retried, an Invalid Form Body
// about the length split smaller, one about anything else (the markup)
// sent again as plain text, and every other refusal given up.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var rl *rateLimitError
	if errors.As(err, &rl) {
		return channel.RetryAfter(rl.RetryAfter, err)
	}
	var ae *apiError
	if errors.As(err, &ae) {
		switch {
		case ae.Status >= 500:
			return channel.Fail(channel.Transient, err)
		case ae.Code == 50035 && ae.hasDetail("BASE_TYPE_MAX_LENGTH"):
			return channel.Fail(channel.TooLong, err)
		case ae.Code == 50035:
			return channel.Fail(channel.BadFormat, err)
		default:
			return channel.Fail(channel.Permanent, err)
		}
	}
	return channel.Fail(channel.Transient, err)
}

// typing shows "perch is typing…" (it lasts 10 s or until the bot posts).
func (c *Channel) typing(ctx context.Context, in bus.Inbound) error {
	return c.rest.triggerTyping(ctx, in.ChatID)
}

// fetch downloads an attachment from Discord's CDN (no token: the URL is
// signed).
func (c *Channel) fetch(target string) channel.FetchFunc {
	return func(ctx context.Context) (io.ReadCloser, int64, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, target, nil)
		if err != nil {
			return nil, 0, err
		}
		resp, err := c.files.Do(req)
		if err != nil {
			return nil, 0, fmt.Errorf("discord: downloading an attachment: %w", err)
		}
		if resp.StatusCode != http.StatusOK {
			resp.Body.Close()
			return nil, 0, fmt.Errorf("discord: downloading an attachment: %s", resp.Status)
		}
		return resp.Body, resp.ContentLength, nil
	}
}
