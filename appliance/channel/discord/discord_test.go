package discord

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/channel/channeltest"
	"github.com/perchhq/perch/appliance/channel/discord/discordtest"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/provider/providertest"
)

// TestDirectMessageAnswered: a direct message reaches the agent; the
// answer replies to it in the same channel, pings nobody else, and a
// typing indicator showed meanwhile.
func TestDirectMessageAnswered(t *testing.T) {
	f := newFake(t)
	h := start(t, f, setup{})
	h.connected(t)
	m := f.Post(dm(ann, "hello there"))
	s := waitSent(t, f, 1)[0]
	if s.ChannelID != m.ChannelID || s.ReplyTo != m.ID || s.Content != "echo: hello there" {
		t.Errorf("sent %+v; want echo: hello there replying to %s in %s", s, m.ID, m.ChannelID)
	}
	var body struct {
		AllowedMentions struct {
			Parse []string `json:"parse"`
		} `json:"allowed_mentions"`
	}
	if json.Unmarshal(s.Raw, &body); body.AllowedMentions.Parse == nil || len(body.AllowedMentions.Parse) != 0 {
		t.Errorf("allowed_mentions %s; the bot's text must not ping @everyone, roles or users", s.Raw)
	}
	if f.Typing(m.ChannelID) == 0 {
		t.Error("no typing indicator while the agent worked")
	}
	quiet(t, f, 1, 100*time.Millisecond)
}

// TestGuildMentionRules: in a server channel only a mention (metadata,
// the bot's name as text, its user id) or a reply to the bot is answered,
// and the mention never reaches the model.
func TestGuildMentionRules(t *testing.T) {
	f := newFake(t)
	h := start(t, f, setup{})
	h.connected(t)
	f.Post(guild(ann, "just chatting"))
	quiet(t, f, 0, 200*time.Millisecond)
	if n := h.env.Provider.Calls(); n != 0 {
		t.Fatalf("the model was asked %d times about a message not for the bot", n)
	}
	n := 0
	for _, c := range []struct {
		m    discordtest.Message
		want string
	}{
		{guild(ann, "<@"+f.Bot.ID+"> what is the temperature?", f.Bot), "what is the temperature?"},
		{guild(ann, "<@!"+f.Bot.ID+"> nickname form", f.Bot), "nickname form"},
		{guild(ann, "@Perch, typed by hand"), "typed by hand"},
		{guild(ann, f.Bot.ID+" by id"), "by id"},
	} {
		f.Post(c.m)
		n++
		waitSent(t, f, n)
		if got := lastUser(t, h.env.Provider); got != c.want {
			t.Errorf("%q: the model read %q, want %q", c.m.Content, got, c.want)
		}
	}
	// A reply to one of the bot's messages needs no mention.
	botMsg := discordtest.Message{ID: "777", ChannelID: "500", GuildID: "400", Author: f.Bot, Content: "earlier answer"}
	reply := guild(ann, "and tomorrow?")
	reply.Type = 19
	reply.MessageReference = &discordtest.Reference{MessageID: "777", ChannelID: "500", GuildID: "400"}
	reply.ReferencedMessage = &botMsg
	f.Post(reply)
	n++
	if s := waitSent(t, f, n)[n-1]; s.Content != "echo: and tomorrow?" {
		t.Errorf("reply to the bot answered %q", s.Content)
	}
	// Messages of bots, the bot's own included, are not answered.
	f.Post(discordtest.Message{ChannelID: "dm-9", Author: discordtest.User{ID: "9", Username: "otherbot", Bot: true}, Content: "beep"})
	f.Post(discordtest.Message{ChannelID: "dm-9", Author: f.Bot, Content: "my own words"})
	quiet(t, f, n, 200*time.Millisecond)
}

