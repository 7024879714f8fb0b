package discord

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/channel/channeltest"
)

// TestMessagesWrittenWhileStoppedAreAnswered: Discord does not deliver
// again what was written while the gateway was stopped, so after a
// restart the channel fetches it from the chats it talks in and answers
// it, oldest first. A server's message fetched keeps the server rules
// (Discord's fetch does not say the server): one without a mention stays
// unanswered. Those messages were lost.
func TestMessagesWrittenWhileStoppedAreAnswered(t *testing.T) {
	f := newFake(t)
	h1 := start(t, f, setup{})
	h1.connected(t)
	f.Post(dm(ann, "hello"))
	f.Post(guild(ann, "<@"+f.Bot.ID+"> hi all", f.Bot))
	waitSent(t, f, 2)
	h1.env.Stop()

	f.Post(dm(ann, "are the lights off?"))
	f.Post(guild(bob, "chatter nobody asked the bot about"))
	f.Post(guild(ann, "<@"+f.Bot.ID+"> is the door shut?", f.Bot))
	f.Post(dm(ann, "and the heating?"))
	f.Post(dm(bob, "a chat the bot never talked in"))

	h2 := start(t, f, setup{env: channeltest.Options{StorePath: h1.env.StorePath, Provider: h1.env.Provider, Workspace: h1.env.Workspace}})
	h2.connected(t)
	got := waitSent(t, f, 5)
	quiet(t, f, 5, 400*time.Millisecond)
	answers := map[string][]string{}
	for _, s := range got[2:] {
		answers[s.ChannelID] = append(answers[s.ChannelID], s.Content)
	}
	if a := strings.Join(answers["dm-"+ann.ID], " | "); a != "echo: are the lights off? | echo: and the heating?" {
		t.Errorf("the direct messages written while stopped were answered %q; want both, in order", a)
	}
	if a := strings.Join(answers["500"], " | "); a != "echo: is the door shut?" {
		t.Errorf("the server's messages written while stopped were answered %q; want only the one that mentions the bot", a)
	}
	if f.Stats().Fetches == 0 {
		t.Error("nothing was fetched")
	}

	// A third start finds nothing new: what was fetched is not fetched
	// and answered again.
	h2.env.Stop()
	h3 := start(t, f, setup{env: channeltest.Options{StorePath: h1.env.StorePath, Provider: h1.env.Provider, Workspace: h1.env.Workspace}})
	h3.connected(t)
	f.Post(dm(ann, "last"))
	waitSent(t, f, 6)
	quiet(t, f, 6, 300*time.Millisecond)
}

// The cursor keeps the newest message id and the chats talked in, the
// newest first and at most catchUpChats, without a write for each
// message of a busy chat.
func TestCursorKeepsTheChatsTalkedIn(t *testing.T) {
	var c cursor
	now := time.Now()
	msg := func(id, chat, guild string) *message { return &message{ID: id, ChannelID: chat, GuildID: guild} }
	if !c.saw(msg("100", "a", ""), true, now) || c.Last != "100" || len(c.Chats) != 1 {
		t.Fatalf("after the first message: %+v", c)
	}
	if c.saw(msg("90", "a", ""), true, now.Add(time.Second)) {
		t.Error("an older message in the newest chat, a second later, changed the cursor")
	}
	if !c.saw(msg("110", "b", "g"), false, now) || c.Last != "110" || len(c.Chats) != 1 {
		t.Errorf("a message that did not reach the agent: %+v; want the mark moved and no chat added", c)
	}
	for i := range catchUpChats + 5 {
		c.saw(msg(strconv.Itoa(200+i), "c"+strconv.Itoa(i), "g"), true, now)
	}
	if len(c.Chats) != catchUpChats || c.Chats[0].ID != "c"+strconv.Itoa(catchUpChats+4) || c.Chats[0].Guild != "g" {
		t.Errorf("after %d chats: %d kept, newest %+v", catchUpChats+5, len(c.Chats), c.Chats[0])
	}
	c.saw(msg("99999", "c10", "g"), true, now)
	if c.Chats[0].ID != "c10" || len(c.Chats) != catchUpChats {
		t.Errorf("a chat talked in again moves first: %+v", c.Chats[:2])
	}
}

// Snowflakes count milliseconds since 2015 above bit 22.
func TestSnowflakeAt(t *testing.T) {
	// Discord's documented example: 175928847299117063 is 2016-04-30 11:18:25.796 UTC.
	at := time.Date(2016, 4, 30, 11, 18, 25, 796e6, time.UTC)
	if got, id := snowflakeAt(at), snowflake("175928847299117063"); got > id || id-got >= 1<<22 {
		t.Errorf("snowflakeAt(%v) = %d; the documented id %d is not within its millisecond", at, got, id)
	}
	if snowflake("x") != 0 || snowflakeAt(time.Unix(0, 0)) != 0 {
		t.Error("not an id, or a time before 2015, is not 0")
	}
}
