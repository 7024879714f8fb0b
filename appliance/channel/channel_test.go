package channel

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/perchhq/perch/appliance/bus"
)

// fakeChannel stands in for a chat platform connection: it records what the
// manager asks of it.
type fakeChannel struct {
	name     string
	startErr error
	stopErr  error
	checkOK  bool
	checkMsg string

	mu      sync.Mutex
	started int
	stopped int
	sent    []bus.Outbound
	sendErr error
	got     chan bus.Outbound
}

func newFake(name string) *fakeChannel {
	return &fakeChannel{name: name, checkOK: true, checkMsg: name + " connected", got: make(chan bus.Outbound, 16)}
}

func (f *fakeChannel) Name() string { return f.name }

func (f *fakeChannel) Start(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.startErr != nil {
		return f.startErr
	}
	f.started++
	return nil
}

func (f *fakeChannel) Stop(context.Context) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped++
	return f.stopErr
}

func (f *fakeChannel) Send(_ context.Context, m bus.Outbound) error {
	f.mu.Lock()
	f.sent = append(f.sent, m)
	err := f.sendErr
	f.mu.Unlock()
	f.got <- m
	return err
}

func (f *fakeChannel) Check(context.Context) (bool, string) { return f.checkOK, f.checkMsg }

func (f *fakeChannel) counts() (started, stopped, sent int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.started, f.stopped, len(f.sent)
}

// await returns the next message the channel was asked to send.
func (f *fakeChannel) await(t *testing.T) bus.Outbound {
	t.Helper()
	select {
	case m := <-f.got:
		return m
	case <-time.After(5 * time.Second):
		t.Fatalf("channel %s received nothing", f.name)
		return bus.Outbound{}
	}
}

// logBuffer collects JSON log records; the dispatcher writes from its own
// goroutine.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.buf.Write(p)
}

func (l *logBuffer) records(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.buf.String()), "\n") {
		if line == "" {
			continue
		}
		var r map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("log line %q: %v", line, err)
		}
		out = append(out, r)
	}
	return out
}

// find returns the first record with msg.
func (l *logBuffer) find(t *testing.T, msg string) map[string]any {
	t.Helper()
	for _, r := range l.records(t) {
		if r["msg"] == msg {
			return r
		}
	}
	return nil
}

func newManager(t *testing.T, size int) (*Manager, *bus.Bus, *logBuffer) {
	t.Helper()
	b := bus.New(size)
	logs := &logBuffer{}
	m := NewManager(b, slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	return m, b, logs
}

func startManager(t *testing.T, m *Manager) {
	t.Helper()
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop(context.Background()) })
}

func TestDispatcherDeliversToTheNamedChannel(t *testing.T) {
	m, b, _ := newManager(t, 8)
	tg, sl := newFake("telegram"), newFake("slack")
	m.Register(tg)
	m.Register(sl)
	startManager(t, m)

	want := bus.Outbound{Channel: "slack", ChatID: "C1", Text: "hi slack", ReplyTo: "m9"}
	if err := b.PublishOutbound(want); err != nil {
		t.Fatal(err)
	}
	if got := sl.await(t); got.Channel != want.Channel || got.ChatID != want.ChatID || got.Text != want.Text || got.ReplyTo != want.ReplyTo {
		t.Errorf("slack got %+v, want %+v", got, want)
	}
	if err := b.PublishOutbound(bus.Outbound{Channel: "telegram", ChatID: "42", Text: "hi telegram"}); err != nil {
		t.Fatal(err)
	}
	if got := tg.await(t); got.ChatID != "42" || got.Text != "hi telegram" {
		t.Errorf("telegram got %+v", got)
	}
	if _, _, n := sl.counts(); n != 1 {
		t.Errorf("slack sent %d messages, want 1 (the telegram one must not reach it)", n)
	}
}

