// Package telegram is the Telegram channel: the Bot API over long polling.
//
// # Concepts
//
// Updates come from getUpdates with an offset. Each update is handed to the
// channel framework (channel.Intake), which makes it durable before the
// offset moves past it; the offset itself is kept in the store and
// confirmed to Telegram before the gateway stops, so a restart neither
// answers a message twice nor drops one.
//
// The Bot API client is this package's own (api.go): the channel calls
// eight methods, each one JSON or multipart POST, which plain net/http
// does in a few hundred lines, where an SDK cost several hundred KiB of
// the binary.
//
// Telegram lets one process poll a bot at a time: a second one gets 409
// Conflict. That is reported in the log and the /ready check and retried
// slowly, never in a tight loop.
package telegram

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/channel"
	"github.com/perchhq/perch/appliance/config"
)

// Name is the channel's name and config key.
const Name = "telegram"

// DefaultAPIBase is the Bot API root.
const DefaultAPIBase = "https://api.telegram.org"

// Limit is Telegram's longest message, in UTF-16 code units.
const Limit = 4096

// Platform is the channel table's entry.
var Platform = channel.Platform{Name: Name, New: func(d channel.Deps) (channel.Channel, error) { return New(d, Options{}) }}

// Options tune timings (tests shorten them).
type Options struct {
	// PollTimeout is getUpdates' long-poll timeout (default 50 s).
	PollTimeout time.Duration
	// Quiet is how long a poll may go without an answer before the
	// watchdog replaces the connection (default PollTimeout + 30 s).
	Quiet time.Duration
	// Backoff spaces reconnections (default 1 s to 5 min).
	Backoff channel.Backoff
	// ConflictWait is the first wait after a 409 Conflict (default 30 s),
	// doubling up to 5 min while it lasts.
	ConflictWait time.Duration
	// StartTimeout bounds the getMe of Start (default 10 s): a board that
	// boots offline starts anyway and keeps trying.
	StartTimeout time.Duration
	// TypingEvery repeats the typing action (default 4 s: Telegram shows
	// it for 5 s).
	TypingEvery time.Duration
}

// Channel is a running Telegram bot.
type Channel struct {
	opts   Options
	base   string
	token  config.Secret
	client *http.Client
	intake *channel.Intake
	state  *channel.State
	sender *channel.Sender
	log    logger

	mu sync.Mutex
	me *user

	offset   int64 // next update id to fetch; only the poll loop writes it
	offsetMu sync.Mutex
	saved    *savedOffset // the store's offset, until getMe names the bot
	// offsetBot is the bot c.offset counts the updates of.
	offsetBot int64
	// bareIDs: the saved offset predates offsets that name their bot, so
	// the updates received then (event ids without the bot) were this
	// bot's too.
	bareIDs   bool
	conflicts int
	super     *channel.Supervisor
	cancel    context.CancelFunc
	// life ends when the channel stops: handling an update runs under it,
	// not under a connection the watchdog may replace.
	life        context.Context
	wg          sync.WaitGroup
	webhookGone bool
	// startedMe: Start's getMe succeeded and the first poll need not ask
	// again.
	startedMe atomic.Bool
}

// New builds the channel from its config section; Start connects.
func New(d channel.Deps, o Options) (*Channel, error) {
	st, ok := d.Section.Settings.(*config.BotChannel)
	if !ok {
		return nil, fmt.Errorf("telegram: wrong settings type %T", d.Section.Settings)
	}
	if o.PollTimeout <= 0 {
		o.PollTimeout = 50 * time.Second
	}
	if o.Quiet <= 0 {
		o.Quiet = o.PollTimeout + 30*time.Second
	}
	if o.ConflictWait <= 0 {
		o.ConflictWait = 30 * time.Second
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 10 * time.Second
	}
	if o.TypingEvery <= 0 {
		o.TypingEvery = 4 * time.Second
	}
	if err := checkToken(st.Token.Value()); err != nil {
		return nil, err
	}
	base := strings.TrimRight(st.APIBase, "/")
	if base == "" {
		base = DefaultAPIBase
	}
	c := &Channel{opts: o, base: base, token: st.Token}
	// No client-wide timeout: every call carries its context's deadline,
	// and a long poll must outlive any fixed one.
	c.client = &http.Client{Transport: &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 15 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		TLSHandshakeTimeout:   15 * time.Second,
		ResponseHeaderTimeout: 0,
		MaxIdleConns:          4,
		IdleConnTimeout:       90 * time.Second,
		ForceAttemptHTTP2:     true,
	}}
	c.intake = channel.NewIntake(d, channel.IntakeOptions{
		Title: "Telegram", Typing: c.typing, TypingEvery: o.TypingEvery,
	})
	c.state = c.intake.State()
	c.sender = c.intake.Sender()
	c.log = c.intake.Log()
	c.super = &channel.Supervisor{Name: "Telegram", State: c.state, Log: c.intake.Log(), Backoff: o.Backoff, Quiet: o.Quiet}
	return c, nil
}

