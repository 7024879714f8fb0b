package slack

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/channel"
	"github.com/perchhq/perch/appliance/channel/channeltest"
	"github.com/perchhq/perch/appliance/channel/slack/slacktest"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/provider/providertest"
)

// TestDirectMessageAnswered: a direct message reaches the agent and the
// answer is posted in the same conversation, not in a thread.
func TestDirectMessageAnswered(t *testing.T) {
	f := newFake(t)
	h := start(t, f, setup{})
	h.connected(t)
	f.PostMessage(slacktest.Message{Channel: "D1", ChannelType: "im", User: "U1", Text: "hello there"})
	p := waitPosted(t, f, 1)[0]
	if p.Channel != "D1" || p.ThreadTS != "" || p.Text != "echo: hello there" {
		t.Errorf("posted %+v; want echo: hello there in D1, no thread", p)
	}
	quiet(t, f, 1, 100*time.Millisecond)
}

// TestChannelMentionAnsweredInThread: a mention in a channel is answered
// once (Slack sends both a message and an app_mention event), in a thread
// under it, with the mention removed from what the model reads; the
// thread's follow-ups reach the same session without a mention.
func TestChannelMentionAnsweredInThread(t *testing.T) {
	f := newFake(t)
	h := start(t, f, setup{})
	h.connected(t)
	ts := f.PostMessage(slacktest.Message{Channel: "C1", User: "U1", Text: "<@" + f.BotUserID + "> what is the temperature?"})
	p := waitPosted(t, f, 1)[0]
	if p.Channel != "C1" || p.ThreadTS != ts {
		t.Errorf("reply %+v; want it in C1, thread %s", p, ts)
	}
	if got := lastUser(t, h.env.Provider); got != "what is the temperature?" {
		t.Errorf("the model read %q; the mention must be removed", got)
	}
	quiet(t, f, 1, 150*time.Millisecond) // the app_mention duplicate is not answered

	f.PostMessage(slacktest.Message{Channel: "C1", User: "U1", Text: "and the humidity?", ThreadTS: ts, ParentUserID: "U1"})
	p = waitPosted(t, f, 2)[1]
	if p.ThreadTS != ts || p.Text != "echo: and the humidity?" {
		t.Errorf("follow-up reply %+v; want it in thread %s", p, ts)
	}
	info, err := h.env.Store.Session("slack:C1:" + ts)
	if err != nil || info.Count < 4 {
		t.Errorf("session slack:C1:%s has %d messages (%v); want both turns", ts, info.Count, err)
	}
}

// TestGroupMentionRules: in a channel only a mention (metadata, then the
// bot's name as text, then its user id) or a reply to the bot is
// answered.
func TestGroupMentionRules(t *testing.T) {
	f := newFake(t)
	h := start(t, f, setup{})
	h.connected(t)
	f.PostMessage(slacktest.Message{Channel: "C1", User: "U1", Text: "just chatting with people"})
	quiet(t, f, 0, 200*time.Millisecond)
	if n := h.env.Provider.Calls(); n != 0 {
		t.Fatalf("the model was asked %d times about a message not for the bot", n)
	}
	n := 0
	for _, c := range []struct{ text, want string }{
		{"@perch, turn on the fan", "echo: turn on the fan"},
		{"@PERCH status", "echo: status"},
		{f.BotUserID + " status please", "echo: status please"},
	} {
		f.PostMessage(slacktest.Message{Channel: "C1", User: "U1", Text: c.text})
		n++
		if p := waitPosted(t, f, n)[n-1]; p.Text != c.want {
			t.Errorf("%q answered %q, want %q", c.text, p.Text, c.want)
		}
	}
	// A reply in the thread of the bot's own message needs no mention.
	f.PostMessage(slacktest.Message{Channel: "C1", User: "U1", Text: "thanks, and tomorrow?", ThreadTS: "1600000000.000100", ParentUserID: f.BotUserID})
	n++
	if p := waitPosted(t, f, n)[n-1]; p.Text != "echo: thanks, and tomorrow?" || p.ThreadTS != "1600000000.000100" {
		t.Errorf("reply to the bot answered %+v", p)
	}
	// A thread between people the bot is not part of is not answered.
	f.PostMessage(slacktest.Message{Channel: "C1", User: "U2", Text: "lunch?", ThreadTS: "1600000000.000200", ParentUserID: "U1"})
	quiet(t, f, n, 200*time.Millisecond)
}

