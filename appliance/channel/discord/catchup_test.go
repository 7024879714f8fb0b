package discord

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/channel/channeltest"
	"github.com/perchhq/perch/appliance/channel/discord/discordtest"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/store"
)

// TestMessagesWrittenWhileStoppedAreAnswered: Discord does not deliver
// again what was written while the gateway was stopped, so after a
// restart the channel fetches it from the chats it talks in and answers
// it, oldest first. A server's message fetched keeps the server rules
// (Discord's fetch does not say the server): one without a mention stays
// unanswered. Those messages were lost.
func TestMessagesWrittenWhileStoppedAreAnswered(t *testing.T) {
	f := newFake(t)
	h1 := stoppedAfterTalking(t, f, setup{})

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
// message of a busy chat; a chat new to the list says so (it is written
// at once), and one moved first keeps where its next fetch begins.
func TestCursorKeepsTheChatsTalkedIn(t *testing.T) {
	var c cursor
	now := time.Now()
	msg := func(id, chat, guild string) *message { return &message{ID: id, ChannelID: chat, GuildID: guild} }
	if changed, added := c.saw(msg("100", "a", ""), true, now); !changed || !added || c.Last != "100" || len(c.Chats) != 1 {
		t.Fatalf("after the first message: %v %v %+v", changed, added, c)
	}
	if changed, added := c.saw(msg("90", "a", ""), true, now.Add(time.Second)); changed || added {
		t.Error("an older message in the newest chat, a second later, changed the cursor")
	}
	if changed, added := c.saw(msg("110", "b", "g"), false, now); !changed || added || c.Last != "110" || len(c.Chats) != 1 {
		t.Errorf("a message that did not reach the agent: %+v; want the mark moved and no chat added", c)
	}
	for i := range catchUpChats + 5 {
		c.saw(msg(strconv.Itoa(200+i), "c"+strconv.Itoa(i), "g"), true, now)
	}
	if len(c.Chats) != catchUpChats || c.Chats[0].ID != "c"+strconv.Itoa(catchUpChats+4) || c.Chats[0].Guild != "g" {
		t.Errorf("after %d chats: %d kept, newest %+v", catchUpChats+5, len(c.Chats), c.Chats[0])
	}
	i := slices.IndexFunc(c.Chats, func(r chatRef) bool { return r.ID == "c10" })
	c.Chats[i].From = "150"
	if _, added := c.saw(msg("99999", "c10", "g"), true, now); added || c.Chats[0].ID != "c10" || c.Chats[0].From != "150" || len(c.Chats) != catchUpChats {
		t.Errorf("a chat talked in again moves first, keeping its From: %+v", c.Chats[:2])
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

// stoppedAfterTalking starts a gateway, has Ann talk to it in a direct
// message and in a server channel, and stops it.
func stoppedAfterTalking(t *testing.T, f *discordtest.Server, s setup) *harness {
	t.Helper()
	h := start(t, f, s)
	h.connected(t)
	f.Post(dm(ann, "hello"))
	f.Post(guild(ann, "<@"+f.Bot.ID+"> hi all", f.Bot))
	waitSent(t, f, 2)
	h.env.Stop()
	return h
}

// annSaidHello starts a gateway that admits Ann, who says hello in a
// direct message and is answered.
func annSaidHello(t *testing.T, f *discordtest.Server) *harness {
	t.Helper()
	h := start(t, f, setup{section: func(s *config.ChannelSection) { s.AllowFrom = []string{"ann"} }})
	h.connected(t)
	f.Post(dm(ann, "hello"))
	waitSent(t, f, 1)
	return h
}

// restart stops h's gateway (if it runs) and starts another on its
// database.
func restart(t *testing.T, h *harness) *harness {
	t.Helper()
	h.env.Stop()
	h2 := start(t, h.fake, setup{env: channeltest.Options{StorePath: h.env.StorePath, Provider: h.env.Provider, Workspace: h.env.Workspace},
		section: func(s *config.ChannelSection) { s.AllowFrom = []string{"ann"} }})
	h2.connected(t)
	return h2
}

// A fetch that fails for now is tried again; one that fails for good this
// session keeps the chat's place, so the next session still answers what
// was written there, though other chats moved the mark on meanwhile.
func TestAFailedFetchIsTriedAgainLater(t *testing.T) {
	f := newFake(t)
	h := stoppedAfterTalking(t, f, setup{section: func(s *config.ChannelSection) { s.AllowFrom = []string{"ann"} }})

	f.Post(dm(ann, "first while stopped"))
	f.FailFetches("dm-"+ann.ID, 1) // once: tried again at once
	h = restart(t, h)
	if got := waitSent(t, f, 3)[2]; got.Content != "echo: first while stopped" {
		t.Errorf("after one failed fetch: %+v", got)
	}
	h.env.Stop()

	f.Post(dm(ann, "second while stopped"))
	f.Post(guild(ann, "<@"+f.Bot.ID+"> and in the server", f.Bot))
	f.FailFetches("dm-"+ann.ID, catchUpTries) // fails for this session
	h = restart(t, h)
	if got := waitSent(t, f, 4)[3]; got.Content != "echo: and in the server" {
		t.Errorf("the server channel's fetch: %+v", got)
	}
	quiet(t, f, 4, 300*time.Millisecond)
	f.Post(dm(bob, "a stranger's message moves the mark on")) // answered with a pairing code
	waitSent(t, f, 5)
	h = restart(t, h)
	if got := waitSent(t, f, 6)[5]; got.Content != "echo: second while stopped" {
		t.Errorf("the next session: %+v, want the message of the failed fetch", got)
	}
	quiet(t, f, 6, 300*time.Millisecond)
	h.env.Stop()
}

// A stop in the middle of the catch-up loses nothing: one chat's messages
// fetched but not yet received, the chat whose fetch the stop cut off, and
// a message the session delivered meanwhile (queued behind the catch-up)
// are all answered by the next session, each once, in order. A
// starting point saved past them, or the queued message dropped with the
// mark moved past it, would lose them for good: Discord delivers nothing
// again.
func TestAStopDuringTheCatchUpLosesNothing(t *testing.T) {
	f := newFake(t)
	h1 := stoppedAfterTalking(t, f, setup{}) // chats: the server's, then Ann's direct one

	f.Post(guild(ann, "<@"+f.Bot.ID+"> is the door shut?", f.Bot))
	f.Post(dm(ann, "are the lights off?"))
	arrived, release := f.StallFetches("dm-" + ann.ID)
	defer release()
	opts := channeltest.Options{StorePath: h1.env.StorePath, Provider: h1.env.Provider, Workspace: h1.env.Workspace}
	h2 := start(t, f, setup{env: opts})
	select {
	case <-arrived: // the server's chat is fetched; the direct one hangs
	case <-time.After(10 * time.Second):
		t.Fatal("the catch-up never fetched the direct chat")
	}
	h2.connected(t)
	f.Post(dm(ann, "and the heating?")) // delivered to this session, queued
	time.Sleep(100 * time.Millisecond)
	h2.env.Stop()
	quiet(t, f, 2, 200*time.Millisecond) // nothing answered by the stopped session

	release()
	h3 := start(t, f, setup{env: opts})
	h3.connected(t)
	got := waitSent(t, f, 5)
	quiet(t, f, 5, 400*time.Millisecond)
	// Chats are answered side by side; within one, in order.
	answers := map[string][]string{}
	for _, s := range got[2:] {
		answers[s.ChannelID] = append(answers[s.ChannelID], s.Content)
	}
	if a := answers["500"]; !slices.Equal(a, []string{"echo: is the door shut?"}) {
		t.Errorf("the server's chat, whose fetch the stop let through, was answered %q", a)
	}
	if a := answers["dm-"+ann.ID]; !slices.Equal(a, []string{"echo: are the lights off?", "echo: and the heating?"}) {
		t.Errorf("the direct chat, whose fetch the stop cut off, was answered %q; want both messages, in order", a)
	}
}

// The chats kept are those whose messages reach the agent: strangers
// answered with a pairing code do not push the owner's chat out. And a
// chat new to the list is kept at once, not at the next periodic write: a
// power cut right after the first exchange lost it.
func TestTheChatsKeptAreTheOwners(t *testing.T) {
	f := newFake(t)
	h := annSaidHello(t, f)
	// Before the periodic write (every cursorSaveEvery).
	var cur cursor
	for deadline := time.Now().Add(cursorSaveEvery / 2); ; time.Sleep(5 * time.Millisecond) {
		ok, err := h.ch.in.LoadState(cursorKey, &cur)
		if err == nil && ok && len(cur.Chats) == 1 && cur.Chats[0].ID == "dm-"+ann.ID {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the new chat was not kept at once: %+v, %v", cur, err)
		}
	}
	for i := range catchUpChats + 1 {
		stranger := discordtest.User{ID: strconv.Itoa(7000 + i), Username: "stranger" + strconv.Itoa(i)}
		f.Post(dm(stranger, "let me in"))
	}
	waitSent(t, f, 1+catchUpChats+1) // the pairing answers
	h.env.Stop()
	f.Post(dm(ann, "written while stopped"))
	restart(t, h)
	if got := waitSent(t, f, catchUpChats+3); got[len(got)-1].Content != "echo: written while stopped" {
		t.Errorf("after the strangers: %+v, want the owner's message answered", got[len(got)-1])
	}
}

// More messages than one call brings are fetched page after page.
func TestManyMessagesAreFetchedInPages(t *testing.T) {
	f := newFake(t)
	h := annSaidHello(t, f)
	h.env.Stop()
	n := catchUpPage + 30
	for i := range n {
		f.Post(dm(ann, "note "+strconv.Itoa(i)))
	}
	restart(t, h)
	got := waitSent(t, f, 1+n)
	if last := got[len(got)-1].Content; !strings.HasPrefix(last, "echo: note ") {
		t.Errorf("last answer %q", last)
	}
	quiet(t, f, 1+n, 300*time.Millisecond)
}

// The mark moves with every message and is written within
// cursorSaveEvery, without a stop: a power cut loses at most that much,
// which the next fetch asks again and the inbox knows.
func TestTheMarkIsWrittenWhileRunning(t *testing.T) {
	f := newFake(t)
	h := annSaidHello(t, f)
	m := f.Post(dm(ann, "a second message in a chat already kept"))
	waitSent(t, f, 2)
	var cur cursor
	for deadline := time.Now().Add(cursorSaveEvery + 2*time.Second); ; time.Sleep(20 * time.Millisecond) {
		if ok, err := h.ch.in.LoadState(cursorKey, &cur); err == nil && ok && snowflake(cur.Last) >= snowflake(m.ID) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the mark was not written while running: %+v, want at least %s", cur, m.ID)
		}
	}
}

// A chat whose last message reached the agent days ago is still fetched:
// someone who writes once a week is answered after a restart. Chats were
// passed over a day after they were last talked in.
func TestAChatQuietForDaysIsFetched(t *testing.T) {
	f := newFake(t)
	h := stoppedAfterTalking(t, f, setup{section: func(s *config.ChannelSection) { s.AllowFrom = []string{"ann"} }})
	db, err := store.Open(h.env.StorePath, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	var cur cursor
	if err := db.Get(store.BucketChannels, Name+"/"+cursorKey, &cur); err != nil {
		t.Fatal(err)
	}
	for i := range cur.Chats {
		cur.Chats[i].At = time.Now().Add(-3 * 24 * time.Hour).Unix()
	}
	if err := db.Put(store.BucketChannels, Name+"/"+cursorKey, cur); err != nil {
		t.Fatal(err)
	}
	db.Close()
	f.Post(dm(ann, "are you there?"))
	restart(t, h)
	if got := waitSent(t, f, 3)[2]; got.Content != "echo: are you there?" {
		t.Errorf("after a restart, three days after the chat was last talked in: %+v", got)
	}
}

// A sender the owner approves has their chat fetched too: what they wrote
// after the approval, while the gateway restarted, was lost, since their
// chat had never reached the agent.
func TestAnApprovedSendersChatIsFetched(t *testing.T) {
	f := newFake(t)
	h := annSaidHello(t, f)
	f.Post(dm(bob, "may I?"))
	answer := waitSent(t, f, 2)[1]
	_, rest, ok := strings.Cut(answer.Content, "approve ")
	if !ok {
		t.Fatalf("no pairing code in %q", answer.Content)
	}
	if _, err := h.env.Hub.Approve(strings.Fields(rest)[0]); err != nil {
		t.Fatal(err)
	}
	waitSent(t, f, 3) // "You have been approved"
	h.env.Stop()
	f.Post(dm(bob, "thanks, written while stopped"))
	h2 := start(t, f, setup{env: channeltest.Options{StorePath: h.env.StorePath, Provider: h.env.Provider, Workspace: h.env.Workspace},
		section: func(s *config.ChannelSection) { s.AllowFrom = []string{"ann", bob.ID} }}) // as the approval saved it
	h2.connected(t)
	if got := waitSent(t, f, 4)[3]; got.Content != "echo: thanks, written while stopped" || got.ChannelID != "dm-"+bob.ID {
		t.Errorf("after the restart: %+v", got)
	}
}
