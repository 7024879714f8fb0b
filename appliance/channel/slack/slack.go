// Package slack is the Slack channel: Socket Mode, so the board needs no
// public URL. It opens the connection (apps.connections.open with the
// app-level token, then the WebSocket it names) and replaces it when Slack
// stops pinging or asks for a reconnect, acknowledges every envelope
// within Slack's 3 seconds, turns message events into channel.Messages,
// and answers with chat.postMessage in the thread the message came from.
//
// The Web API client and the Socket Mode loop are this package's own, over
// net/http and gorilla/websocket: the channel uses eight Web API methods
// and five kinds of Socket Mode frame, and a full SDK cost 640 KiB of the
// stripped arm64 binary, which has a 12 MiB budget.
package slack

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/channel"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/store"
)

// Name is the platform's key under channels in the config.
const Name = "slack"

// DefaultAPIBase is Slack's Web API.
const DefaultAPIBase = "https://slack.com/api/"

// textLimit is where a reply is split: Slack advises at most 4,000
// characters of text per message and truncates beyond 40,000.
const textLimit = 4000

// Platform is Slack in the channel table.
var Platform = channel.Platform{Name: Name, New: New}

// options are the timings; tests shorten them.
type options struct {
	// PingTimeout: Slack pings every few seconds; a connection without a
	// ping for this long is replaced.
	PingTimeout time.Duration
	// AckWithin: an envelope is acknowledged when its message is durable,
	// or after this long whatever the work still to do, as Slack resends
	// envelopes not acknowledged within 3 s.
	AckWithin time.Duration
	// StartWait bounds how long Start waits for the first connection.
	StartWait time.Duration
	// StableAfter is how long a connection must last for its end to be
	// normal, replaced at once; one that ends sooner (Slack greets it,
	// then drops it) is retried with backoff.
	StableAfter time.Duration
	Backoff     channel.Backoff
	// Send tunes the sender's retries.
	SendBackoff channel.Backoff
}

func defaultOptions() options {
	return options{
		PingTimeout: 30 * time.Second, AckWithin: 2500 * time.Millisecond, StartWait: 15 * time.Second, StableAfter: 30 * time.Second,
		Backoff:     channel.Backoff{Min: time.Second, Max: 5 * time.Minute},
		SendBackoff: channel.Backoff{Min: 500 * time.Millisecond, Max: 30 * time.Second},
	}
}

// Channel is a running Slack connection.
type Channel struct {
	in     *channel.Intake
	state  *channel.State
	log    *slog.Logger
	api    *webAPI
	http   *http.Client
	base   *url.URL
	botTok string
	store  *store.DB
	opts   options
	format channel.Format
	sender *channel.Sender
	users  *userCache
	// isCommand names the agent's chat commands (/perch status).
	isCommand func(name string) bool

	mu      sync.Mutex
	bot     botIdentity
	mention *mentionPatterns // of bot
	threads *channel.Recent  // threads answered in lately (the store has more)

	cancel context.CancelFunc
	done   chan struct{}
}

// botIdentity is who the bot is in the workspace (auth.test).
type botIdentity struct {
	UserID string
	Name   string
	TeamID string
}

// New builds the Slack channel of d; it connects in Start.
func New(d channel.Deps) (channel.Channel, error) { return newChannel(d, defaultOptions()) }

func newChannel(d channel.Deps, o options) (*Channel, error) {
	s, ok := d.Section.Settings.(*config.SlackChannel)
	if !ok {
		return nil, fmt.Errorf("slack: settings are %T, not the slack section", d.Section.Settings)
	}
	base, err := apiBase(d.Section.APIBase)
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: 30 * time.Second}
	c := &Channel{
		http: hc, base: base, botTok: s.BotToken.Value(), store: d.Store, opts: o,
		users: newUserCache(512, time.Hour), threads: channel.NewRecent(512),
	}
	c.isCommand = d.IsCommand
	if c.isCommand == nil {
		c.isCommand = func(string) bool { return false }
	}
	c.api = &webAPI{http: hc, base: base, bot: s.BotToken, app: s.AppToken}
	c.in = channel.NewIntake(d, channel.IntakeOptions{Title: "Slack", Typing: c.typing, IsID: isUserID})
	c.state = c.in.State()
	c.log = c.in.Log()
	c.sender = c.in.Sender()
	c.sender.Backoff = o.SendBackoff
	c.format = channel.Format{Limit: textLimit, Render: mrkdwn, Plain: plainText}
	return c, nil
}

// apiBase checks channels.slack.api_base: an http(s) URL; a trailing
// slash is added, as method names are appended to it.
func apiBase(raw string) (*url.URL, error) {
	if raw == "" {
		raw = DefaultAPIBase
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" {
		return nil, fmt.Errorf("slack: channels.slack.api_base %q is not an http(s) URL; leave it empty for %s", config.ShowURL(raw), DefaultAPIBase)
	}
	if !strings.HasSuffix(u.Path, "/") {
		u.Path += "/"
	}
	return u, nil
}