// Messages on internal channels are logged and reach no platform; messages
// for an unregistered channel are dropped with a warning.
func TestDispatcherLogsInternalAndDropsUnknown(t *testing.T) {
	m, b, logs := newManager(t, 8)
	tg := newFake("telegram")
	m.Register(tg)
	startManager(t, m)

	for _, out := range []bus.Outbound{
		{Channel: bus.ChannelCLI, ChatID: "c", Text: "for the cli"},
		{Channel: bus.ChannelSystem, ChatID: "cron-1", Text: "for the system"},
		{Channel: bus.ChannelSubagent, ChatID: "s", Text: "for a subagent"},
		{Channel: "nonesuch", ChatID: "7", Text: "for nobody"},
		{Channel: "telegram", ChatID: "42", Text: "marker"},
	} {
		if err := b.PublishOutbound(out); err != nil {
			t.Fatal(err)
		}
	}
	// The dispatcher handles messages in order: once the marker arrived, the
	// four before it were dealt with.
	if got := tg.await(t); got.Text != "marker" {
		t.Fatalf("telegram got %q first, want the marker (internal or unknown messages leaked)", got.Text)
	}

	var internal []string
	for _, r := range logs.records(t) {
		if r["msg"] == "message on internal channel" {
			if r["level"] != "INFO" {
				t.Errorf("internal message logged at %v, want INFO", r["level"])
			}
			internal = append(internal, r["channel"].(string)+"="+r["text"].(string))
		}
	}
	want := []string{"cli=for the cli", "system=for the system", "subagent=for a subagent"}
	if strings.Join(internal, ",") != strings.Join(want, ",") {
		t.Errorf("internal messages logged: %q, want %q", internal, want)
	}
	r := logs.find(t, "message for an unknown channel dropped")
	if r == nil {
		t.Fatal("no warning for the unknown channel")
	}
	if r["level"] != "WARN" || r["channel"] != "nonesuch" || r["chat"] != "7" {
		t.Errorf("unknown-channel record = %v, want WARN naming channel nonesuch, chat 7", r)
	}
	if _, _, n := tg.counts(); n != 1 {
		t.Errorf("telegram sent %d messages, want 1", n)
	}
}

// A long internal message is logged clipped, still as valid text.
func TestInternalMessageLogClipped(t *testing.T) {
	m, b, logs := newManager(t, 8)
	tg := newFake("telegram")
	m.Register(tg)
	startManager(t, m)

	long := "x" + strings.Repeat("é", 300) // odd offset: a cut at byte 200 splits a rune
	b.PublishOutbound(bus.Outbound{Channel: bus.ChannelCLI, Text: long})
	b.PublishOutbound(bus.Outbound{Channel: "telegram", ChatID: "1", Text: "marker"})
	tg.await(t)

	r := logs.find(t, "message on internal channel")
	if r == nil {
		t.Fatal("internal message not logged")
	}
	text := r["text"].(string)
	if !strings.HasSuffix(text, "…") {
		t.Errorf("logged text does not end in …: %q", text)
	}
	body := strings.TrimSuffix(text, "…")
	if !utf8.ValidString(body) || strings.ContainsRune(body, utf8.RuneError) || !strings.HasPrefix(long, body) {
		t.Errorf("clipped text is not a clean prefix of the message: %q", text)
	}
	if len(body) > 200 {
		t.Errorf("clipped text is %d bytes, want at most 200", len(body))
	}
}

// A failed send is a warning, and the dispatcher goes on with the next
// message.
func TestDispatcherSurvivesSendFailure(t *testing.T) {
	m, b, logs := newManager(t, 8)
	tg := newFake("telegram")
	tg.sendErr = errors.New("telegram: 400 chat not found")
	m.Register(tg)
	startManager(t, m)

	b.PublishOutbound(bus.Outbound{Channel: "telegram", ChatID: "1", Text: "one"})
	b.PublishOutbound(bus.Outbound{Channel: "telegram", ChatID: "2", Text: "two"})
	tg.await(t)
	if got := tg.await(t); got.Text != "two" {
		t.Errorf("second send = %q, want two", got.Text)
	}
	// The warning for "one" was written before "two" was handed over.
	r := logs.find(t, "sending failed")
	if r == nil || r["level"] != "WARN" || r["channel"] != "telegram" || !strings.Contains(r["err"].(string), "chat not found") {
		t.Errorf("send failure record = %v, want a WARN naming the channel and the error", r)
	}
}

