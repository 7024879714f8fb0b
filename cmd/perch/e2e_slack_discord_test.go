package main

// End to end with the real binary: Slack and Discord channels talking to
// their loopback fakes (Socket Mode and the gateway WebSocket), the agent
// to the fake provider.

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/channel/discord/discordtest"
	"github.com/perchhq/perch/appliance/channel/slack/slacktest"
)

func slackConfig(apiBase, bot, app string) func(map[string]any) {
	return func(c map[string]any) {
		c["channels"] = map[string]any{"slack": map[string]any{
			"enabled": true, "bot_token": bot, "app_token": app, "api_base": apiBase,
		}}
	}
}

func discordConfig(apiBase, token string) func(map[string]any) {
	return func(c map[string]any) {
		c["channels"] = map[string]any{"discord": map[string]any{
			"enabled": true, "token": token, "api_base": apiBase,
		}}
	}
}

// lastLine is the last line of stderr: the one the gateway exits with.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestChatTokenRejectedExitsOne: a token the platform refuses at start
// stops the gateway with 1 and a last line naming the key to fix, without
// the token.
func TestChatTokenRejectedExitsOne(t *testing.T) {
	sf := slacktest.New()
	defer sf.Close()
	df := discordtest.New()
	defer df.Close()
	for _, c := range []struct {
		name, key, secret string
		cfg               func(map[string]any)
	}{
		{"slack bot token", "channels.slack.bot_token", "xoxb-refused-0001", slackConfig(sf.APIBase(), "xoxb-refused-0001", sf.AppToken)},
		{"slack app token", "channels.slack.app_token", "xapp-refused-0002", slackConfig(sf.APIBase(), sf.BotToken, "xapp-refused-0002")},
		{"discord token", "channels.discord.token", "refused-discord-0003", discordConfig(df.APIBase(), "refused-discord-0003")},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := NewHome(t, c.cfg)
			g := h.StartNoWait()
			if code := g.Wait(30 * time.Second); code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", code, g.Stderr())
			}
			last := lastLine(g.Stderr())
			if !strings.Contains(last, c.key) {
				t.Errorf("last stderr line %q does not name %s", last, c.key)
			}
			if strings.Contains(g.Stderr(), c.secret) {
				t.Errorf("the refused token is in the log:\n%s", g.Stderr())
			}
		})
	}
}

// TestSlackAnsweredEndToEnd: a Slack mention is answered by the real
// gateway in the message's thread, through Socket Mode.
func TestSlackAnsweredEndToEnd(t *testing.T) {
	f := slacktest.New()
	defer f.Close()
	h := NewHome(t, slackConfig(f.APIBase(), f.BotToken, f.AppToken))
	g := h.Start()
	waitCheck(t, g, "channel:slack", true)
	ts := f.PostMessage(slacktest.Message{Channel: "C1", User: "U1", Text: "<@" + f.BotUserID + "> hello from slack"})
	got := f.WaitPosted(1, 20*time.Second)
	if len(got) != 1 || got[0].Channel != "C1" || got[0].ThreadTS != ts || got[0].Text != "echo: hello from slack" {
		t.Fatalf("posted %v; want echo: hello from slack in thread %s\n%s", got, ts, g.Stderr())
	}
	// The reply can be posted before the second envelope (the mention's
	// copy of the message) is even read: its ack follows within moments.
	deadline := time.Now().Add(5 * time.Second)
	for f.Stats().Acks < 2 || f.Unacked() != 0 {
		if time.Now().After(deadline) {
			t.Errorf("acks %d, unacked %d: every envelope (message and app_mention) must be acknowledged", f.Stats().Acks, f.Unacked())
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestDiscordAnsweredEndToEnd: a Discord direct message is answered by the
// real gateway as a reply, through the gateway WebSocket.
func TestDiscordAnsweredEndToEnd(t *testing.T) {
	f := discordtest.New()
	defer f.Close()
	h := NewHome(t, discordConfig(f.APIBase(), f.Token))
	g := h.Start()
	waitCheck(t, g, "channel:discord", true)
	m := f.Post(discordtest.Message{ChannelID: "700", Author: discordtest.User{ID: "111", Username: "ann"}, Content: "hello from discord"})
	got := f.WaitSent(1, 20*time.Second)
	if len(got) != 1 || got[0].ChannelID != "700" || got[0].ReplyTo != m.ID || got[0].Content != "echo: hello from discord" {
		t.Fatalf("sent %v; want echo: hello from discord replying to %s\n%s", got, m.ID, g.Stderr())
	}
}

// TestChatPlatformUnreachableAtStart: with Slack and Discord down, the
// gateway comes up anyway, their checks fail saying so, and they recover
// when the platforms come up.
func TestChatPlatformUnreachableAtStart(t *testing.T) {
	slackAddr, discordAddr := freeAddr(t), freeAddr(t)
	h := NewHome(t, func(c map[string]any) {
		c["channels"] = map[string]any{
			"slack":   map[string]any{"enabled": true, "bot_token": "xoxb-test-bot-token", "app_token": "xapp-1-test-app-token", "api_base": "http://" + slackAddr + "/api/"},
			"discord": map[string]any{"enabled": true, "token": "discord-test-token", "api_base": "http://" + discordAddr + "/api/v10"},
		}
	})
	g := h.Start()
	for _, name := range []string{"channel:slack", "channel:discord"} {
		ok, msg := check(t, g, name)
		if ok || !(strings.Contains(msg, "unreachable") || strings.Contains(msg, "cannot reach")) {
			t.Errorf("%s = %v %q; want failing, saying the platform is unreachable", name, ok, msg)
		}
	}
	sf, err := slacktest.NewAt(slackAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer sf.Close()
	df, err := discordtest.NewAt(discordAddr)
	if err != nil {
		t.Fatal(err)
	}
	defer df.Close()
	waitCheck(t, g, "channel:slack", true)
	waitCheck(t, g, "channel:discord", true)
	f := sf
	f.PostMessage(slacktest.Message{Channel: "D1", ChannelType: "im", User: "U1", Text: "up now?"})
	if got := f.WaitPosted(1, 20*time.Second); len(got) != 1 {
		t.Fatalf("Slack message not answered after recovery:\n%s", g.Stderr())
	}
}

// freeAddr is a loopback address nothing listens on (yet).
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// check reads one /ready check (with the token, so its message shows).
func check(t *testing.T, g *Gateway, name string) (bool, string) {
	t.Helper()
	_, ready := g.Do("GET", "/ready", nil)
	checks, _ := ready["checks"].(map[string]any)
	c, _ := checks[name].(map[string]any)
	if c == nil {
		t.Fatalf("/ready has no %s check: %v", name, ready)
	}
	msg, _ := c["message"].(string)
	return c["status"] == "ok", msg
}

func waitCheck(t *testing.T, g *Gateway, name string, want bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, msg := check(t, g, name)
		if ok == want {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s stayed %v (%s)\n%s", name, ok, msg, g.Stderr())
		}
		time.Sleep(50 * time.Millisecond)
	}
}