// TestAllowFrom: a listed sender (by username) reaches the model; another
// gets one pairing answer and nothing reaches the model.
func TestAllowFrom(t *testing.T) {
	f := newFake(t)
	h := start(t, f, setup{section: func(s *config.ChannelSection) { s.AllowFrom = []string{"ann"} }})
	h.connected(t)
	m := f.Post(dm(bob, "let me in"))
	s := waitSent(t, f, 1)[0]
	if s.ChannelID != m.ChannelID || !strings.Contains(s.Content, "perch channels approve") {
		t.Errorf("stranger got %+v; want a pairing answer", s)
	}
	f.Post(dm(bob, "please?"))
	quiet(t, f, 1, 200*time.Millisecond)
	if n := h.env.Provider.Calls(); n != 0 {
		t.Fatalf("a stranger's message reached the model (%d calls)", n)
	}
	f.Post(dm(ann, "hi, it's Ann"))
	if s := waitSent(t, f, 2)[1]; s.Content != "echo: hi, it's Ann" {
		t.Errorf("allowed sender answered %q", s.Content)
	}
}

// TestLongReplySplit: a reply over 2,000 characters arrives whole, in
// order, in parts within the limit; the first part replies to the message.
func TestLongReplySplit(t *testing.T) {
	f := newFake(t)
	h := start(t, f, setup{})
	var paras []string
	for i := 0; i < 25; i++ {
		paras = append(paras, "Paragraph "+strings.Repeat("é", 300)+" number "+string(rune('A'+i)))
	}
	long := strings.Join(paras, "\n\n")
	h.env.Provider.Enqueue(providertest.Reply{Content: long})
	h.connected(t)
	m := f.Post(dm(ann, "tell me everything"))
	waitSent(t, f, 4)
	settled(t, f)
	var got []string
	for i, s := range f.Sent() {
		if n := utf8.RuneCountInString(s.Content); n > textLimit {
			t.Errorf("part %d has %d characters, over %d", i, n, textLimit)
		}
		if (i == 0) != (s.ReplyTo == m.ID) {
			t.Errorf("part %d replies to %q; only the first should reply to %s", i, s.ReplyTo, m.ID)
		}
		got = append(got, strings.TrimSpace(s.Content))
	}
	if strings.Join(got, "\n\n") != long {
		t.Errorf("the parts joined differ from the reply (%d parts)", len(got))
	}
}

// TestFormattingRejectedFallsBackToPlainText: content Discord refuses
// (Invalid Form Body) is sent again as plain text, once.
func TestFormattingRejectedFallsBackToPlainText(t *testing.T) {
	f := newFake(t)
	f.RejectContent(func(c string) bool { return strings.Contains(c, "**") })
	h := start(t, f, setup{})
	h.env.Provider.Enqueue(providertest.Reply{Content: "The __fan__ is **on**."})
	h.connected(t)
	f.Post(dm(ann, "fan?"))
	s := waitSent(t, f, 1)[0]
	if s.Content != "The fan is on." {
		t.Errorf("sent %q; want the plain text", s.Content)
	}
	quiet(t, f, 1, 100*time.Millisecond)
}

// TestRateLimitHonoured: a 429 with retry_after delays the reply by as
// much, and it is sent once.
func TestRateLimitHonoured(t *testing.T) {
	f := newFake(t)
	h := start(t, f, setup{})
	h.connected(t)
	f.RateLimit("user", 700*time.Millisecond)
	start := time.Now()
	f.Post(dm(ann, "hi"))
	s := waitSent(t, f, 1)[0]
	if d := s.At.Sub(start); d < 700*time.Millisecond {
		t.Errorf("reply sent %v after the message; retry_after asked for 700ms", d)
	}
	quiet(t, f, 1, 100*time.Millisecond)
}

// TestResumeReplayAnsweredOnce: after a drop the session is resumed; the
// event replayed from before the drop is not answered again, the one sent
// during the drop is answered.
func TestResumeReplayAnsweredOnce(t *testing.T) {
	f := newFake(t)
	h := start(t, f, setup{})
	h.connected(t)
	f.Post(dm(ann, "before the drop"))
	waitSent(t, f, 1)
	f.ResumeOverlap(1) // Discord replays the last event the bot already had
	f.Drop()
	f.Post(dm(ann, "during the drop"))
	got := waitSent(t, f, 2)
	quiet(t, f, 2, 300*time.Millisecond)
	if got[1].Content != "echo: during the drop" {
		t.Errorf("after the resume %q was sent", got[1].Content)
	}
	if st := f.Stats(); st.Resumes != 1 || st.Identifies != 1 {
		t.Errorf("resumes %d identifies %d, want 1 and 1", st.Resumes, st.Identifies)
	}
}

