package discord

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/channel"
	"github.com/perchhq/perch/appliance/channel/discord/discordtest"
)

// gwRun is a gateway running against a fake in a test.
type gwRun struct {
	g      *gateway
	msgs   chan discordtest.Message
	ready  chan readyUser
	conns  chan error
	done   chan struct{}
	err    error
	cancel context.CancelFunc
}

func runGateway(t *testing.T, f *discordtest.Server, token string) *gwRun {
	t.Helper()
	r := &gwRun{
		msgs: make(chan discordtest.Message, 100), ready: make(chan readyUser, 100),
		conns: make(chan error, 1000), done: make(chan struct{}),
	}
	r.g = newGateway(gatewayConfig{
		Token: token,
		URL:   func(context.Context) (string, error) { return f.GatewayURL(), nil },
		Dispatch: func(ctx context.Context, typ string, data json.RawMessage) {
			if typ != "MESSAGE_CREATE" {
				return
			}
			var m discordtest.Message
			if err := json.Unmarshal(data, &m); err != nil {
				t.Errorf("MESSAGE_CREATE: %v", err)
			}
			r.msgs <- m
		},
		Ready:        func(u readyUser) { r.ready <- u },
		Connected:    func(ok bool, err error) { r.conns <- err },
		Log:          slog.New(slog.DiscardHandler),
		Backoff:      channel.Backoff{Min: 5 * time.Millisecond, Max: 50 * time.Millisecond},
		HelloTimeout: 2 * time.Second,
	})
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	go func() { r.err = r.g.run(ctx); close(r.done) }()
	t.Cleanup(func() {
		cancel()
		select {
		case <-r.done:
		case <-time.After(5 * time.Second):
			t.Error("gateway did not stop")
		}
	})
	return r
}

func (r *gwRun) waitMsg(t *testing.T, want string) {
	t.Helper()
	select {
	case m := <-r.msgs:
		if m.Content != want {
			t.Fatalf("got message %q, want %q", m.Content, want)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("message %q never arrived", want)
	}
}

func (r *gwRun) waitReady(t *testing.T) readyUser {
	t.Helper()
	select {
	case u := <-r.ready:
		return u
	case <-r.done:
		t.Fatalf("gateway ended before READY: %v", r.err)
	case <-time.After(5 * time.Second):
		t.Fatal("no READY")
	}
	return readyUser{}
}

// waitConnected waits for the next successful connection (READY or RESUMED).
func (r *gwRun) waitConnected(t *testing.T) {
	t.Helper()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case err := <-r.conns:
			if err == nil {
				return
			}
		case <-deadline:
			t.Fatal("never (re)connected")
		}
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestGatewayIdentifiesWithMessageContentIntent(t *testing.T) {
	f := discordtest.New()
	defer f.Close()
	r := runGateway(t, f, f.Token)
	u := r.waitReady(t)
	if u.ID != f.Bot.ID || u.Username != "perch" {
		t.Errorf("READY user = %+v", u)
	}
	if st := f.Stats(); st.Intents&intentMessageContent == 0 || st.Intents&intentGuildMessages == 0 || st.Intents&intentDirectMessages == 0 {
		t.Errorf("identified with intents %b: message content, guild and direct messages are all needed", st.Intents)
	}
	// A guild message that does not mention the bot keeps its content only
	// thanks to the message content intent.
	f.Post(discordtest.Message{ChannelID: "10", GuildID: "20", Author: discordtest.User{ID: "30", Username: "ann"}, Content: "hello"})
	r.waitMsg(t, "hello")
}

func TestGatewayResumesAfterDropAtResumeURL(t *testing.T) {
	f := discordtest.New()
	defer f.Close()
	r := runGateway(t, f, f.Token)
	r.waitReady(t)
	r.waitConnected(t)
	f.Post(discordtest.Message{ChannelID: "10", Content: "before"})
	r.waitMsg(t, "before")
	f.Drop()
	// Sent while the connection is down: a resume replays it.
	f.Post(discordtest.Message{ChannelID: "10", Content: "during"})
	r.waitConnected(t)
	r.waitMsg(t, "during")
	f.Post(discordtest.Message{ChannelID: "10", Content: "after"})
	r.waitMsg(t, "after")
	st := f.Stats()
	if st.Identifies != 1 || st.Resumes != 1 || st.ResumesAtResumeURL != 1 {
		t.Errorf("identifies %d, resumes %d (%d at resume_gateway_url); want 1, 1, 1", st.Identifies, st.Resumes, st.ResumesAtResumeURL)
	}
}

func TestGatewayReconnectRequestResumes(t *testing.T) {
	f := discordtest.New()
	defer f.Close()
	r := runGateway(t, f, f.Token)
	r.waitConnected(t)
	f.Reconnect()
	r.waitConnected(t)
	f.Post(discordtest.Message{ChannelID: "10", Content: "still here"})
	r.waitMsg(t, "still here")
	if st := f.Stats(); st.Resumes != 1 || st.Identifies != 1 {
		t.Errorf("after op 7: resumes %d identifies %d, want 1 and 1", st.Resumes, st.Identifies)
	}
}

func TestGatewayInvalidSessionIdentifiesAgain(t *testing.T) {
	f := discordtest.New()
	defer f.Close()
	r := runGateway(t, f, f.Token)
	r.waitReady(t)
	f.RefuseResume(true)
	f.Drop()
	r.waitReady(t) // a second READY: a new session
	f.Post(discordtest.Message{ChannelID: "10", Content: "new session"})
	r.waitMsg(t, "new session")
	if st := f.Stats(); st.Identifies != 2 {
		t.Errorf("identifies = %d, want 2 (resume refused, then identify)", st.Identifies)
	}
}

// TestGatewayWatchdogReplacesWedgedConnection: a socket that stays open
// while its heartbeats go unacknowledged (and nothing arrives) is closed
// and the session resumed on a new one, where the events it swallowed
// are replayed.
func TestGatewayWatchdogReplacesWedgedConnection(t *testing.T) {
	f := discordtest.New()
	defer f.Close()
	f.SetHeartbeatInterval(100 * time.Millisecond)
	r := runGateway(t, f, f.Token)
	r.waitConnected(t)
	f.Wedge()
	f.Post(discordtest.Message{ChannelID: "10", Content: "swallowed by the wedged socket"})
	start := time.Now()
	r.waitMsg(t, "swallowed by the wedged socket")
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("replacing the wedged connection took %v; the watchdog should act within two heartbeat intervals", d)
	}
	st := f.Stats()
	if st.Connections != 2 || st.Resumes != 1 || st.Open != 1 {
		t.Errorf("connections %d resumes %d open %d; want 2, 1, 1", st.Connections, st.Resumes, st.Open)
	}
}

