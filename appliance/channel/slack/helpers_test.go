package slack

import (
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/channel"
	"github.com/perchhq/perch/appliance/channel/channeltest"
	"github.com/perchhq/perch/appliance/channel/slack/slacktest"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/provider/providertest"
)

// testOptions are production's with the waits shortened.
func testOptions() options {
	return options{
		PingTimeout: 400 * time.Millisecond, AckWithin: 2500 * time.Millisecond, StartWait: 5 * time.Second,
		Backoff:     channel.Backoff{Min: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		SendBackoff: channel.Backoff{Min: 10 * time.Millisecond, Max: 100 * time.Millisecond},
	}
}

// newFake starts a Slack fake that pings often, so the short PingTimeout
// of testOptions holds.
func newFake(t *testing.T) *slacktest.Server {
	t.Helper()
	f := slacktest.New()
	f.SetPingInterval(50 * time.Millisecond)
	t.Cleanup(f.Close)
	f.AddUser(slacktest.User{ID: "U1", Name: "ann", RealName: "Ann Example", DisplayName: "Ann"})
	f.AddUser(slacktest.User{ID: "U2", Name: "bob", RealName: "Bob Example"})
	return f
}

func section(apiBase, bot, app string, mutate func(*config.ChannelSection)) config.ChannelSection {
	s := &config.SlackChannel{Enabled: true, BotToken: config.Secret(bot), AppToken: config.Secret(app), APIBase: apiBase}
	sec := config.ChannelSection{Name: Name, Enabled: true, APIBase: apiBase, Settings: s,
		Credentials: []config.SecretState{{Path: "channels.slack.bot_token", Set: true}, {Path: "channels.slack.app_token", Set: true}}}
	if mutate != nil {
		mutate(&sec)
	}
	return sec
}

// harness is a Slack channel running against a fake, with the agent.
type harness struct {
	fake *slacktest.Server
	env  *channeltest.Env
	ch   *Channel
}

type setup struct {
	env     channeltest.Options
	section func(*config.ChannelSection)
	opts    func(*options)
}

func start(t *testing.T, f *slacktest.Server, s setup) *harness {
	t.Helper()
	h, err := tryStart(t, f, s)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	return h
}

func tryStart(t *testing.T, f *slacktest.Server, s setup) (*harness, error) {
	t.Helper()
	env := channeltest.New(t, s.env)
	o := testOptions()
	if s.opts != nil {
		s.opts(&o)
	}
	ch, err := newChannel(env.Deps(section(f.APIBase(), f.BotToken, f.AppToken, s.section)), o)
	if err != nil {
		t.Fatal(err)
	}
	return &harness{fake: f, env: env, ch: ch}, env.Start(ch)
}

// connected waits until the channel's check passes.
func (h *harness) connected(t *testing.T) {
	t.Helper()
	waitFor(t, "the Slack channel to connect", func() bool { ok, _ := h.ch.Check(context.Background()); return ok })
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// waitPosted waits for the n-th post and returns all.
func waitPosted(t *testing.T, f *slacktest.Server, n int) []slacktest.Posted {
	t.Helper()
	got := f.WaitPosted(n, 10*time.Second)
	if len(got) < n {
		t.Fatalf("%d messages posted, want %d: %+v", len(got), n, got)
	}
	return got
}

// quiet asserts nothing more is posted for a while.
func quiet(t *testing.T, f *slacktest.Server, n int, d time.Duration) {
	t.Helper()
	time.Sleep(d)
	if got := f.Posted(); len(got) != n {
		t.Fatalf("%d messages posted, want %d: %+v", len(got), n, got)
	}
}

// lastUser is the last user message the model saw.
func lastUser(t *testing.T, p *providertest.Server) string {
	t.Helper()
	reqs := p.Requests()
	if len(reqs) == 0 {
		t.Fatal("the model was never asked")
	}
	return providertest.LastUser(reqs[len(reqs)-1].Body)
}

func settle() {
	for i := 0; i < 5; i++ {
		runtime.GC()
		time.Sleep(20 * time.Millisecond)
	}
}

func heapInUse() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapInuse
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// outbound has the agent send an image file to chat and thread.
func outbound(t *testing.T, h *harness, chat, thread, path string) {
	t.Helper()
	err := h.env.Bus.PublishOutbound(bus.Outbound{Channel: Name, ChatID: chat, ThreadID: thread, Media: []bus.Media{{Kind: "image", Path: path}}})
	if err != nil {
		t.Fatal(err)
	}
}

// settled waits until no more messages come for a while and returns the
// count.
func settled(t *testing.T, f *slacktest.Server) int {
	t.Helper()
	n := len(f.Posted())
	for {
		time.Sleep(300 * time.Millisecond)
		m := len(f.Posted())
		if m == n {
			return n
		}
		n = m
	}
}
