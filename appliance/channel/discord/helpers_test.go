package discord

import (
	"context"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/channel"
	"github.com/perchhq/perch/appliance/channel/channeltest"
	"github.com/perchhq/perch/appliance/channel/discord/discordtest"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/provider/providertest"
)

func testOptions() options {
	return options{
		Backoff:       channel.Backoff{Min: 20 * time.Millisecond, Max: 200 * time.Millisecond},
		SendBackoff:   channel.Backoff{Min: 10 * time.Millisecond, Max: 100 * time.Millisecond},
		IntakeBackoff: channel.Backoff{Min: 100 * time.Millisecond, Max: 200 * time.Millisecond},
		StartWait:     5 * time.Second, HelloTimeout: 2 * time.Second,
	}
}

func newFake(t *testing.T) *discordtest.Server {
	t.Helper()
	f := discordtest.New()
	t.Cleanup(f.Close)
	return f
}

var (
	ann = discordtest.User{ID: "111", Username: "ann", GlobalName: "Ann"}
	bob = discordtest.User{ID: "222", Username: "bob"}
)

func section(f *discordtest.Server, token string, mutate func(*config.ChannelSection)) config.ChannelSection {
	s := &config.BotChannel{Enabled: true, Token: config.Secret(token), APIBase: f.APIBase()}
	sec := config.ChannelSection{Name: Name, Enabled: true, APIBase: f.APIBase(), Settings: s,
		Credentials: []config.SecretState{{Path: "channels.discord.token", Set: true}}}
	if mutate != nil {
		mutate(&sec)
	}
	return sec
}

type harness struct {
	fake *discordtest.Server
	env  *channeltest.Env
	ch   *Channel
}

type setup struct {
	env     channeltest.Options
	token   string
	section func(*config.ChannelSection)
}

func start(t *testing.T, f *discordtest.Server, s setup) *harness {
	t.Helper()
	h, err := tryStart(t, f, s)
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	return h
}

func tryStart(t *testing.T, f *discordtest.Server, s setup) (*harness, error) {
	t.Helper()
	env := channeltest.New(t, s.env)
	tok := s.token
	if tok == "" {
		tok = f.Token
	}
	ch, err := newChannel(env.Deps(section(f, tok, s.section)), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	return &harness{fake: f, env: env, ch: ch}, env.Start(ch)
}

func (h *harness) connected(t *testing.T) {
	t.Helper()
	waitFor(t, "the Discord channel to connect", func() bool { ok, _ := h.ch.Check(context.Background()); return ok })
}

func waitSent(t *testing.T, f *discordtest.Server, n int) []discordtest.Sent {
	t.Helper()
	got := f.WaitSent(n, 10*time.Second)
	if len(got) < n {
		t.Fatalf("%d messages sent, want %d: %+v", len(got), n, got)
	}
	return got
}

func quiet(t *testing.T, f *discordtest.Server, n int, d time.Duration) {
	t.Helper()
	time.Sleep(d)
	if got := f.Sent(); len(got) != n {
		t.Fatalf("%d messages sent, want %d: %+v", len(got), n, got)
	}
}

func lastUser(t *testing.T, p *providertest.Server) string {
	t.Helper()
	reqs := p.Requests()
	if len(reqs) == 0 {
		t.Fatal("the model was never asked")
	}
	return providertest.LastUser(reqs[len(reqs)-1].Body)
}

// dm is a direct message from u.
func dm(u discordtest.User, text string) discordtest.Message {
	return discordtest.Message{ChannelID: "dm-" + u.ID, Author: u, Content: text}
}

// guild is a message from u in the server's #general.
func guild(u discordtest.User, text string, mentions ...discordtest.User) discordtest.Message {
	return discordtest.Message{ChannelID: "500", GuildID: "400", Author: u, Content: text, Mentions: mentions}
}

func outbound(t *testing.T, h *harness, out bus.Outbound) {
	t.Helper()
	out.Channel = Name
	if err := h.env.Bus.PublishOutbound(out); err != nil {
		t.Fatal(err)
	}
}

// settled waits until no more messages come for a while and returns the
// count.
func settled(t *testing.T, f *discordtest.Server) int {
	t.Helper()
	n := len(f.Sent())
	for {
		time.Sleep(300 * time.Millisecond)
		m := len(f.Sent())
		if m == n {
			return n
		}
		n = m
	}
}