// A channel whose Start fails stops the ones started before it, leaves the
// rest alone, and the error names the channel and its config section.
func TestStartFailureStopsStartedChannels(t *testing.T) {
	m, b, _ := newManager(t, 8)
	a, bad, z := newFake("alpha"), newFake("discord"), newFake("zulu")
	bad.startErr = errors.New("token rejected (401)")
	for _, c := range []*fakeChannel{z, bad, a} {
		m.Register(c)
	}
	err := m.Start(context.Background())
	if err == nil {
		t.Fatal("Start succeeded with a failing channel")
	}
	for _, want := range []string{"channel discord", "token rejected (401)", "channels.discord"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
	if !errors.Is(err, bad.startErr) {
		t.Errorf("error does not wrap the channel's error")
	}
	if started, stopped, _ := a.counts(); started != 1 || stopped != 1 {
		t.Errorf("alpha (started before the failure): started %d, stopped %d; want 1, 1", started, stopped)
	}
	if started, stopped, _ := z.counts(); started != 0 || stopped != 0 {
		t.Errorf("zulu (after the failure): started %d, stopped %d; want 0, 0", started, stopped)
	}
	// No dispatcher runs: an outbound message stays queued.
	b.PublishOutbound(bus.Outbound{Channel: "alpha", ChatID: "1", Text: "x"})
	if err := m.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, _, n := a.counts(); n != 0 || b.OutboundDepth() != 1 {
		t.Errorf("a message was dispatched after a failed Start (sent %d, queued %d)", n, b.OutboundDepth())
	}
}

func TestChecks(t *testing.T) {
	m, _, _ := newManager(t, 1)
	good, down := newFake("telegram"), newFake("slack")
	down.checkOK, down.checkMsg = false, "socket mode disconnected"
	m.Register(good)
	m.Register(down)
	m.Unavailable("line", "this build of perch has no line channel yet")

	checks := m.Checks()
	if len(checks) != 3 {
		t.Fatalf("checks = %d, want 3: %v", len(checks), checks)
	}
	tests := []struct {
		name   string
		ok     bool
		substr string
	}{
		{"channel:telegram", true, "telegram connected"},
		{"channel:slack", false, "socket mode disconnected"},
		{"channel:line", false, "no line channel"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fn, ok := checks[tt.name]
			if !ok {
				t.Fatalf("no check %s", tt.name)
			}
			gotOK, msg := fn(context.Background())
			if gotOK != tt.ok || !strings.Contains(msg, tt.substr) {
				t.Errorf("%s = %v %q, want %v with %q", tt.name, gotOK, msg, tt.ok, tt.substr)
			}
		})
	}
	if names := m.Names(); strings.Join(names, ",") != "slack,telegram" {
		t.Errorf("Names() = %v, want the registered channels sorted (not the unavailable one)", names)
	}
}

// Stop ends the dispatcher (later messages stay queued) and stops every
// channel, joining their errors with the channel's name.
func TestStopStopsDispatcherAndChannels(t *testing.T) {
	m, b, _ := newManager(t, 8)
	tg, sl := newFake("telegram"), newFake("slack")
	sl.stopErr = errors.New("socket close timed out")
	m.Register(tg)
	m.Register(sl)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.PublishOutbound(bus.Outbound{Channel: "telegram", ChatID: "1", Text: "before"})
	tg.await(t)

	err := m.Stop(context.Background())
	if err == nil || !strings.Contains(err.Error(), "channel slack") || !errors.Is(err, sl.stopErr) {
		t.Errorf("Stop = %v, want the slack error named and wrapped", err)
	}
	for _, c := range []*fakeChannel{tg, sl} {
		if _, stopped, _ := c.counts(); stopped != 1 {
			t.Errorf("%s stopped %d times, want 1", c.name, stopped)
		}
	}
	b.PublishOutbound(bus.Outbound{Channel: "telegram", ChatID: "1", Text: "after"})
	if _, _, n := tg.counts(); n != 1 || b.OutboundDepth() != 1 {
		t.Errorf("after Stop: sent %d, queued %d; want 1 sent, 1 queued", n, b.OutboundDepth())
	}
}

