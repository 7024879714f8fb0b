package appliance

import (
	"context"
	"log/slog"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/channel/discord/discordtest"
	"github.com/perchhq/perch/appliance/channel/slack/slacktest"
	"github.com/perchhq/perch/appliance/config"
)

// startWithChannel runs a whole gateway in-process like startSystem, with
// the config adjusted (a chat channel pointed at its fake).
func startWithChannel(tb testing.TB, providerBase string, adjust func(*config.Config)) *System {
	tb.Helper()
	tb.Setenv("PERCH_HOME", tb.TempDir())
	cfg, err := config.Load(config.Options{Env: func(string) (string, bool) { return "", false }})
	if err != nil {
		tb.Fatal(err)
	}
	cfg.Gateway.Port = 0
	cfg.Gateway.APIToken = "t"
	cfg.Providers.OpenRouter.APIKey = "k"
	cfg.Providers.OpenRouter.APIBase = providerBase
	cfg.Agents.Defaults.Model = "openai/gpt-4o-mini"
	adjust(cfg)
	sys, err := NewCore(context.Background(), cfg, slog.New(slog.DiscardHandler))
	if err != nil {
		tb.Fatal(err)
	}
	if err := sys.BuildGateway(); err != nil {
		tb.Fatal(err)
	}
	if err := sys.Start(context.Background()); err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { sys.Stop(context.Background()) })
	return sys
}

// BenchmarkSlackMessageTurn is one Slack direct message answered end to
// end: the envelope over Socket Mode, its ack, the intake (dedupe record and
// durable inbox), the turn, chat.postMessage. Compare with
// BenchmarkChatSerial for the channel's overhead over a /chat turn.
func BenchmarkSlackMessageTurn(b *testing.B) {
	fake := instantProvider()
	defer fake.Close()
	f := slacktest.New()
	defer f.Close()
	startWithChannel(b, fake.URL, func(c *config.Config) {
		c.Channels.Slack = config.SlackChannel{Enabled: true, BotToken: config.Secret(f.BotToken), AppToken: config.Secret(f.AppToken), APIBase: f.APIBase()}
	})
	n := 0
	for b.Loop() {
		f.PostMessage(slacktest.Message{Channel: "D1", ChannelType: "im", User: "U1", Text: "hello, how are you today?"})
		n++
		if got := f.WaitPosted(n, 10*time.Second); len(got) < n {
			b.Fatalf("message %d not answered", n)
		}
	}
}

// BenchmarkDiscordMessageTurn is one Discord direct message answered end
// to end: MESSAGE_CREATE over the gateway WebSocket, the intake, the turn,
// the REST reply.
func BenchmarkDiscordMessageTurn(b *testing.B) {
	fake := instantProvider()
	defer fake.Close()
	f := discordtest.New()
	defer f.Close()
	startWithChannel(b, fake.URL, func(c *config.Config) {
		c.Channels.Discord = config.BotChannel{Enabled: true, Token: config.Secret(f.Token), APIBase: f.APIBase()}
	})
	deadline := time.Now().Add(10 * time.Second)
	for f.Stats().Identifies == 0 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	n := 0
	for b.Loop() {
		f.Post(discordtest.Message{ChannelID: "700", Author: discordtest.User{ID: "111", Username: "ann"}, Content: "hello, how are you today?"})
		n++
		if got := f.WaitSent(n, 10*time.Second); len(got) < n {
			b.Fatalf("message %d not answered", n)
		}
	}
}
