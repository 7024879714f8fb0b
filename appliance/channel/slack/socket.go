package slack

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/perchhq/perch/appliance/channel"
)

// readLimit caps one Socket Mode frame: an envelope is one event, a few
// KiB; a runaway frame must not take the board's memory.
const readLimit = 1 << 20

// writeWait bounds one acknowledgement or pong on the socket.
const writeWait = 10 * time.Second

// envelope is an events_api request waiting for the worker.
type envelope struct {
	payload []byte
	// done acknowledges the envelope when ok (its message is durable or
	// deliberately dropped) and stops the deadline that would otherwise
	// acknowledge it anyway.
	done func(ok bool)
}

// frame is the part of a Socket Mode message the channel reads.
type frame struct {
	Type       string          `json:"type"`
	EnvelopeID string          `json:"envelope_id"`
	Payload    json.RawMessage `json:"payload"`
	// Reason is a disconnect's: refresh_requested, warning,
	// link_disabled (Socket Mode turned off).
	Reason string `json:"reason"`
}

// socket is the current Socket Mode connection, shared by the reader and
// whoever acknowledges: gorilla/websocket allows one writer at a time.
type socket struct {
	mu sync.Mutex
	ws *websocket.Conn // nil between connections
}

func (s *socket) set(ws *websocket.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ws = ws
}

// ack acknowledges envelope id on the current connection. Without one the
// ack is lost and Slack delivers the envelope again, which the intake
// recognises.
func (s *socket) ack(id string) error {
	msg, err := json.Marshal(struct {
		EnvelopeID string `json:"envelope_id"`
	}{id})
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ws == nil {
		return errors.New("slack: no Socket Mode connection to acknowledge on")
	}
	s.ws.SetWriteDeadline(time.Now().Add(writeWait))
	return s.ws.WriteMessage(websocket.TextMessage, msg)
}

// runSocket holds the Socket Mode connection until ctx ends (nil) or
// Slack refuses the app-level token (an *authError).
func (c *Channel) runSocket(ctx context.Context, report func(error) bool) error {
	// Acks are a few dozen bytes: the write buffer comes from a pool while
	// writing instead of staying with the idle connection.
	dialer := &websocket.Dialer{Proxy: http.ProxyFromEnvironment, HandshakeTimeout: 15 * time.Second, WriteBufferPool: &sync.Pool{}}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var sock socket

	// The worker handles envelopes one at a time, in order; the reader
	// only parses Slack's frames and arms the deadline acks, so a slow
	// store or download never delays an acknowledgement past Slack's 3 s.
	queue := make(chan envelope, 64)
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			select {
			case <-ctx.Done():
				return
			case e := <-queue:
				e.done(c.handle(ctx, e.payload))
			}
		}
	})
	var timers sync.WaitGroup
	defer func() {
		cancel()
		wg.Wait()
		// Envelopes the worker did not get to stay unacknowledged: Slack
		// delivers them again to the next connection.
		for {
			select {
			case e := <-queue:
				e.done(false)
				continue
			default:
			}
			break
		}
		timers.Wait()
	}()

	b := c.opts.Backoff
	for {
		if st := c.state.Status(); st.Connected {
			c.state.Disconnected("reconnecting to Slack")
		}
		ws, err := c.dial(ctx, dialer)
		if ctx.Err() != nil {
			if ws != nil {
				ws.Close()
			}
			return nil
		}
		if err != nil {
			if code, ok := fatalCode(err); ok {
				// A bot token given as the app token ends here too
				// (not_allowed_token_type).
				return &authError{Key: "channels.slack.app_token", Code: code}
			}
			var se *statusError
			if errors.As(err, &se) && se.Status == http.StatusNotFound {
				return fmt.Errorf("slack: Socket Mode is not available (%w); %s", err, turnOnSocketMode)
			}
			wait := b.Next()
			if se != nil && se.RetryAfter > wait {
				wait = se.RetryAfter
			}
			c.unreachable(err, wait)
			report(nil)
			if !channel.Sleep(ctx, wait) {
				return nil
			}
			continue
		}
		began := time.Now()
		hello, why := c.serve(ctx, ws, &sock, queue, &timers, report)
		if ctx.Err() != nil {
			return nil
		}
		var bye *disconnect
		errors.As(why, &bye)
		if bye != nil && bye.Reason == "link_disabled" {
			// Slack says so to every new connection until the owner
			// turns Socket Mode back on: reconnecting cannot help.
			return fmt.Errorf("slack: Slack closed the connection because the app's Socket Mode is off (link_disabled); %s, then restart perch", turnOnSocketMode)
		}
		up := time.Since(began)
		if hello && up >= c.opts.StableAfter && (bye == nil || bye.Reason != "too_many_websockets") {
			// A connection that served a while ends in the normal
			// course (Slack recycles its servers): replace it at once.
			b.Reset()
			c.log.Debug("Socket Mode connection replaced", "why", why)
			continue
		}
		// A connection that ended soon after it opened, or before Slack
		// said hello, is a failure like any other: do not hammer Slack
		// with new ones.
		wait := b.Next()
		if hello {
			why = fmt.Errorf("slack: the Socket Mode connection ended %s after Slack's hello: %w", up.Round(time.Millisecond), why)
		} else {
			why = fmt.Errorf("slack: the Socket Mode connection closed before Slack's hello: %w", why)
		}
		c.unreachable(why, wait)
		if !channel.Sleep(ctx, wait) {
			return nil
		}
	}
}