// TestAllowFrom: with allow_from set, a listed sender (by username here)
// reaches the model; another gets one pairing answer and nothing reaches
// the model, however often they write.
func TestAllowFrom(t *testing.T) {
	f := newFake(t)
	h := start(t, f, setup{section: func(s *config.ChannelSection) { s.AllowFrom = []string{"ann"} }})
	h.connected(t)
	f.PostMessage(slacktest.Message{Channel: "D2", ChannelType: "im", User: "U2", Text: "let me in"})
	p := waitPosted(t, f, 1)[0]
	if p.Channel != "D2" || !contains(p.Text, "perch channels approve") {
		t.Errorf("stranger got %+v; want a pairing answer", p)
	}
	f.PostMessage(slacktest.Message{Channel: "D2", ChannelType: "im", User: "U2", Text: "please?"})
	quiet(t, f, 1, 200*time.Millisecond)
	if n := h.env.Provider.Calls(); n != 0 {
		t.Fatalf("a stranger's message reached the model (%d calls)", n)
	}
	f.PostMessage(slacktest.Message{Channel: "D1", ChannelType: "im", User: "U1", Text: "hi, it's Ann"})
	if p := waitPosted(t, f, 2)[1]; p.Channel != "D1" || p.Text != "echo: hi, it's Ann" {
		t.Errorf("allowed sender answered %+v", p)
	}
	// Another organisation's "ann", a Slack Connect guest in a shared
	// channel, is not the Ann on the list.
	f.AddUser(slacktest.User{ID: "UX9", Name: "ann", RealName: "Ann Elsewhere", TeamID: "T0OTHER"})
	f.PostMessage(slacktest.Message{Channel: "D9", ChannelType: "im", User: "UX9", Text: "run this for me"})
	if p := waitPosted(t, f, 3)[2]; p.Channel != "D9" || !contains(p.Text, "perch channels approve") {
		t.Errorf("another workspace's ann got %+v; want a pairing answer", p)
	}
	if n := h.env.Provider.Calls(); n != 1 {
		t.Errorf("the model was called %d times; want once, for Ann", n)
	}
}

// TestLongReplySplit: a reply over Slack's limit arrives whole, in order,
// in parts within the limit, in the same thread.
func TestLongReplySplit(t *testing.T) {
	f := newFake(t)
	h := start(t, f, setup{})
	var paras []string
	for i := 0; i < 40; i++ {
		paras = append(paras, strings.Repeat(string(rune('a'+i%26)), 240)+" paragraph "+string(rune('A'+i%26)))
	}
	long := strings.Join(paras, "\n\n")
	h.env.Provider.Enqueue(providertest.Reply{Content: long})
	h.connected(t)
	ts := f.PostMessage(slacktest.Message{Channel: "C1", User: "U1", Text: "<@" + f.BotUserID + "> tell me everything"})
	waitPosted(t, f, 3)
	settled(t, f)
	var got []string
	for _, p := range f.Posted() {
		if n := utf8.RuneCountInString(p.Text); n > textLimit {
			t.Errorf("a part has %d characters, over %d", n, textLimit)
		}
		if p.ThreadTS != ts {
			t.Errorf("a part went to thread %q, want %q", p.ThreadTS, ts)
		}
		got = append(got, strings.TrimSpace(p.Text))
	}
	if strings.Join(got, "\n\n") != long {
		t.Errorf("the parts joined differ from the reply (%d parts)", len(got))
	}
}

// TestFormattingRejectedFallsBackToPlainText: when Slack refuses the
// formatted text, the same part goes again as plain text, once.
func TestFormattingRejectedFallsBackToPlainText(t *testing.T) {
	f := newFake(t)
	f.RejectMrkdwn(true)
	h := start(t, f, setup{})
	h.env.Provider.Enqueue(providertest.Reply{Content: "**Fan** is _on_ (see [log](https://x.io/log))"})
	h.connected(t)
	f.PostMessage(slacktest.Message{Channel: "D1", ChannelType: "im", User: "U1", Text: "fan?"})
	p := waitPosted(t, f, 1)[0]
	if p.Mrkdwn || p.Text != "Fan is on (see log (https://x.io/log))" {
		t.Errorf("posted %+v; want the plain text with mrkdwn=false", p)
	}
	quiet(t, f, 1, 100*time.Millisecond)
}

