// Package line is the LINE channel: the Messaging API's webhook in, its
// reply and push APIs out, over plain net/http.
//
// # Concepts
//
// LINE posts events to the webhook with an X-Line-Signature header: the
// base64 HMAC-SHA256 of the raw body keyed by the channel secret, checked
// in constant time before anything else (403 otherwise). Each event has a
// webhookEventId that a redelivery repeats: the framework drops repeats.
//
// Answers go through the reply API while the event's reply token is fresh
// (free, about 25 s), else through the push API, which counts against the
// account's monthly quota: pushes are counted per month and shown in
// /admin/status. Replies quote the message they answer, and a 60-second
// loading animation shows while the agent works.
//
// The webhook is served by the gateway's own listener when webhook_port is
// gateway.port (one port to expose), else on a listener of its own.
package line

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/channel"
	"github.com/perchhq/perch/appliance/config"
)

// Name is the channel's name and config key.
const Name = "line"

// Limits of the Messaging API.
const (
	// TextLimit is the longest text message (in UTF-16 units, as LINE's
	// clients count).
	TextLimit = 5000
	// MaxPerRequest is how many messages one reply or push carries.
	MaxPerRequest = 5
)

// Platform is the channel table's entry.
var Platform = channel.Platform{Name: Name, New: func(d channel.Deps) (channel.Channel, error) { return New(d, Options{}) }}

// Options tune timings and sizes (tests shorten them).
type Options struct {
	// ReplyTTL is how long a reply token is used after the event arrived
	// (default 25 s, inside LINE's validity).
	ReplyTTL time.Duration
	// LoadingSeconds is the loading animation's length (default 60).
	LoadingSeconds int
	// Backoff spaces the retries of the start-up check (default 1 s to 5 min).
	Backoff channel.Backoff
	// StartTimeout bounds the credential check of Start (default 10 s).
	StartTimeout time.Duration
	// RequestTimeout bounds one call of LINE's API (default 60 s).
	RequestTimeout time.Duration
	// MessageTimeout bounds one reply or push call (default 15 s): the
	// channel sends one message at a time, so a call LINE takes and never
	// answers held every chat's answers for RequestTimeout. The retry is
	// safe: a push carries its retry key, a reply its single-use token.
	MessageTimeout time.Duration
	// ReplyTokens bounds the messages whose reply and quote tokens are
	// held for their answer (default 1024); the oldest go first.
	ReplyTokens int
}

// Channel is a running LINE bot.
type Channel struct {
	opts      Options
	secret    []byte
	token     config.Secret
	apiBase   string
	dataBase  string
	path      string
	addr      string
	onGateway bool
	client    *http.Client
	intake    *channel.Intake
	state     *channel.State
	sender    *channel.Sender
	log       logger

	mu      sync.Mutex
	botID   string
	botName string
	tokens  map[string]replyToken // by message id, of messages being answered
	pending map[string]replyToken // by message id, of messages being received
	sentIDs *channel.Recent       // ids of messages the bot sent lately (the store has more)
	running bool
	pushes  pushCount

	srv    *http.Server
	ln     net.Listener
	cancel context.CancelFunc
	wg     sync.WaitGroup
	super  *channel.Supervisor
}

// replyToken is an event's reply token and quote token.
type replyToken struct {
	token   string
	quote   string
	expires time.Time // of the reply token
	kept    time.Time // when the entry goes at the latest (quote tokens outlive reply tokens)
	taken   bool      // by the answer: the entry goes once the reply token expired
}