// TestRestartNeverAnswersTwice: a message answered before a restart and
// seen again after it is not answered again; a turn cut short by the
// shutdown is answered once after it.
func TestRestartNeverAnswersTwice(t *testing.T) {
	f := newFake(t)
	h1 := start(t, f, setup{})
	h1.connected(t)
	first := f.Post(dm(ann, "first"))
	waitSent(t, f, 1)
	release := make(chan struct{})
	p := h1.env.Provider
	p.Default = func(req providertest.ChatRequest) providertest.Reply {
		if providertest.LastUser(req) == "second" {
			<-release
		}
		return providertest.Reply{Content: "echo: " + providertest.LastUser(req)}
	}
	f.Post(dm(ann, "second"))
	waitFor(t, "the second turn to start", func() bool { return p.Calls() == 2 })
	h1.env.Stop()
	close(release)

	h2 := start(t, f, setup{env: channeltest.Options{StorePath: h1.env.StorePath, Provider: p, Workspace: h1.env.Workspace}})
	h2.connected(t)
	f.Post(first) // the same message (same id) seen again
	got := waitSent(t, f, 2)
	quiet(t, f, 2, 300*time.Millisecond)
	if got[1].Content != "echo: second" {
		t.Errorf("after the restart %q was sent; want the interrupted turn's answer", got[1].Content)
	}
}

// TestFiftyReconnectsLeaveNothingBehind: 50 forced reconnects (drops,
// reconnect requests, invalidated sessions) leave no goroutine,
// connection or memory behind, and the channel still answers.
func TestFiftyReconnectsLeaveNothingBehind(t *testing.T) {
	f := newFake(t)
	h := start(t, f, setup{})
	h.connected(t)
	cycle := func(i int) {
		conns := f.Stats().Connections
		switch i % 3 {
		case 0:
			f.Drop()
		case 1:
			f.Reconnect()
		case 2:
			f.CloseAll(discordtest.CloseUnknownError, "unknown error")
		}
		waitFor(t, "a new connection", func() bool { st := f.Stats(); return st.Connections > conns && st.Open == 1 })
		h.connected(t)
	}
	cycle(0)
	settle()
	g0, h0 := runtime.NumGoroutine(), heap()
	for i := 0; i < 50; i++ {
		cycle(i)
	}
	f.Post(dm(ann, "still there?"))
	waitSent(t, f, 1)
	settle()
	g1, h1 := runtime.NumGoroutine(), heap()
	// A goroutine left by each reconnect would be 50 more; the last
	// message's idle keep-alive connections (to the provider and the
	// platform's API, two goroutines each) are not a leak, and under a
	// loaded machine they may not have closed yet.
	if g1 > g0+10 {
		t.Errorf("goroutines grew from %d to %d over 50 reconnects", g0, g1)
	}
	if h1 > h0+1<<20 {
		t.Errorf("heap grew from %d KiB to %d KiB over 50 reconnects", h0>>10, h1>>10)
	}
	if st := f.Stats(); st.Open != 1 || st.Identifies != 1 {
		t.Errorf("open %d identifies %d; want one connection, every reconnect a resume", st.Open, st.Identifies)
	}
}

// TestWatchdogReplacesWedgedConnection: a socket that stays open while its
// heartbeats go unacknowledged is replaced, and the message it swallowed
// is answered after the resume.
func TestWatchdogReplacesWedgedConnection(t *testing.T) {
	f := newFake(t)
	f.SetHeartbeatInterval(100 * time.Millisecond)
	h := start(t, f, setup{})
	h.connected(t)
	before := f.Stats().Connections
	f.Wedge()
	f.Post(dm(ann, "are you there?"))
	if s := waitSent(t, f, 1)[0]; s.Content != "echo: are you there?" {
		t.Errorf("sent %q", s.Content)
	}
	if st := f.Stats(); st.Connections != before+1 || st.Resumes != 1 || st.Open != 1 {
		t.Errorf("connections %d→%d, resumes %d, open %d; want the wedged one replaced by a resumed one", before, st.Connections, st.Resumes, st.Open)
	}
}

