package main

import (
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/channel/discord/discordtest"
	"github.com/perchhq/perch/appliance/channel/slack/slacktest"
)

// maxChannelRSSKiB bounds what one connected chat channel may add to the
// idle gateway's resident memory (a 512 MB board runs several channels).
const maxChannelRSSKiB = 4 << 10

// TestChatChannelIdleRSS measures the resident memory Slack and Discord add
// to an idle gateway: three gateways (none, Slack, Discord) each answer one
// message, then wait past the idle trim; the channel's cost is the
// difference with the gateway without channels.
func TestChatChannelIdleRSS(t *testing.T) {
	sf := slacktest.New()
	defer sf.Close()
	df := discordtest.New()
	defer df.Close()
	none := NewHome(t, nil).Start()
	withSlack := NewHome(t, slackConfig(sf.APIBase(), sf.BotToken, sf.AppToken)).Start()
	withDiscord := NewHome(t, discordConfig(df.APIBase(), df.Token)).Start()
	waitCheck(t, withSlack, "channel:slack", true)
	waitCheck(t, withDiscord, "channel:discord", true)

	// Warm: one turn each, through the channel where there is one.
	none.MustChat("cli:warm", "hello")
	sf.PostMessage(slacktest.Message{Channel: "D1", ChannelType: "im", User: "U1", Text: "hello"})
	df.Post(discordtest.Message{ChannelID: "700", Author: discordtest.User{ID: "111", Username: "ann"}, Content: "hello"})
	if len(sf.WaitPosted(1, 20*time.Second)) != 1 || len(df.WaitSent(1, 20*time.Second)) != 1 {
		t.Fatal("a warm-up message was not answered")
	}
	// The gateway trims its working set after 15-30 s without a turn.
	time.Sleep(35 * time.Second)
	base := rssKiB(t, none.Cmd.Process.Pid, "VmRSS")
	for _, c := range []struct {
		name string
		g    *Gateway
	}{{"slack", withSlack}, {"discord", withDiscord}} {
		rss := rssKiB(t, c.g.Cmd.Process.Pid, "VmRSS")
		t.Logf("idle RSS: %s %d KiB, no channel %d KiB: %+d KiB", c.name, rss, base, rss-base)
		if rss-base > maxChannelRSSKiB {
			t.Errorf("the %s channel adds %d KiB to the idle gateway, over %d KiB", c.name, rss-base, maxChannelRSSKiB)
		}
	}
}