// New builds the channel and, when its port is the gateway's, registers the
// webhook on the gateway's listener.
func New(d channel.Deps, o Options) (*Channel, error) {
	st, ok := d.Section.Settings.(*config.LINEChannel)
	if !ok {
		return nil, fmt.Errorf("line: wrong settings type %T", d.Section.Settings)
	}
	if o.ReplyTTL <= 0 {
		o.ReplyTTL = 25 * time.Second
	}
	if o.LoadingSeconds <= 0 {
		o.LoadingSeconds = 60
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 10 * time.Second
	}
	if o.MessageTimeout <= 0 {
		o.MessageTimeout = 15 * time.Second
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 60 * time.Second
	}
	if o.ReplyTokens <= 0 {
		o.ReplyTokens = 1024
	}
	c := &Channel{
		opts: o, secret: []byte(st.ChannelSecret.Value()), token: st.ChannelAccessToken,
		apiBase:  strings.TrimRight(orDefault(st.APIBase, "https://api.line.me"), "/"),
		dataBase: strings.TrimRight(orDefault(st.DataAPIBase, "https://api-data.line.me"), "/"),
		path:     orDefault(st.WebhookPath, "/webhook/line"),
		addr:     net.JoinHostPort(orDefault(st.WebhookHost, "0.0.0.0"), strconv.Itoa(st.WebhookPort)),
		tokens:   map[string]replyToken{}, pending: map[string]replyToken{}, sentIDs: channel.NewRecent(512),
		client: &http.Client{Timeout: o.RequestTimeout, Transport: &http.Transport{
			Proxy:               http.ProxyFromEnvironment,
			DialContext:         (&net.Dialer{Timeout: 15 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout: 15 * time.Second, MaxIdleConns: 4, IdleConnTimeout: 90 * time.Second, ForceAttemptHTTP2: true,
		}},
	}
	c.intake = channel.NewIntake(d, channel.IntakeOptions{
		Title: "LINE", Typing: c.loading,
		// The animation lasts LoadingSeconds by itself; asking again
		// before it ends extends it for a long turn.
		TypingEvery: time.Duration(o.LoadingSeconds)*time.Second - 5*time.Second,
		TypingFor:   5 * time.Minute,
		Answering:   c.keepToken,
		// LINE has no usernames: every entry is an id.
		IsID: func(string) bool { return true },
	})
	c.state, c.sender, c.log = c.intake.State(), c.intake.Sender(), c.intake.Log()
	c.super = &channel.Supervisor{Name: "LINE", State: c.state, Log: c.intake.Log(), Backoff: o.Backoff}
	if st.WebhookPort == d.GatewayPort && d.Routes != nil {
		if err := d.Routes.HandleWebhook(http.MethodPost, c.path, c.webhook); err != nil {
			return nil, fmt.Errorf("line: channels.line.webhook_path: %w", err)
		}
		c.onGateway = true
	}
	return c, nil
}

func orDefault(s, def string) string {
	if strings.TrimSpace(s) == "" {
		return def
	}
	return s
}

// Name implements channel.Channel.
func (c *Channel) Name() string { return Name }

// Check implements channel.Channel.
func (c *Channel) Check(context.Context) (bool, string) { return c.state.Check() }

// Status reports the channel's state for /admin/status.
func (c *Channel) Status() channel.Status { return c.state.Status() }

// OnGateway reports whether the webhook is served by the gateway's listener.
func (c *Channel) OnGateway() bool { return c.onGateway }

// Addr is the own listener's address ("" on the gateway's).
func (c *Channel) Addr() string {
	if c.ln == nil {
		return ""
	}
	return c.ln.Addr().String()
}

// ErrTokenRejected is wrapped by Start's error when LINE refuses the
// channel access token.
var ErrTokenRejected = errors.New("line: the channel access token was rejected (401); check channels.line.channel_access_token (LINE Developers Console → Messaging API → Channel access token)")

// Start checks the access token (GET /v2/bot/info, which also names the
// bot for mention detection), then serves the webhook. A rejected token or
// a busy port is an error; an unreachable LINE is not: the check keeps
// trying and /ready says so.
func (c *Channel) Start(ctx context.Context) error {
	c.loadPushes()
	gctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	err := c.botInfo(gctx)
	cancel()
	reachable := true
	switch {
	case err == nil:
	case errors.Is(err, ErrTokenRejected):
		return err
	default:
		reachable = false
		c.state.Disconnected(fmt.Sprintf("LINE unreachable at start: %v; retrying in the background", err))
		c.log.Warn("LINE unreachable; the gateway starts and the channel keeps trying", "err", err)
	}
	if !c.onGateway {
		ln, err := net.Listen("tcp", c.addr)
		if err != nil {
			return fmt.Errorf("line: cannot listen on %s for the webhook: %w; change channels.line.webhook_port (or set it to gateway.port to share the gateway's)", c.addr, err)
		}
		c.ln = ln
		mux := http.NewServeMux()
		mux.HandleFunc(c.path, func(w http.ResponseWriter, r *http.Request) {
			if r.Method != http.MethodPost {
				w.Header().Set("Allow", http.MethodPost)
				http.Error(w, `{"error":"use POST"}`, http.StatusMethodNotAllowed)
				return
			}
			r.Body = http.MaxBytesReader(w, r.Body, maxBody)
			c.webhook(w, r)
		})
		c.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 30 * time.Second,
			WriteTimeout: 60 * time.Second, IdleTimeout: 60 * time.Second, MaxHeaderBytes: 64 << 10}
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			if err := c.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				c.log.Error("the LINE webhook listener failed", "err", err)
				c.state.Disconnected("the webhook listener failed: " + err.Error())
			}
		}()
	}
	c.mu.Lock()
	c.running = true
	c.mu.Unlock()
	c.state.SetNote(fmt.Sprintf("webhook %s on %s; set https://<this board's public address>%s as the Webhook URL in the LINE Developers Console",
		c.path, c.where(), c.path))
	rctx, rcancel := context.WithCancel(context.WithoutCancel(ctx))
	c.cancel = rcancel
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		if reachable {
			c.state.Connected()
			return
		}
		// No connection to hold: "connected" means LINE answered.
		c.super.Run(rctx, func(ctx context.Context, alive func()) error {
			if err := c.botInfo(ctx); err != nil {
				return err
			}
			alive()
			<-ctx.Done()
			return ctx.Err()
		})
	}()
	return nil
}

func (c *Channel) where() string {
	if c.onGateway {
		return "the gateway's port"
	}
	return c.addr
}

// Stop stops the webhook listener (the gateway's stops with the gateway).
func (c *Channel) Stop(ctx context.Context) error {
	c.mu.Lock()
	c.running = false
	c.mu.Unlock()
	if c.cancel != nil {
		c.cancel()
	}
	var err error
	if c.srv != nil {
		err = c.srv.Shutdown(ctx)
	}
	c.wg.Wait()
	c.state.Disconnected("stopped")
	return err
}

// loading shows the loading animation in a one-to-one chat (LINE has none
// for groups).
func (c *Channel) loading(ctx context.Context, in bus.Inbound) error {
	if !strings.HasPrefix(in.ChatID, "U") {
		return nil
	}
	return c.post(ctx, c.apiBase+"/v2/bot/chat/loading/start", "", map[string]any{"chatId": in.ChatID, "loadingSeconds": c.opts.LoadingSeconds}, nil)
}

// logger is the part of slog the channel uses.
type logger interface {
	Debug(msg string, args ...any)
	Info(msg string, args ...any)
	Warn(msg string, args ...any)
	Error(msg string, args ...any)
}