// TestRateLimitHonoured: a 429 with Retry-After delays the reply by as
// much, and it is posted once.
func TestRateLimitHonoured(t *testing.T) {
	f := newFake(t)
	h := start(t, f, setup{})
	h.connected(t)
	f.RateLimit(1)
	start := time.Now()
	f.PostMessage(slacktest.Message{Channel: "D1", ChannelType: "im", User: "U1", Text: "hi"})
	p := waitPosted(t, f, 1)[0]
	if d := p.At.Sub(start); d < time.Second {
		t.Errorf("reply posted %v after the message; Retry-After asked for 1s", d)
	}
	quiet(t, f, 1, 100*time.Millisecond)
	if st := h.ch.state.Status(); st.MessagesOut != 1 {
		t.Errorf("messages out = %d, want 1", st.MessagesOut)
	}
}

// TestEnvelopeAckedBeforeTheTurn: a turn that takes longer than Slack's
// 3 s does not delay the acknowledgement, so Slack never redelivers.
func TestEnvelopeAckedBeforeTheTurn(t *testing.T) {
	f := newFake(t)
	p := providertest.New()
	t.Cleanup(p.Close)
	p.Default = func(req providertest.ChatRequest) providertest.Reply {
		time.Sleep(3500 * time.Millisecond)
		return providertest.Reply{Content: "slow answer"}
	}
	h := start(t, f, setup{env: channeltest.Options{Provider: p}})
	h.connected(t)
	f.PostMessage(slacktest.Message{Channel: "D1", ChannelType: "im", User: "U1", Text: "think hard"})
	waitPosted(t, f, 1)
	st := f.Stats()
	if st.MaxAckDelay >= time.Second || st.Retries != 0 || f.Unacked() != 0 {
		t.Errorf("longest ack %v, retries %d, unacked %d; want an ack well within 3 s and no redelivery", st.MaxAckDelay, st.Retries, f.Unacked())
	}
}

// TestRedeliveryAnsweredOnce: Slack redelivers an envelope whose ack it
// did not get (retry_attempt 1, same message); the message is answered once.
func TestRedeliveryAnsweredOnce(t *testing.T) {
	f := newFake(t)
	f.SetAckTimeout(200 * time.Millisecond)
	h := start(t, f, setup{})
	h.connected(t)
	f.IgnoreAcks(1)
	f.PostMessage(slacktest.Message{Channel: "D1", ChannelType: "im", User: "U1", Text: "once please"})
	waitPosted(t, f, 1)
	waitFor(t, "the redelivery", func() bool { return f.Stats().Retries >= 1 && f.Unacked() == 0 })
	quiet(t, f, 1, 200*time.Millisecond)
	if n := h.env.Provider.Calls(); n != 1 {
		t.Errorf("the model was asked %d times, want 1", n)
	}
}

// TestRestartNeverAnswersTwice: a message answered before a restart and
// delivered again after it is not answered again; a turn cut short by the
// shutdown is answered once after it.
func TestRestartNeverAnswersTwice(t *testing.T) {
	f := newFake(t)
	h1 := start(t, f, setup{})
	h1.connected(t)
	ts := f.PostMessage(slacktest.Message{Channel: "D1", ChannelType: "im", User: "U1", Text: "first"})
	waitPosted(t, f, 1)

	// The second message's turn is still running when the gateway stops.
	release := make(chan struct{})
	p := h1.env.Provider
	p.Default = func(req providertest.ChatRequest) providertest.Reply {
		if providertest.LastUser(req) == "second" {
			<-release
		}
		return providertest.Reply{Content: "echo: " + providertest.LastUser(req)}
	}
	f.PostMessage(slacktest.Message{Channel: "D1", ChannelType: "im", User: "U1", Text: "second"})
	waitFor(t, "the second turn to start", func() bool { return p.Calls() == 2 })
	h1.env.Stop()
	close(release)

	h2 := start(t, f, setup{env: channeltest.Options{StorePath: h1.env.StorePath, Provider: p, Workspace: h1.env.Workspace}})
	h2.connected(t)
	// Slack delivers the first message again (same channel and ts).
	f.PostMessage(slacktest.Message{Channel: "D1", ChannelType: "im", User: "U1", Text: "first", TS: ts})
	got := waitPosted(t, f, 2)
	quiet(t, f, 2, 300*time.Millisecond)
	if got[1].Text != "echo: second" {
		t.Errorf("after the restart %q was posted; want the interrupted turn's answer", got[1].Text)
	}
}