// turnOnSocketMode is the fix when Slack has no Socket Mode for the app.
const turnOnSocketMode = "turn on Socket Mode under Settings → Socket Mode in the app's configuration"

// disconnect is Slack's request for a new connection.
type disconnect struct{ Reason string }

func (d *disconnect) Error() string {
	if d.Reason == "too_many_websockets" {
		// Slack allows an app ten Socket Mode connections: the others are
		// most likely another Perch (or program) with the same app token.
		return "slack: Slack refused another Socket Mode connection for this app (too_many_websockets); stop the other programs using channels.slack.app_token, or give this board an app of its own"
	}
	return fmt.Sprintf("slack: Slack asked for a new connection (%s)", d.Reason)
}

// dial opens a Socket Mode connection: apps.connections.open with the
// app-level token, then the WebSocket it names.
func (c *Channel) dial(ctx context.Context, dialer *websocket.Dialer) (*websocket.Conn, error) {
	octx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	target, err := c.api.connectionsOpen(octx)
	if err != nil {
		return nil, err
	}
	ws, resp, err := dialer.DialContext(octx, target, http.Header{"Origin": {"https://api.slack.com"}})
	if err != nil {
		// The URL carries a one-time ticket: it stays out of the error.
		if resp != nil {
			return nil, fmt.Errorf("slack: opening the Socket Mode WebSocket: %w (HTTP %s)", err, resp.Status)
		}
		return nil, fmt.Errorf("slack: opening the Socket Mode WebSocket: %w", err)
	}
	return ws, nil
}

// serve reads one connection's frames until it fails, Slack asks for a
// reconnect, Slack stops pinging for PingTimeout, or ctx ends. hello
// reports whether Slack greeted the connection; why is what ended it.
func (c *Channel) serve(ctx context.Context, ws *websocket.Conn, sock *socket, queue chan<- envelope, timers *sync.WaitGroup, report func(error) bool) (hello bool, why error) {
	ws.SetReadLimit(readLimit)
	sock.set(ws)
	stop := context.AfterFunc(ctx, func() { ws.Close() })
	defer func() {
		stop()
		sock.set(nil)
		ws.Close()
	}()
	// Slack pings every few seconds; every ping moves the read deadline,
	// so a connection that stays open but carries nothing (a half-dead
	// path) fails its read and is replaced.
	ws.SetReadDeadline(time.Now().Add(c.opts.PingTimeout))
	ws.SetPingHandler(func(data string) error {
		ws.SetReadDeadline(time.Now().Add(c.opts.PingTimeout))
		// A pong that cannot be written shows as a failed read soon.
		_ = ws.WriteControl(websocket.PongMessage, []byte(data), time.Now().Add(writeWait))
		return nil
	})
	for {
		_, data, err := ws.ReadMessage()
		if err != nil {
			return hello, err
		}
		var f frame
		if err := json.Unmarshal(data, &f); err != nil {
			c.log.Debug("Socket Mode frame not understood", "err", err)
			continue
		}
		switch f.Type {
		case "hello":
			hello = true
			c.state.Connected()
			report(nil)
		case "disconnect":
			return hello, &disconnect{Reason: f.Reason}
		case "events_api", "slash_commands":
			if f.EnvelopeID == "" {
				continue
			}
			env := c.arm(ctx, sock, f.EnvelopeID, timers)
			env.payload = f.Payload
			select {
			case queue <- env:
			case <-ctx.Done():
				env.done(false)
				return hello, ctx.Err()
			}
		case "interactive":
			// Not used by the bot, but Slack resends what is not
			// acknowledged.
			if f.EnvelopeID != "" {
				if err := sock.ack(f.EnvelopeID); err != nil {
					c.log.Debug("acknowledging an envelope failed", "err", err)
				}
			}
		default:
			c.log.Debug("Socket Mode frame ignored", "type", f.Type)
		}
	}
}

// arm returns an envelope whose acknowledgement goes out when the worker
// is done with it (and it is durable) or after AckWithin, whichever comes
// first. Once ctx ends nothing is acknowledged: Slack delivers again.
func (c *Channel) arm(ctx context.Context, sock *socket, id string, timers *sync.WaitGroup) envelope {
	var once sync.Once
	ack := func() {
		once.Do(func() {
			if ctx.Err() != nil {
				return
			}
			if err := sock.ack(id); err != nil && ctx.Err() == nil {
				c.log.Debug("acknowledging an envelope failed", "err", err)
			}
		})
	}
	timers.Add(1)
	t := time.AfterFunc(c.opts.AckWithin, func() {
		defer timers.Done()
		ack()
	})
	return envelope{done: func(ok bool) {
		if t.Stop() {
			timers.Done()
			if ok {
				ack()
			}
		}
	}}
}