func TestGatewayRefusedTokenIsFatal(t *testing.T) {
	f := discordtest.New()
	defer f.Close()
	r := runGateway(t, f, "wrong-token")
	select {
	case <-r.done:
		err := r.err
		var ge *gatewayError
		if !errors.As(err, &ge) || !ge.Fatal || !ge.Auth || ge.Code != 4004 {
			t.Fatalf("run = %v, want a fatal auth error with close 4004", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a refused token did not end the gateway")
	}
	if st := f.Stats(); st.Connections != 1 {
		t.Errorf("connections = %d: a refused token must not be retried", st.Connections)
	}
}

func TestGatewayDisallowedIntentIsFatal(t *testing.T) {
	f := discordtest.New()
	defer f.Close()
	f.DisallowMessageContent(true)
	r := runGateway(t, f, f.Token)
	select {
	case <-r.done:
		err := r.err
		var ge *gatewayError
		if !errors.As(err, &ge) || !ge.Fatal || ge.Auth || ge.Code != 4014 {
			t.Fatalf("run = %v, want a fatal error with close 4014", err)
		}
		if !strings.Contains(err.Error(), "Message Content Intent") {
			t.Errorf("error %q does not say which setting to enable", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a disallowed intent did not end the gateway")
	}
}

func TestGatewayStopEndsSession(t *testing.T) {
	f := discordtest.New()
	defer f.Close()
	r := runGateway(t, f, f.Token)
	r.waitConnected(t)
	r.cancel()
	select {
	case <-r.done:
		if r.err != nil {
			t.Errorf("run after cancel = %v", r.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("gateway did not stop")
	}
	waitFor(t, "the connection to close", func() bool { return f.Stats().Open == 0 })
}

// TestGatewayFiftyDropsLeaveNothingBehind: 50 forced drops, each resumed;
// goroutines, connections and heap do not grow.
func TestGatewayFiftyDropsLeaveNothingBehind(t *testing.T) {
	f := discordtest.New()
	defer f.Close()
	r := runGateway(t, f, f.Token)
	r.waitConnected(t)
	// One round first so lazily started goroutines (HTTP keep-alives) exist.
	f.Drop()
	r.waitConnected(t)
	settle()
	g0, h0 := runtime.NumGoroutine(), heap()
	for i := 0; i < 50; i++ {
		f.Drop()
		r.waitConnected(t)
	}
	f.Post(discordtest.Message{ChannelID: "10", Content: "after 50 drops"})
	r.waitMsg(t, "after 50 drops")
	settle()
	g1, h1 := runtime.NumGoroutine(), heap()
	if g1 > g0+2 {
		t.Errorf("goroutines grew from %d to %d over 50 reconnects", g0, g1)
	}
	if st := f.Stats(); st.Open != 1 || st.Resumes != 51 {
		t.Errorf("open connections %d, resumes %d; want 1 and 51", st.Open, st.Resumes)
	}
	if h1 > h0+512<<10 {
		t.Errorf("heap grew from %d KiB to %d KiB over 50 reconnects", h0>>10, h1>>10)
	}
}

func settle() {
	for i := 0; i < 5; i++ {
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
}

func heap() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

// TestGatewayIdentifiesAnewWhenTheResumeHostStaysDown: READY's
// resume_gateway_url stops answering (a gateway node retired) while
// GET /gateway/bot names a healthy gateway: after a few failed resumes
// the bot starts a new session there instead of retrying the dead host
// for ever.
func TestGatewayIdentifiesAnewWhenTheResumeHostStaysDown(t *testing.T) {
	f := discordtest.New()
	defer f.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "ws://" + ln.Addr().String()
	ln.Close() // nothing listens there any more
	f.SetResumeURL(dead)
	r := runGateway(t, f, f.Token)
	r.waitReady(t)
	f.Drop()
	r.waitReady(t) // a second READY: a new session at the gateway URL
	f.Post(discordtest.Message{ChannelID: "10", Content: "after"})
	r.waitMsg(t, "after")
	if st := f.Stats(); st.Identifies != 2 || st.Resumes != 0 {
		t.Errorf("identifies %d resumes %d; want a second identify and no resume", st.Identifies, st.Resumes)
	}
}
