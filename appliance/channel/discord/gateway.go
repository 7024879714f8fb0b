package discord

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/perchhq/perch/appliance/channel"
)

// The gateway connection is ours rather than discordgo's Session.Open:
// discordgo v0.29.0 resumes at the first gateway URL instead of READY's
// resume_gateway_url, sleeps a second holding its lock on every close, runs
// a reconnect loop nothing can cancel, reads frames of any size and keeps a
// state cache. Here every goroutine belongs to a connection that ends with
// the channel's context, frames are capped, and a connection whose
// heartbeats go unacknowledged is replaced and resumed.

// Gateway opcodes.
const (
	opDispatch       = 0
	opHeartbeat      = 1
	opIdentify       = 2
	opResume         = 6
	opReconnect      = 7
	opInvalidSession = 9
	opHello          = 10
	opHeartbeatAck   = 11
)

// apiVersion is the gateway and REST version spoken.
const apiVersion = "10"

// Intents: guild and direct messages, and their content (privileged: the
// bot's page in the developer portal must enable it, or guild messages
// arrive empty). No GUILDS intent: its GUILD_CREATE payloads list every
// channel and member role, which a bot answering messages does not need
// and a 512 MB board should not hold.
const (
	intentGuildMessages  = 1 << 9
	intentDirectMessages = 1 << 12
	intentMessageContent = 1 << 15
	intents              = intentGuildMessages | intentDirectMessages | intentMessageContent
)

// readLimit caps one gateway frame. Without the GUILDS intent frames are
// messages (a few KiB); READY of a bot in many guilds stays well below.
const readLimit = 4 << 20

// gatewayError is a failure of the gateway connection.
type gatewayError struct {
	// Code is the close code the gateway sent, 0 if none.
	Code int
	// Fatal means retrying cannot help: the token or the bot's settings
	// must change.
	Fatal bool
	// Auth means the token was refused.
	Auth bool
	Err  error
}

func (e *gatewayError) Error() string { return e.Err.Error() }
func (e *gatewayError) Unwrap() error { return e.Err }

// closeCodeError turns a close code into what to do about it.
func closeCodeError(code int, text string) *gatewayError {
	e := &gatewayError{Code: code}
	switch code {
	case 4004:
		e.Fatal, e.Auth = true, true
		e.Err = errors.New("discord: the gateway refused the bot token (close 4004 authentication failed)")
	case 4013:
		e.Fatal = true
		e.Err = errors.New("discord: the gateway refused the intents (close 4013)")
	case 4014:
		e.Fatal = true
		e.Err = errors.New("discord: the bot may not use the message content intent (close 4014); " +
			"enable Message Content Intent under Bot → Privileged Gateway Intents in the Discord developer portal")
	case 4010, 4011, 4012:
		e.Fatal = true
		e.Err = fmt.Errorf("discord: the gateway closed the connection for good (close %d %s)", code, text)
	default:
		e.Err = fmt.Errorf("discord: the gateway closed the connection (close %d %s)", code, text)
	}
	return e
}

type frame struct {
	Op int             `json:"op"`
	D  json.RawMessage `json:"d"`
	S  *int64          `json:"s,omitempty"`
	T  string          `json:"t,omitempty"`
}

// gatewayConfig is what a gateway needs.
type gatewayConfig struct {
	Token string
	// URL returns the gateway URL for a new session (GET /gateway/bot).
	URL func(ctx context.Context) (string, error)
	// Dispatch receives every dispatch but READY and RESUMED, in order. It
	// may block briefly (the reader waits); the seq is acknowledged to
	// Discord only after it returns.
	Dispatch func(ctx context.Context, typ string, data json.RawMessage)
	// Ready is called with READY's user on each new session.
	Ready func(user readyUser)
	// Connected reports each connection's start (true, nil) and end.
	Connected func(ok bool, err error)
	Log       *slog.Logger
	// Dialer dials the WebSocket; nil uses a default one.
	Dialer *websocket.Dialer
	// Backoff spaces connection attempts (zero value: 1 s to 5 min).
	Backoff channel.Backoff
	// HelloTimeout bounds the wait for Hello and for READY/RESUMED.
	HelloTimeout time.Duration
}

type readyUser struct {
	ID         string `json:"id"`
	Username   string `json:"username"`
	GlobalName string `json:"global_name"`
}

// gateway is one bot's gateway session across its connections.
type gateway struct {
	cfg gatewayConfig

	// The session, resumed after a drop; only run's goroutine touches
	// sessionID and resumeURL. seq is also read by the heartbeat.
	sessionID string
	resumeURL string
	seq       atomic.Int64
}