// TestFiftyReconnectsLeaveNothingBehind: 50 forced reconnects (drops and
// Slack's disconnect requests) leave no goroutine, connection or memory
// behind, and the channel still answers.
func TestFiftyReconnectsLeaveNothingBehind(t *testing.T) {
	f := newFake(t)
	h := start(t, f, setup{})
	h.connected(t)
	cycle := func(i int) {
		opens := f.Stats().Opens
		if i%2 == 0 {
			f.Drop()
		} else {
			f.Disconnect()
		}
		waitFor(t, "a new connection", func() bool { st := f.Stats(); return st.Opens > opens && st.Open == 1 })
		h.connected(t)
	}
	cycle(0)
	settle()
	g0, h0 := runtime.NumGoroutine(), heapInUse()
	for i := 0; i < 50; i++ {
		cycle(i)
	}
	f.PostMessage(slacktest.Message{Channel: "D1", ChannelType: "im", User: "U1", Text: "still there?"})
	waitPosted(t, f, 1)
	settle()
	g1, h1 := runtime.NumGoroutine(), heapInUse()
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
	if st := f.Stats(); st.Open != 1 {
		t.Errorf("%d connections open, want 1", st.Open)
	}
}

// TestWatchdogReplacesQuietConnection: a socket that stays open but over
// which Slack stopped pinging and delivering is replaced; the message
// Slack could not deliver over it is answered over the new one.
func TestWatchdogReplacesQuietConnection(t *testing.T) {
	f := newFake(t)
	h := start(t, f, setup{})
	h.connected(t)
	before := f.Stats().Connections
	f.Quiet()
	f.PostMessage(slacktest.Message{Channel: "D1", ChannelType: "im", User: "U1", Text: "are you there?"})
	p := waitPosted(t, f, 1)[0]
	if p.Text != "echo: are you there?" {
		t.Errorf("posted %q", p.Text)
	}
	if st := f.Stats(); st.Connections != before+1 || st.Open != 1 {
		t.Errorf("connections %d→%d, open %d; want the quiet one replaced by one new", before, st.Connections, st.Open)
	}
}

// TestRefusedTokensNameTheirKey: a bot or app token Slack refuses makes
// Start fail with the config key to fix.
func TestRefusedTokensNameTheirKey(t *testing.T) {
	for _, c := range []struct {
		bot, app, key string
	}{
		{"xoxb-wrong", "", "channels.slack.bot_token"},
		{"", "xapp-wrong", "channels.slack.app_token"},
		{"", "xoxb-test-bot-token", "channels.slack.app_token"}, // the bot token given as the app token
	} {
		f := newFake(t)
		bot, app := f.BotToken, f.AppToken
		if c.bot != "" {
			bot = c.bot
		}
		if c.app != "" {
			app = c.app
		}
		env := channeltest.New(t, channeltest.Options{})
		ch, err := newChannel(env.Deps(section(f.APIBase(), bot, app, nil)), testOptions())
		if err != nil {
			t.Fatal(err)
		}
		err = env.Start(ch)
		if err == nil || !strings.Contains(err.Error(), c.key) {
			t.Errorf("bot %q app %q: Start = %v; want an error naming %s", bot, app, err, c.key)
		}
		if err != nil && (strings.Contains(err.Error(), bot) && bot != "" || strings.Contains(err.Error(), app)) {
			t.Errorf("the error shows a token: %v", err)
		}
		env.Stop()
	}
}

// TestUnreachableAtStart: Slack down at start does not stop the channel's
// start; its check fails saying why, and it connects and answers once
// Slack is back.
func TestUnreachableAtStart(t *testing.T) {
	f := newFake(t)
	f.Down(true)
	h := start(t, f, setup{})
	ok, msg := h.ch.Check(context.Background())
	if ok || !strings.Contains(msg, "unreachable") {
		t.Errorf("check = %v %q; want failing with the reason", ok, msg)
	}
	f.Down(false)
	h.connected(t)
	f.PostMessage(slacktest.Message{Channel: "D1", ChannelType: "im", User: "U1", Text: "back?"})
	waitPosted(t, f, 1)
}