// Name is the channel's name.
func (c *Channel) Name() string { return Name }

// Check is the /ready check.
func (c *Channel) Check(context.Context) (bool, string) { return c.state.Check() }

// Start connects. A token Slack refuses is an error naming its key, which
// stops the gateway; Slack merely unreachable is not: the channel keeps
// trying in the background and its check says so.
func (c *Channel) Start(ctx context.Context) error {
	runCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	first := make(chan error, 1)
	c.cancel, c.done = cancel, make(chan struct{})
	go func() {
		defer close(c.done)
		c.run(runCtx, first)
	}()
	late, err := channel.AwaitFirst(ctx, first, c.opts.StartWait)
	if err != nil {
		cancel()
		<-c.done
		return err
	}
	if late {
		c.log.Warn("Slack has not answered yet; still trying in the background")
	}
	return nil
}

// Stop closes the connection and waits for its goroutines.
func (c *Channel) Stop(context.Context) error {
	if c.cancel == nil {
		return nil
	}
	c.cancel()
	<-c.done
	return nil
}

func (c *Channel) identity() botIdentity {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bot
}

// mentions are the patterns of the bot's mention; nil until auth.test has
// answered.
func (c *Channel) mentions() *mentionPatterns {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mention
}

// fatalAuth are the Web API errors that mean the token itself is wrong:
// retrying cannot help.
var fatalAuth = map[string]bool{
	"invalid_auth": true, "not_authed": true, "token_revoked": true, "token_expired": true,
	"account_inactive": true, "not_allowed_token_type": true, "no_permission": true, "invalid_token_type": true,
}

// authError names the config key of a refused token.
type authError struct {
	Key  string
	Code string
}

func (e *authError) Error() string {
	what, hint := "bot token", "the xoxb- token under OAuth & Permissions"
	if strings.HasSuffix(e.Key, "app_token") {
		what, hint = "app-level token", "an xapp- token with connections:write, under Basic Information → App-Level Tokens"
	}
	return fmt.Sprintf("slack: Slack refused the %s (%s); set %s to %s", what, e.Code, e.Key, hint)
}

func fatalCode(err error) (string, bool) {
	var ae *apiError
	if errors.As(err, &ae) && fatalAuth[ae.Code] {
		return ae.Code, true
	}
	return "", false
}

// run checks the bot token (auth.test, which also says who the bot is),
// then holds the Socket Mode connection until ctx ends or Slack refuses a
// token for good. first gets the outcome of the first attempt.
func (c *Channel) run(ctx context.Context, first chan<- error) {
	var once sync.Once
	report := func(err error) bool {
		sent := false
		once.Do(func() { first <- err; sent = true })
		return sent
	}
	defer report(nil)
	b := c.opts.Backoff
	for {
		actx, cancel := context.WithTimeout(ctx, 15*time.Second)
		bot, err := c.api.authTest(actx)
		cancel()
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			p := c.mentions()
			if p == nil || p.bot != bot {
				p = newMentionPatterns(bot)
			}
			c.mu.Lock()
			c.bot, c.mention = bot, p
			c.mu.Unlock()
			break
		}
		if code, ok := fatalCode(err); ok {
			c.fatal(&authError{Key: "channels.slack.bot_token", Code: code}, report)
			return
		}
		wait := b.Next()
		c.unreachable(err, wait)
		report(nil)
		if !channel.Sleep(ctx, wait) {
			return
		}
	}
	if err := c.runSocket(ctx, report); err != nil && ctx.Err() == nil {
		c.fatal(err, report)
	}
}

// unreachable records that Slack did not answer.
func (c *Channel) unreachable(err error, wait time.Duration) {
	why := fmt.Sprintf("Slack unreachable: %v; retrying in %s", err, wait.Round(time.Second))
	c.state.Disconnected(why)
	c.state.Fail(err)
	c.log.Warn("Slack unreachable; retrying", "err", err, "in", wait.Round(time.Millisecond))
}

// fatal records a refusal that needs the owner and reports it to Start,
// or, after start-up, logs it.
func (c *Channel) fatal(err error, report func(error) bool) {
	c.state.Disconnected(err.Error())
	c.state.Fail(err)
	if !report(err) {
		c.log.Error("Slack channel stopped", "err", err)
	}
}