// TestRefusalsNameWhatToFix: a token refused by the REST API (401) or by
// the gateway (4004), and a message content intent the bot may not use
// (4014), make Start fail saying what to change.
func TestRefusalsNameWhatToFix(t *testing.T) {
	for _, c := range []struct {
		name string
		prep func(f *discordtest.Server)
		tok  string
		want string
	}{
		{"401", nil, "wrong-token", "channels.discord.token"},
		{"4004", func(f *discordtest.Server) { f.RefuseGatewayToken(true) }, "", "channels.discord.token"},
		{"4014", func(f *discordtest.Server) { f.DisallowMessageContent(true) }, "", "Message Content Intent"},
	} {
		t.Run(c.name, func(t *testing.T) {
			f := newFake(t)
			if c.prep != nil {
				c.prep(f)
			}
			h, err := tryStart(t, f, setup{token: c.tok})
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("Start = %v; want an error naming %s", err, c.want)
			}
			if strings.Contains(err.Error(), f.Token) || (c.tok != "" && strings.Contains(err.Error(), c.tok)) {
				t.Errorf("the error shows the token: %v", err)
			}
			h.env.Stop()
		})
	}
}

// TestUnreachableAtStart: Discord down at start does not stop the start;
// the check fails saying why, and the channel connects and answers once
// Discord is back.
func TestUnreachableAtStart(t *testing.T) {
	f := newFake(t)
	f.RESTDown(true)
	h := start(t, f, setup{})
	ok, msg := h.ch.Check(context.Background())
	if ok || !strings.Contains(msg, "cannot reach Discord") {
		t.Errorf("check = %v %q; want failing with the reason", ok, msg)
	}
	f.RESTDown(false)
	h.connected(t)
	f.Post(dm(ann, "back?"))
	waitSent(t, f, 1)
}

// TestAttachmentSaved: an image attachment is downloaded into the
// workspace for the model.
func TestAttachmentSaved(t *testing.T) {
	f := newFake(t)
	h := start(t, f, setup{})
	h.connected(t)
	img := []byte("\xff\xd8\xff\xe0fake jpeg")
	m := dm(ann, "what is this?")
	m.Attachments = []discordtest.Attachment{f.AddAttachment("photo.jpg", "image/jpeg", img)}
	f.Post(m)
	waitSent(t, f, 1)
	var found int
	filepath.WalkDir(filepath.Join(h.env.Workspace, "media", "discord"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if data, _ := os.ReadFile(p); string(data) == string(img) {
				found++
			}
		}
		return nil
	})
	if found != 1 {
		t.Errorf("the image was saved %d times under media/discord, want once", found)
	}
}

// TestImageSentAsFile: an image in the reply is uploaded as an attachment,
// replying to the message.
func TestImageSentAsFile(t *testing.T) {
	f := newFake(t)
	h := start(t, f, setup{})
	h.connected(t)
	img := []byte("\x89PNG\r\n\x1a\nfake")
	path := filepath.Join(t.TempDir(), "chart.png")
	os.WriteFile(path, img, 0o600)
	outbound(t, h, bus.Outbound{ChatID: "500", ReplyTo: "123", Media: []bus.Media{{Kind: "image", Path: path}}})
	s := waitSent(t, f, 1)[0]
	if len(s.Files) != 1 || s.Files[0] != "chart.png" || string(s.FileData[0]) != string(img) || s.ReplyTo != "123" {
		t.Errorf("sent %+v", s)
	}
}