// TestFilesSaved: a shared image is downloaded with the bot token into the
// workspace and given to the model.
func TestFilesSaved(t *testing.T) {
	f := newFake(t)
	h := start(t, f, setup{})
	h.connected(t)
	img := []byte("\xff\xd8\xff\xe0fake jpeg")
	f.PostMessage(slacktest.Message{Channel: "D1", ChannelType: "im", User: "U1", Text: "what is this?",
		Files: []slacktest.File{{Name: "photo.jpg", Mimetype: "image/jpeg", Data: img}}})
	waitPosted(t, f, 1)
	var found []string
	filepath.WalkDir(filepath.Join(h.env.Workspace, "media", "slack"), func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if data, _ := os.ReadFile(p); string(data) == string(img) {
				found = append(found, p)
			}
		}
		return nil
	})
	if len(found) != 1 {
		t.Errorf("the image was saved %d times under media/slack, want once", len(found))
	}
}

// TestImageSentAsFile: an image in the reply reaches the chat as a file,
// in the thread.
func TestImageSentAsFile(t *testing.T) {
	f := newFake(t)
	h := start(t, f, setup{})
	h.connected(t)
	img := []byte("\x89PNG\r\n\x1a\nfake")
	path := filepath.Join(t.TempDir(), "chart.png")
	os.WriteFile(path, img, 0o600)
	ts := f.PostMessage(slacktest.Message{Channel: "C1", User: "U1", Text: "<@" + f.BotUserID + "> chart"})
	waitPosted(t, f, 1)
	outbound(t, h, "C1", ts, path)
	p := waitPosted(t, f, 2)[1]
	if p.File != "chart.png" || string(p.FileData) != string(img) || p.Channel != "C1" || p.ThreadTS != ts {
		t.Errorf("file post %+v", p)
	}
}

// TestImageAtAnAddressSentAsItsAddress: an image the model names by its
// web address goes as a message holding the address, which Slack unfurls
// into the picture; it failed the reply as "neither a path nor data".
func TestImageAtAnAddressSentAsItsAddress(t *testing.T) {
	f := newFake(t)
	h := start(t, f, setup{})
	h.connected(t)
	err := h.env.Bus.PublishOutbound(bus.Outbound{Channel: Name, ChatID: "C1", ThreadID: "1.2", Media: []bus.Media{{Kind: "image", URL: "https://example.com/plot.png"}}})
	if err != nil {
		t.Fatal(err)
	}
	p := waitPosted(t, f, 1)[0]
	if !strings.Contains(p.Text, "https://example.com/plot.png") || p.Channel != "C1" || p.ThreadTS != "1.2" || p.File != "" {
		t.Errorf("posted %+v", p)
	}
}

// TestWorkingReaction: while the agent works on a message it carries the
// bot's :eyes: reaction (Slack has no typing indicator for bots); the
// reaction goes once the answer is posted.
func TestWorkingReaction(t *testing.T) {
	f := newFake(t)
	p := providertest.New()
	t.Cleanup(p.Close)
	release := make(chan struct{})
	p.Default = func(providertest.ChatRequest) providertest.Reply {
		<-release
		return providertest.Reply{Content: "done"}
	}
	h := start(t, f, setup{env: channeltest.Options{Provider: p}})
	h.connected(t)
	ts := f.PostMessage(slacktest.Message{Channel: "D1", ChannelType: "im", User: "U1", Text: "work"})
	waitFor(t, "the working reaction", func() bool { return f.Reacted("D1", ts, "eyes") })
	close(release)
	waitPosted(t, f, 1)
	waitFor(t, "the reaction to go", func() bool { return !f.Reacted("D1", ts, "eyes") })
}

// TestStopLeavesNothingBehind: stopping the channel (with envelopes still
// queued) is prompt and leaves none of its goroutines.
func TestStopLeavesNothingBehind(t *testing.T) {
	f := newFake(t)
	settle()
	before := runtime.NumGoroutine()
	env := channeltest.New(t, channeltest.Options{})
	ch, err := newChannel(env.Deps(section(f.APIBase(), f.BotToken, f.AppToken, nil)), testOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := env.Start(ch); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the connection", func() bool { ok, _ := ch.Check(context.Background()); return ok })
	for i := 0; i < 5; i++ {
		f.PostMessage(slacktest.Message{Channel: "D1", ChannelType: "im", User: "U1", Text: "queued"})
	}
	start := time.Now()
	env.Stop()
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("stopping took %v", d)
	}
	// The agent's idle connection to the fake provider is the Env's, not
	// the channel's: close it too before counting.
	f.Close()
	env.Provider.CloseClientConnections()
	env.Provider.Close()
	settle()
	if after := runtime.NumGoroutine(); after > before {
		t.Errorf("goroutines: %d before start, %d after stop", before, after)
	}
}