// Send posts out in its chat and thread, split at Slack's text limit,
// rendered as mrkdwn (plain text when Slack refuses the formatting).
func (c *Channel) Send(ctx context.Context, out bus.Outbound) error {
	var parts []channel.Part
	if strings.TrimSpace(out.Text) != "" {
		parts = channel.Prepare(out.Text, c.format)
		err := c.sender.SendParts(ctx, out.ChatID, parts, out.Delivered, c.format, func(ctx context.Context, text string, formatted bool) error {
			return c.post(ctx, out.ChatID, out.ThreadID, text, formatted)
		})
		if err != nil {
			return err
		}
		c.answeredIn(out.ChatID, out.ThreadID)
	}
	for i, m := range out.Media {
		unit := len(parts) + i
		if unit < out.Delivered {
			continue
		}
		if err := c.sender.Do(ctx, "files.upload", func(ctx context.Context) error { return c.upload(ctx, out, m) }); err != nil {
			c.log.Warn("sending a file failed", "chat", out.ChatID, "err", err)
			c.state.Fail(fmt.Errorf("sending a file to chat %s failed: %w", out.ChatID, err))
			return channel.Partial(unit, err)
		}
	}
	return nil
}

func (c *Channel) post(ctx context.Context, chat, thread, text string, formatted bool) error {
	return classify(c.api.postMessage(ctx, chat, thread, text, formatted))
}

// permanent are chat.postMessage errors a retry cannot fix.
var permanent = map[string]bool{
	"channel_not_found": true, "not_in_channel": true, "is_archived": true, "msg_too_long": true,
	"no_text": true, "restricted_action": true, "missing_scope": true, "invalid_auth": true,
	"not_authed": true, "token_revoked": true, "account_inactive": true, "cannot_reply_to_message": true,
	"thread_reply_not_found": true,
}

// badFormat are refusals of the message's markup.
var badFormat = map[string]bool{
	"invalid_blocks": true, "invalid_blocks_format": true, "invalid_attachments": true, "markdown_text_conflict": true,
}

// classify turns a Web API error into what the sender should do.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var se *statusError
	if errors.As(err, &se) && se.Status == http.StatusTooManyRequests {
		return channel.RetryAfter(se.RetryAfter, fmt.Errorf("slack: rate limited: %w", err))
	}
	var ae *apiError
	if errors.As(err, &ae) {
		switch code := ae.Code; {
		case code == "msg_too_long":
			return channel.Fail(channel.TooLong, err)
		case badFormat[code]:
			return channel.Fail(channel.BadFormat, err)
		case code == "ratelimited":
			return channel.RetryAfter(time.Second, err)
		case permanent[code]:
			return channel.Fail(channel.Permanent, err)
		case code == "internal_error" || code == "fatal_error" || code == "service_unavailable" || code == "request_timeout":
			return channel.Fail(channel.Transient, err)
		}
		return channel.Fail(channel.Permanent, err)
	}
	if se != nil && se.Status < 500 {
		return channel.Fail(channel.Permanent, err)
	}
	return channel.Fail(channel.Transient, err)
}

// typing marks the message being answered with an :eyes: reaction until
// the reply is sent: Slack has no typing indicator for bots. Without the
// reactions:write scope it quietly does nothing.
func (c *Channel) typing(ctx context.Context, in bus.Inbound) error {
	ts := in.ReplyTo
	if ts == "" {
		return nil
	}
	if err := c.api.reaction(ctx, true, in.ChatID, ts, "eyes"); err != nil {
		return err
	}
	<-ctx.Done()
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return c.api.reaction(rctx, false, in.ChatID, ts, "eyes")
}

// upload sends an outbound file (an image the agent made) to the chat and
// thread, with Slack's external upload (files.getUploadURLExternal, the
// upload, files.completeUploadExternal).
func (c *Channel) upload(ctx context.Context, out bus.Outbound, m bus.Media) error {
	if strings.HasPrefix(m.URL, "https://") || strings.HasPrefix(m.URL, "http://") {
		// Slack shows a picture at an address itself (it unfurls the
		// link): the address is the message.
		return c.post(ctx, out.ChatID, out.ThreadID, m.URL, false)
	}
	f, err := channel.OpenMedia(m, 0)
	if err != nil {
		return channel.Fail(channel.Permanent, fmt.Errorf("slack: %w", err))
	}
	if len(f.Data) == 0 {
		return channel.Fail(channel.Permanent, fmt.Errorf("slack: %s is empty; Slack takes no empty file", f.Name))
	}
	return classify(c.api.uploadFile(ctx, out.ChatID, out.ThreadID, f.Name, f.Data))
}

// isUserID reports whether an allow_from entry reads as a Slack user id:
// U or W and at least six more capital letters or digits (U0123ABCD).
// Slack's usernames are lower case, so "uowner1" stays a name, and a
// member who takes the name "uowner1" does not pass for UOWNER1.
func isUserID(e string) bool {
	if len(e) < 7 || e[0] != 'U' && e[0] != 'W' {
		return false
	}
	for _, c := range []byte(e[1:]) {
		if (c < 'A' || c > 'Z') && (c < '0' || c > '9') {
			return false
		}
	}
	return true
}