// TestImageAtAnAddressSentAsItsAddress: an image the model names by its
// address (not a file here) goes as a message holding the address, which
// Discord shows as the picture; it was skipped with a warning only.
func TestImageAtAnAddressSentAsItsAddress(t *testing.T) {
	f := newFake(t)
	h := start(t, f, setup{})
	h.connected(t)
	outbound(t, h, bus.Outbound{ChatID: "500", Text: "Here it is.", Media: []bus.Media{{Kind: "image", URL: "https://example.com/plot.png"}}})
	s := waitSent(t, f, 2)
	if s[0].Content != "Here it is." || s[1].Content != "https://example.com/plot.png" || len(s[1].Files) != 0 {
		t.Errorf("sent %+v", s)
	}
}

// TestStopLeavesNothingBehind: stopping the channel is prompt, ends the
// Discord session (the bot shows offline at once) and leaves none of its
// goroutines.
func TestStopLeavesNothingBehind(t *testing.T) {
	f := newFake(t)
	settle()
	before := runtime.NumGoroutine()
	env := channeltest.New(t, channeltest.Options{})
	ch, err := newChannel(env.Deps(section(f, f.Token, nil)), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Start(ch); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the connection", func() bool { ok, _ := ch.Check(context.Background()); return ok })
	f.Post(dm(ann, "hello"))
	waitSent(t, f, 1)
	start := time.Now()
	env.Stop()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("stopping took %v", d)
	}
	waitFor(t, "the session to end", func() bool { return f.Stats().Open == 0 })
	// The agent's idle connection to the fake provider is the Env's, not
	// the channel's: close it too before counting.
	f.Close()
	env.Provider.CloseClientConnections()
	env.Provider.Close()
	settle()
	if after := runtime.NumGoroutine(); after > before {
		buf := make([]byte, 1<<16)
		t.Errorf("goroutines: %d before start, %d after stop:\n%s", before, after, buf[:runtime.Stack(buf, true)])
	}
}

// TestMentionOfTheBotsRoleIsAMention: in a server's @ list the bot shows
// twice, as its user and as the role Discord made for it; picking the
// role sends <@&role> (in mention_roles, not mentions). That addresses the
// bot too, and is removed like its user mention; another role does not.
func TestMentionOfTheBotsRoleIsAMention(t *testing.T) {
	f := newFake(t)
	botRole := f.BotRole("400")
	other := f.AddRole("400", discordtest.Role{Name: "gardeners", Mentionable: true}).ID
	h := start(t, f, setup{})
	h.connected(t)
	m := guild(ann, "<@&"+other+"> who waters today?")
	m.MentionRoles = []string{other}
	f.Post(m)
	quiet(t, f, 0, 300*time.Millisecond)
	m = guild(ann, "<@&"+botRole+">, what is the temperature?")
	m.MentionRoles = []string{botRole}
	m = f.Post(m)
	if s := waitSent(t, f, 1); s[0].Content != "echo: what is the temperature?" || s[0].ReplyTo != m.ID {
		t.Errorf("a mention of the bot's role answered %+v", s)
	}
	if n := h.env.Provider.Calls(); n != 1 {
		t.Errorf("the model was asked %d times; want once, not for the other role's mention", n)
	}
}

// TestMessageNotStoredIsTriedAgain: Discord delivers a message once, so
// one the store fails to take (a failing disk) is tried again, not
// dropped after a line in the log.
func TestMessageNotStoredIsTriedAgain(t *testing.T) {
	f := newFake(t)
	h := start(t, f, setup{})
	h.connected(t)
	// A value where the store keeps the bucket of Discord's seen event
	// ids makes admitting a message fail, until it is deleted.
	db := h.env.Store
	if err := db.Put("seen", Name, 1); err != nil {
		t.Fatal(err)
	}
	f.Post(dm(ann, "are you there?"))
	waitFor(t, "a failed attempt", func() bool { return h.env.Logs.Count("admit discord event") > 0 })
	if err := db.Delete("seen", Name); err != nil {
		t.Fatal(err)
	}
	if s := waitSent(t, f, 1); s[0].Content != "echo: are you there?" {
		t.Errorf("answered %+v", s)
	}
	if n := h.env.Logs.Count("is lost"); n != 0 {
		t.Errorf("the message was given up:\n%s", h.env.Logs)
	}
}