// TestLinkLabelsArriveAsText: a link whose label holds code arrives with
// the label as text (it arrived as "<url|\x000\x00>").
func TestLinkLabelsArriveAsText(t *testing.T) {
	f := newFake(t)
	h := start(t, f, setup{})
	h.env.Provider.Enqueue(providertest.Reply{Content: "Run [`perch status`](https://example.com/docs) to see [Foo](https://en.wikipedia.org/wiki/Foo_(bar))."})
	h.connected(t)
	f.PostMessage(slacktest.Message{Channel: "D1", ChannelType: "im", User: "U1", Text: "how?"})
	p := waitPosted(t, f, 1)[0]
	if want := "Run <https://example.com/docs|perch status> to see <https://en.wikipedia.org/wiki/Foo_(bar)|Foo>."; p.Text != want {
		t.Errorf("posted %q, want %q", p.Text, want)
	}
}

// TestThreadRepliesReachTheBotAfterNew: /new empties the thread's session,
// not the bot's place in it: a reply there still needs no mention, before
// and after a restart.
func TestThreadRepliesReachTheBotAfterNew(t *testing.T) {
	f := newFake(t)
	h := start(t, f, setup{})
	h.connected(t)
	ts := f.PostMessage(slacktest.Message{Channel: "C1", User: "U1", Text: "<@" + f.BotUserID + "> hello"})
	waitPosted(t, f, 1)
	f.PostMessage(slacktest.Message{Channel: "C1", User: "U1", Text: "<@" + f.BotUserID + "> /new", ThreadTS: ts, ParentUserID: "U1"})
	waitPosted(t, f, 2)
	if info, _ := h.env.Store.Session("slack:C1:" + ts); info.Count != 0 {
		t.Fatalf("the session holds %d messages after /new; the test needs it empty", info.Count)
	}
	f.PostMessage(slacktest.Message{Channel: "C1", User: "U1", Text: "so, what now?", ThreadTS: ts, ParentUserID: "U1"})
	if p := waitPosted(t, f, 3)[2]; p.ThreadTS != ts || p.Text != "echo: so, what now?" {
		t.Errorf("posted %+v; want the reply answered in thread %s", p, ts)
	}
	f.PostMessage(slacktest.Message{Channel: "C1", User: "U1", Text: "<@" + f.BotUserID + "> /new", ThreadTS: ts, ParentUserID: "U1"})
	waitPosted(t, f, 4)
	h.env.Stop()

	h2 := start(t, f, setup{env: channeltest.Options{StorePath: h.env.StorePath, Provider: h.env.Provider, Workspace: h.env.Workspace}})
	h2.connected(t)
	f.PostMessage(slacktest.Message{Channel: "C1", User: "U1", Text: "still there?", ThreadTS: ts, ParentUserID: "U1"})
	if p := waitPosted(t, f, 5)[4]; p.ThreadTS != ts || p.Text != "echo: still there?" {
		t.Errorf("posted %+v after a restart; want the reply answered in thread %s", p, ts)
	}
}

// TestQuickDisconnectsBackOff: a connection Slack greets and drops before
// StableAfter, or drops because the app has too many connections, is
// retried with backoff, not in a loop of apps.connections.open calls; once
// Slack lets it stay, it does.
func TestQuickDisconnectsBackOff(t *testing.T) {
	for _, c := range []struct {
		reason string
		stable time.Duration
	}{
		{"refresh_requested", time.Minute},
		{"too_many_websockets", 0}, // however long the connection lasted
	} {
		reason := c.reason
		t.Run(reason, func(t *testing.T) {
			f := newFake(t)
			f.DisconnectAfterHello(reason)
			h := start(t, f, setup{opts: func(o *options) {
				o.StableAfter = c.stable
				o.Backoff = channel.Backoff{Min: 100 * time.Millisecond, Max: 400 * time.Millisecond}
			}})
			time.Sleep(time.Second)
			// 100, 200, 400, 400 ms of waits fit in a second: five opens
			// at most.
			if n := f.Stats().Opens; n > 6 {
				t.Errorf("%d apps.connections.open calls in a second; want backoff between them", n)
			}
			ok, msg := h.ch.Check(context.Background())
			if ok || !strings.Contains(msg, reason) {
				t.Errorf("check: %v %q; want it failing with Slack's reason", ok, msg)
			}
			if reason == "too_many_websockets" && !strings.Contains(msg, "channels.slack.app_token") {
				t.Errorf("check %q; want the likely cause: another program on the app token", msg)
			}
			f.DisconnectAfterHello("")
			h.connected(t)
			f.PostMessage(slacktest.Message{Channel: "D1", ChannelType: "im", User: "U1", Text: "there?"})
			waitPosted(t, f, 1)
		})
	}
}