func newGateway(cfg gatewayConfig) *gateway {
	if cfg.Dialer == nil {
		// Heartbeats are the only writes: the write buffer comes from a pool
		// while writing instead of staying with the idle connection.
		cfg.Dialer = &websocket.Dialer{Proxy: http.ProxyFromEnvironment, HandshakeTimeout: 15 * time.Second, WriteBufferPool: &sync.Pool{}}
	}
	if cfg.HelloTimeout <= 0 {
		cfg.HelloTimeout = 20 * time.Second
	}
	if cfg.Connected == nil {
		cfg.Connected = func(bool, error) {}
	}
	if cfg.Ready == nil {
		cfg.Ready = func(readyUser) {}
	}
	return &gateway{cfg: cfg}
}

// run keeps a connection until ctx ends or the gateway refuses the bot for
// good (returned as a *gatewayError with Fatal set).
func (g *gateway) run(ctx context.Context) error {
	b := g.cfg.Backoff
	failedResumes := 0
	for {
		url := g.resumeURL
		var err error
		resuming := g.sessionID != ""
		if !resuming {
			url, err = g.cfg.URL(ctx)
		}
		established := false
		if err == nil {
			established, err = g.connect(ctx, url)
		}
		if ctx.Err() != nil {
			return nil
		}
		switch {
		case established:
			failedResumes = 0
		case resuming && g.sessionID != "":
			// READY's resume host may be gone for good (a retired gateway
			// node): resuming there forever would never connect again.
			if failedResumes++; failedResumes >= maxFailedResumes {
				g.cfg.Log.Warn("Discord: cannot resume the session at its resume host; starting a new session at the gateway Discord names (messages sent meanwhile are not replayed)",
					"attempts", failedResumes, "err", err)
				g.clearSession()
				failedResumes = 0
			}
		}
		var ge *gatewayError
		if errors.As(err, &ge) && ge.Fatal {
			g.cfg.Connected(false, err)
			return err
		}
		g.cfg.Connected(false, err)
		if established {
			b.Reset()
		}
		wait := b.Next()
		g.cfg.Log.Debug("gateway connection ended; reconnecting", "err", err, "resume", g.sessionID != "", "in", wait)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-t.C:
		}
	}
}

// maxFailedResumes is how many resumes in a row may fail (no connection,
// no Hello, no RESUMED) before the session is given up for a new one.
const maxFailedResumes = 3

// conn is one WebSocket connection: reads happen on connect's goroutine,
// writes from it and from the heartbeat, under wmu.
type conn struct {
	ws  *websocket.Conn
	wmu sync.Mutex
}

func (c *conn) send(op int, d any) error {
	raw, err := json.Marshal(d)
	if err != nil {
		return err
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.ws.SetWriteDeadline(time.Now().Add(10 * time.Second))
	return c.ws.WriteJSON(frame{Op: op, D: raw})
}

// closeWith sends a close frame (best effort) and closes the socket.
// Codes 1000 and 1001 end the session on Discord's side; any other keeps
// it resumable.
func (c *conn) closeWith(code int, reason string) {
	c.ws.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(time.Second))
	c.ws.Close()
}

// errZombie is a connection that stopped acknowledging heartbeats.
var errZombie = errors.New("discord: the gateway stopped acknowledging heartbeats; replacing the connection")