// Name implements channel.Channel.
func (c *Channel) Name() string { return Name }

// Check implements channel.Channel.
func (c *Channel) Check(context.Context) (bool, string) { return c.state.Check() }

// Replaced counts the connections the liveness watchdog replaced.
func (c *Channel) Replaced() int64 { return c.super.Replaced.Load() }

// Status reports the channel's state for /admin/status.
func (c *Channel) Status() channel.Status { return c.state.Status() }

// ErrTokenRejected is wrapped by Start's error when Telegram refuses the
// token.
var ErrTokenRejected = errors.New("telegram: the bot token was rejected (401 Unauthorized); check channels.telegram.token (BotFather's /token shows it)")

// Start checks the token with getMe and starts polling. A token Telegram
// refuses is an error (the gateway exits naming channels.telegram.token);
// a Telegram that cannot be reached is not: polling keeps trying in the
// background and the /ready check says so.
func (c *Channel) Start(ctx context.Context) error {
	if err := c.loadOffset(); err != nil {
		return err
	}
	gctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	err := c.getMe(gctx)
	cancel()
	switch {
	case err == nil:
		c.startedMe.Store(true)
	case tokenRejected(err):
		return ErrTokenRejected
	default:
		why := fmt.Sprintf("Telegram unreachable at start: %v; retrying in the background", err)
		c.state.Disconnected(why)
		c.log.Warn("Telegram unreachable; the gateway starts and the channel keeps trying", "err", err)
	}
	rctx, rcancel := context.WithCancel(context.WithoutCancel(ctx))
	c.cancel, c.life = rcancel, rctx
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.super.Run(rctx, c.poll)
	}()
	return nil
}

// Stop ends polling, then confirms the offset of every handled update to
// Telegram, so nothing handled here comes back to another poller.
func (c *Channel) Stop(ctx context.Context) error {
	if c.cancel == nil {
		return nil
	}
	c.cancel()
	c.wg.Wait()
	c.cancel = nil
	c.confirm(ctx)
	c.state.Disconnected("stopped")
	return nil
}

// getMe learns the bot's identity (for mentions) and its privacy mode.
func (c *Channel) getMe(ctx context.Context) error {
	me, err := c.apiGetMe(ctx)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.me = me
	c.mu.Unlock()
	c.adoptOffset(me.ID)
	if !me.CanReadAllGroupMessages {
		c.state.SetNote("privacy mode is on: in groups the bot sees only commands, replies to it and @" + me.Username +
			" mentions, not messages that name it otherwise (BotFather: /setprivacy → Disable, then add the bot to the group again)")
	} else {
		c.state.SetNote("")
	}
	c.log.Info("Telegram bot ready", "bot", "@"+me.Username, "privacy_mode", !me.CanReadAllGroupMessages)
	return nil
}

func (c *Channel) identity() *user {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.me
}

// typing shows "typing…" in the chat of in.
func (c *Channel) typing(ctx context.Context, in bus.Inbound) error {
	chat, err := strconv.ParseInt(in.ChatID, 10, 64)
	if err != nil {
		return err
	}
	tctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	return c.apiSendChatAction(tctx, chat, atoi(in.ThreadID), "typing")
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// logger is the part of slog the channel uses.
type logger interface {
	Debug(msg string, args ...any)
	Info(msg string, args ...any)
	Warn(msg string, args ...any)
	Error(msg string, args ...any)
}