// TestSocketModeTurnedOffStopsTheChannel: Slack's link_disabled (Socket
// Mode turned off for the app) stops the channel with the fix in its
// check, instead of reconnecting to be told again.
func TestSocketModeTurnedOffStopsTheChannel(t *testing.T) {
	f := newFake(t)
	f.DisconnectAfterHello("link_disabled")
	h := start(t, f, setup{})
	waitFor(t, "the check to name the fix", func() bool {
		_, msg := h.ch.Check(context.Background())
		return strings.Contains(msg, "turn on Socket Mode")
	})
	opens := f.Stats().Opens
	time.Sleep(300 * time.Millisecond)
	if n := f.Stats().Opens; n != opens || n > 1 {
		t.Errorf("%d apps.connections.open calls; want the first only", n)
	}
}

// TestWorkingReactionLastsAsLongAsATurn: the :eyes: reaction is bounded by
// the turn's timeout and the reply's delivery, not by the 2 minutes other
// platforms' typing indicators get (a turn may run 5).
func TestWorkingReactionLastsAsLongAsATurn(t *testing.T) {
	env := channeltest.New(t, channeltest.Options{})
	for _, turn := range []time.Duration{300 * time.Second, 0, 20 * time.Minute} {
		d := env.Deps(section("http://127.0.0.1:1/api/", "xoxb-1", "xapp-1", nil))
		d.TurnTimeout = turn
		ch, err := newChannel(d, testOptions())
		if err != nil {
			t.Fatal(err)
		}
		want := turn
		if want == 0 {
			want = 300 * time.Second // the config's default
		}
		if got := ch.in.TypingFor(); got < want {
			t.Errorf("turn timeout %s: the reaction lasts at most %s; want at least the turn's %s", turn, got, want)
		}
	}
}

// TestAllowedByNameThroughALookupOutage: a person allow_from lists by
// username is neither refused nor forgotten when users.info fails: the
// message is left unacknowledged, Slack delivers it again, and it is
// answered. One failed lookup used to get Ann a pairing code, and the
// failure, cached for an hour, silenced her next messages.
func TestAllowedByNameThroughALookupOutage(t *testing.T) {
	f := newFake(t)
	f.SetAckTimeout(300 * time.Millisecond)
	h := start(t, f, setup{section: func(s *config.ChannelSection) { s.AllowFrom = []string{"ann"} }})
	h.connected(t)
	f.FailUsersInfo(1)
	f.PostMessage(slacktest.Message{Channel: "D1", ChannelType: "im", User: "U1", Text: "hello during an outage"})
	if p := waitPosted(t, f, 1)[0]; p.Channel != "D1" || p.Text != "echo: hello during an outage" {
		t.Errorf("first answer %+v; want the echo, after Slack's redelivery", p)
	}
	if st := f.Stats(); st.Retries == 0 {
		t.Errorf("the first message was acknowledged at once (%+v): the lookup did not fail", st)
	}
	f.PostMessage(slacktest.Message{Channel: "D1", ChannelType: "im", User: "U1", Text: "and again"})
	if p := waitPosted(t, f, 2)[1]; p.Text != "echo: and again" {
		t.Errorf("second answer %+v", p)
	}
	for _, p := range f.Posted() {
		if contains(p.Text, "perch channels approve") {
			t.Errorf("Ann got a pairing code: %+v", p)
		}
	}
}

// TestIsUserID: entries shaped like Slack ids match ids alone.
func TestIsUserID(t *testing.T) {
	for e, want := range map[string]bool{
		"U0123ABCD": true, "W0123ABCD": true, "UOWNER1": true,
		"uowner1": false, "ann": false, "U01": false, "UMA": false, "U0123abcd": false, "T0123ABCD": false, "@U0123ABCD": false,
	} {
		if got := isUserID(e); got != want {
			t.Errorf("isUserID(%q) = %v, want %v", e, got, want)
		}
	}
}