// connect runs one connection until it ends. established reports whether
// it reached READY or RESUMED.
func (g *gateway) connect(ctx context.Context, base string) (established bool, err error) {
	url := strings.TrimSuffix(base, "/") + "/?v=" + apiVersion + "&encoding=json"
	ws, resp, err := g.cfg.Dialer.DialContext(ctx, url, nil)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		return false, fmt.Errorf("discord: cannot reach the gateway: %w", err)
	}
	ws.SetReadLimit(readLimit)
	c := &conn{ws: ws}
	// Stopping closes with 1000: the session ends and the bot shows offline
	// at once instead of after Discord's timeout.
	stopped := context.AfterFunc(ctx, func() { c.closeWith(websocket.CloseNormalClosure, "shutting down") })
	defer func() {
		if stopped() {
			ws.Close()
		}
	}()

	interval, err := g.hello(ws)
	if err != nil {
		return false, err
	}
	if g.sessionID != "" {
		err = c.send(opResume, map[string]any{"token": g.cfg.Token, "session_id": g.sessionID, "seq": g.seq.Load()})
	} else {
		err = c.send(opIdentify, map[string]any{
			"token": g.cfg.Token, "intents": intents, "large_threshold": 50,
			"properties": map[string]string{"os": runtime.GOOS, "browser": "perch", "device": "perch"},
		})
	}
	if err != nil {
		return false, fmt.Errorf("discord: gateway write: %w", err)
	}

	var zombie atomic.Bool
	var acked atomic.Bool
	acked.Store(true)
	hbCtx, hbStop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { g.heartbeat(hbCtx, c, interval, &acked, &zombie) })
	defer func() {
		hbStop()
		wg.Wait()
	}()

	// Nothing at all for two intervals (not even an ack) is a dead socket
	// even if the heartbeat's write still succeeds.
	readWait := 2*interval + 5*time.Second
	// READY or RESUMED must come within HelloTimeout.
	firstDeadline := time.Now().Add(g.cfg.HelloTimeout)
	for {
		if established {
			ws.SetReadDeadline(time.Now().Add(readWait))
		} else {
			ws.SetReadDeadline(firstDeadline)
		}
		_, data, err := ws.ReadMessage()
		if err != nil {
			return established, g.readError(ctx, err, &zombie)
		}
		var f frame
		if err := json.Unmarshal(data, &f); err != nil {
			g.cfg.Log.Debug("gateway frame not understood", "err", err)
			continue
		}
		switch f.Op {
		case opDispatch:
			switch f.T {
			case "READY":
				var r struct {
					SessionID string    `json:"session_id"`
					ResumeURL string    `json:"resume_gateway_url"`
					User      readyUser `json:"user"`
				}
				if err := json.Unmarshal(f.D, &r); err != nil {
					return established, fmt.Errorf("discord: READY not understood: %w", err)
				}
				g.sessionID, g.resumeURL = r.SessionID, r.ResumeURL
				if g.resumeURL == "" {
					g.resumeURL = base
				}
				g.cfg.Ready(r.User)
				established = true
				g.cfg.Connected(true, nil)
			case "RESUMED":
				established = true
				g.cfg.Connected(true, nil)
			default:
				g.cfg.Dispatch(ctx, f.T, f.D)
			}
			if f.S != nil {
				g.seq.Store(*f.S)
			}
		case opHeartbeat:
			if err := c.send(opHeartbeat, g.seqValue()); err != nil {
				return established, fmt.Errorf("discord: gateway write: %w", err)
			}
		case opHeartbeatAck:
			acked.Store(true)
		case opReconnect:
			c.closeWith(4000, "reconnect requested")
			return established, errors.New("discord: the gateway asked for a reconnect")
		case opInvalidSession:
			var resumable bool
			json.Unmarshal(f.D, &resumable)
			if !resumable {
				g.clearSession()
			}
			c.closeWith(4000, "invalid session")
			return established, errors.New("discord: the gateway invalidated the session")
		}
	}
}

func (g *gateway) clearSession() {
	g.sessionID, g.resumeURL = "", ""
	g.seq.Store(0)
}

// seqValue is the heartbeat's d: the last sequence, or null before any.
func (g *gateway) seqValue() any {
	if s := g.seq.Load(); s > 0 {
		return s
	}
	return nil
}

// hello reads op 10 and returns the heartbeat interval.
func (g *gateway) hello(ws *websocket.Conn) (time.Duration, error) {
	ws.SetReadDeadline(time.Now().Add(g.cfg.HelloTimeout))
	var f frame
	if err := ws.ReadJSON(&f); err != nil {
		var ce *websocket.CloseError
		if errors.As(err, &ce) {
			return 0, closeCodeError(ce.Code, ce.Text)
		}
		return 0, fmt.Errorf("discord: no Hello from the gateway: %w", err)
	}
	var h struct {
		Interval int64 `json:"heartbeat_interval"`
	}
	if f.Op != opHello || json.Unmarshal(f.D, &h) != nil || h.Interval <= 0 {
		return 0, fmt.Errorf("discord: the gateway sent op %d instead of Hello", f.Op)
	}
	return time.Duration(h.Interval) * time.Millisecond, nil
}

// readError classifies the error that ended a connection's reads.
func (g *gateway) readError(ctx context.Context, err error, zombie *atomic.Bool) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	if zombie.Load() {
		return errZombie
	}
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		ge := closeCodeError(ce.Code, ce.Text)
		switch ce.Code {
		case 4007, 4009:
			// Invalid sequence, session timed out: identify anew.
			g.clearSession()
		case websocket.CloseNormalClosure, websocket.CloseGoingAway:
			g.clearSession()
		}
		return ge
	}
	var ne interface{ Timeout() bool }
	if errors.As(err, &ne) && ne.Timeout() {
		return errors.New("discord: the gateway went quiet; replacing the connection")
	}
	return fmt.Errorf("discord: gateway connection lost: %w", err)
}

// heartbeat beats every interval (the first after a random part of it, as
// Discord asks so that reconnecting bots spread out). A beat whose
// predecessor was not acknowledged means the connection is a zombie: it is
// closed, and run resumes the session on a new one.
func (g *gateway) heartbeat(ctx context.Context, c *conn, interval time.Duration, acked, zombie *atomic.Bool) {
	t := time.NewTimer(time.Duration(rand.Int64N(int64(interval))))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if !acked.Load() {
			zombie.Store(true)
			c.ws.Close()
			return
		}
		acked.Store(false)
		if err := c.send(opHeartbeat, g.seqValue()); err != nil {
			c.ws.Close()
			return
		}
		t.Reset(interval)
	}
}
