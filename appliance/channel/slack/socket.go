package slack

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"
	slackapi "github.com/slack-go/slack"
	"github.com/slack-go/slack/socketmode"
)

// readLimit caps one Socket Mode frame: an envelope is one event, a few
// KiB; a runaway frame must not take the board's memory.
const readLimit = 1 << 20

// envelope is an events_api request waiting for the worker.
type envelope struct {
	payload []byte
	// done acknowledges the envelope when ok (its message is durable or
	// deliberately dropped) and stops the deadline that would otherwise
	// acknowledge it anyway.
	done func(ok bool)
}

// runSocket holds the Socket Mode connection until ctx ends (nil) or
// Slack refuses the app-level token (an *authError).
func (c *Channel) runSocket(ctx context.Context, report func(error) bool) error {
	sm := socketmode.New(c.api,
		socketmode.OptionPingInterval(c.opts.PingTimeout),
		socketmode.OptionReadLimit(readLimit),
		// Acks are a few dozen bytes: the write buffer comes from a pool
		// while writing instead of staying with the idle connection.
		socketmode.OptionDialer(&websocket.Dialer{Proxy: http.ProxyFromEnvironment, HandshakeTimeout: 15 * time.Second, WriteBufferPool: &sync.Pool{}}),
		socketmode.OptionLog(discard{}),
	)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// The worker handles envelopes one at a time, in order; the reader
	// below only parses Slack's frames and arms the deadline acks, so a
	// slow store or download never delays an acknowledgement past Slack's
	// 3 s.
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
	runErr := make(chan error, 1)
	wg.Go(func() { runErr <- sm.RunContext(ctx) })
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
		select {
		case err := <-runErr:
			if ctx.Err() != nil {
				return nil
			}
			if code, ok := fatalCode(err); ok {
				return &authError{Key: "channels.slack.app_token", Code: code}
			}
			// slack-go gives up only on errors it deems final (a 404 from
			// apps.connections.open: Socket Mode is off for the app).
			return fmt.Errorf("slack: Socket Mode stopped: %w; turn on Socket Mode under Settings → Socket Mode in the app's configuration", err)
		case evt := <-sm.Events:
			switch evt.Type {
			case socketmode.EventTypeConnectionError:
				var err error = errors.New("connection failed")
				if ce, ok := evt.Data.(*slackapi.ConnectionErrorEvent); ok && ce.ErrorObj != nil {
					err = ce.ErrorObj
				}
				if code, ok := fatalCode(err); ok {
					// slack-go retries token types it does not know are
					// final (a bot token given as the app token).
					return &authError{Key: "channels.slack.app_token", Code: code}
				}
				wait := b.Next()
				if ce, ok := evt.Data.(*slackapi.ConnectionErrorEvent); ok && ce.Backoff > 0 {
					wait = ce.Backoff
				}
				c.unreachable(err, wait)
				report(nil)
			case socketmode.EventTypeConnecting:
				if st := c.state.Status(); st.Connected {
					c.state.Disconnected("reconnecting to Slack")
				}
			case socketmode.EventTypeHello:
				b.Reset()
				c.state.Connected()
				report(nil)
			case socketmode.EventTypeEventsAPI:
				if evt.Request == nil {
					continue
				}
				env := c.arm(ctx, sm, evt.Request.EnvelopeID, &timers)
				env.payload = evt.Request.Payload
				select {
				case queue <- env:
				case <-ctx.Done():
					env.done(false)
				}
			case socketmode.EventTypeSlashCommand, socketmode.EventTypeInteractive:
				// Not used by the bot, but Slack resends what is not
				// acknowledged.
				if evt.Request != nil {
					sm.AckCtx(ctx, evt.Request.EnvelopeID, nil)
				}
			case socketmode.EventTypeIncomingError, socketmode.EventTypeErrorBadMessage, socketmode.EventTypeErrorWriteFailed:
				c.log.Debug("Socket Mode frame problem", "type", evt.Type)
			}
		}
	}
}

// arm returns an envelope whose acknowledgement goes out when the worker
// is done with it (and it is durable) or after AckWithin, whichever comes
// first.
func (c *Channel) arm(ctx context.Context, sm *socketmode.Client, id string, timers *sync.WaitGroup) envelope {
	var once sync.Once
	ack := func() {
		once.Do(func() {
			if err := sm.AckCtx(ctx, id, nil); err != nil && ctx.Err() == nil {
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

// discard drops slack-go's own log lines: the channel logs what matters,
// without the payloads slack-go's debug lines carry.
type discard struct{}

func (discard) Output(int, string) error { return nil }