// The dispatcher ends when the bus closes, so Stop does not hang.
func TestDispatcherEndsWhenBusCloses(t *testing.T) {
	m, b, _ := newManager(t, 1)
	m.Register(newFake("telegram"))
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.Close()
	done := make(chan error, 1)
	go func() { done <- m.Stop(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Stop hung after the bus closed")
	}
}

// A Start context that ends later does not stop the dispatcher: the
// gateway's start-up context is not its lifetime.
func TestDispatcherOutlivesStartContext(t *testing.T) {
	m, b, _ := newManager(t, 4)
	tg := newFake("telegram")
	m.Register(tg)
	ctx, cancel := context.WithCancel(context.Background())
	if err := m.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop(context.Background()) })
	cancel()
	b.PublishOutbound(bus.Outbound{Channel: "telegram", ChatID: "1", Text: "still here"})
	if got := tg.await(t); got.Text != "still here" {
		t.Errorf("got %q", got.Text)
	}
}

// TestStopOnlyStopsStartedChannelsOnce: after a failed start, a later Stop
// does not stop channels that never ran, and a second Stop stops nothing.
func TestStopOnlyStopsStartedChannelsOnce(t *testing.T) {
	m := NewManager(bus.New(4), nil)
	good := &countingChannel{name: "a"}
	bad := &countingChannel{name: "b", startErr: errors.New("rejected")}
	m.Register(good)
	m.Register(bad)
	if err := m.Start(context.Background()); err == nil {
		t.Fatal("start succeeded")
	}
	m.Stop(context.Background())
	m.Stop(context.Background())
	if good.stops != 1 || bad.stops != 0 {
		t.Fatalf("stops: good %d (want 1), failed %d (want 0)", good.stops, bad.stops)
	}
	ok := &countingChannel{name: "c"}
	m2 := NewManager(bus.New(4), nil)
	m2.Register(ok)
	if err := m2.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	m2.Stop(context.Background())
	m2.Stop(context.Background())
	if ok.stops != 1 {
		t.Fatalf("stopped %d times", ok.stops)
	}
}

type countingChannel struct {
	name     string
	startErr error
	stops    int
}

func (c *countingChannel) Name() string                             { return c.name }
func (c *countingChannel) Start(context.Context) error              { return c.startErr }
func (c *countingChannel) Stop(context.Context) error               { c.stops++; return nil }
func (c *countingChannel) Send(context.Context, bus.Outbound) error { return nil }
func (c *countingChannel) Check(context.Context) (bool, string)     { return true, "" }

// blockingChannel's Send waits for its context, as a send waiting out a
// long rate limit does.
type blockingChannel struct{ *fakeChannel }

func (b blockingChannel) Send(ctx context.Context, m bus.Outbound) error {
	b.got <- m
	<-ctx.Done()
	return ctx.Err()
}

// A stop does not wait out a send's long rate limit: the senders get
// StopDrain, and the channels still stop within the stop's deadline. It
// took the whole deadline, and the channels after it failed to stop.
func TestStopCutsALongSendShort(t *testing.T) {
	m, b, _ := newManager(t, 8)
	tg := blockingChannel{newFake("telegram")}
	m.Register(tg)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	b.PublishOutbound(bus.Outbound{Channel: "telegram", ChatID: "1", Text: "slow"})
	tg.await(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	began := time.Now()
	if err := m.Stop(ctx); err != nil {
		t.Errorf("Stop = %v", err)
	}
	if d := time.Since(began); d > StopDrain+2*time.Second {
		t.Errorf("Stop took %s, want about %s", d.Round(time.Millisecond), StopDrain)
	}
	if _, stopped, _ := tg.counts(); stopped != 1 {
		t.Errorf("the channel stopped %d times, want 1", stopped)
	}
}
