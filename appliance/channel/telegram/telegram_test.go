package telegram_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/perchhq/perch/appliance/channel"
	"github.com/perchhq/perch/appliance/channel/channeltest"
	"github.com/perchhq/perch/appliance/channel/telegram"
	"github.com/perchhq/perch/appliance/channel/telegram/telegramtest"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/provider/providertest"
	"github.com/perchhq/perch/store"
)

const token = "123456:TEST-token-abcdefghijklmnopqrstuv"

var (
	alice = telegramtest.User{ID: 42, FirstName: "Alice", Username: "alice"}
	bob   = telegramtest.User{ID: 99, FirstName: "Bob", Username: "bob"}
)

// section is channels.telegram pointed at the fake.
func section(base string, mutate func(*config.BotChannel)) config.ChannelSection {
	cfg := config.Default()
	cfg.Channels.Telegram.Enabled = true
	cfg.Channels.Telegram.Token = token
	cfg.Channels.Telegram.APIBase = base
	if mutate != nil {
		mutate(&cfg.Channels.Telegram)
	}
	sec, _ := cfg.Channels.Section("telegram")
	return sec
}

// fastOptions keep tests quick: short polls, fast reconnects.
func fastOptions() telegram.Options {
	return telegram.Options{PollTimeout: time.Second, Quiet: 5 * time.Second, Backoff: channel.Backoff{Min: 5 * time.Millisecond, Max: 50 * time.Millisecond},
		ConflictWait: 300 * time.Millisecond, StartTimeout: 2 * time.Second, TypingEvery: 50 * time.Millisecond}
}

// start runs a Telegram channel on a harness against fake.
func start(t *testing.T, fake *telegramtest.Server, o channeltest.Options, mutate func(*config.BotChannel), opts telegram.Options) (*channeltest.Env, *telegram.Channel) {
	t.Helper()
	h := channeltest.New(t, o)
	c, err := telegram.New(h.Deps(section(fake.Base(), mutate)), opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(c); err != nil {
		t.Fatal(err)
	}
	return h, c
}

func newFake(t *testing.T) *telegramtest.Server {
	fake := telegramtest.New(token)
	t.Cleanup(fake.Close)
	return fake
}

func TestMessageIsAnsweredInItsChatQuotingIt(t *testing.T) {
	fake := newFake(t)
	h, _ := start(t, fake, channeltest.Options{}, nil, fastOptions())
	fake.Add(telegramtest.Message{From: alice, Text: "hello there"})
	sent := fake.WaitSent(1, 10*time.Second)
	if len(sent) != 1 {
		t.Fatalf("sent %d messages, want 1", len(sent))
	}
	s := sent[0]
	if s.ChatID != "42" || s.Text != "echo: hello there" || s.ParseMode != "HTML" || s.ReplyTo == 0 {
		t.Errorf("sent %+v; want the echo to chat 42 in HTML, quoting the message", s)
	}
	if sess, err := h.Store.Session("telegram:42"); err != nil || sess.Count != 2 {
		t.Errorf("session telegram:42 = %+v, %v; want 2 messages", sess, err)
	}
	if ch, chat := h.Agent.LastActive(nil); ch != "telegram" || chat != "42" {
		t.Errorf("last active chat = %s:%s, want telegram:42 (USB notices go there)", ch, chat)
	}
	channeltest.Eventually(t, 5*time.Second, "the inbox to empty", func() bool { return inboxLen(t, h) == 0 })
}

func TestForumTopicIsItsOwnSessionAndGetsTheAnswer(t *testing.T) {
	fake := newFake(t)
	h, _ := start(t, fake, channeltest.Options{}, nil, fastOptions())
	fake.Add(telegramtest.Message{ChatID: -1001, ChatType: "supergroup", From: alice, Text: "Perch, hi", ThreadID: 7})
	sent := fake.WaitSent(1, 10*time.Second)
	if len(sent) != 1 || sent[0].ThreadID != "7" || sent[0].ChatID != "-1001" {
		t.Fatalf("sent %+v; want one answer in topic 7 of chat -1001", sent)
	}
	if _, err := h.Store.Session("telegram:-1001:7"); err != nil {
		t.Errorf("no session telegram:-1001:7: %v", err)
	}
}

func TestTypingIsShownWhileTheAgentWorks(t *testing.T) {
	fake := newFake(t)
	prov := providertest.New()
	defer prov.Close()
	release := make(chan struct{})
	prov.Default = func(providertest.ChatRequest) providertest.Reply {
		<-release
		return providertest.Reply{Content: "done"}
	}
	start(t, fake, channeltest.Options{Provider: prov}, nil, fastOptions())
	fake.Add(telegramtest.Message{From: alice, Text: "think hard"})
	channeltest.Eventually(t, 5*time.Second, "repeated typing actions", func() bool { return fake.Actions() >= 3 })
	close(release)
	fake.WaitSent(1, 10*time.Second)
	time.Sleep(200 * time.Millisecond)
	n := fake.Actions()
	time.Sleep(300 * time.Millisecond)
	if fake.Actions() != n {
		t.Errorf("typing continued after the reply (%d → %d actions)", n, fake.Actions())
	}
}

func TestAllowFromRefusesStrangersWithOnePairingCode(t *testing.T) {
	fake := newFake(t)
	var saved []string
	h, _ := start(t, fake, channeltest.Options{SaveAllowFrom: func(ch, id string) error {
		saved = append(saved, ch+":"+id)
		return nil
	}}, func(b *config.BotChannel) { b.AllowFrom = []string{"42", "@carol"} }, fastOptions())

	fake.Add(telegramtest.Message{From: bob, Text: "let me in"})
	fake.Add(telegramtest.Message{From: bob, Text: "please"})
	fake.WaitSent(1, 10*time.Second)
	time.Sleep(300 * time.Millisecond)
	sent := fake.Sent()
	if len(sent) != 1 || sent[0].ChatID != "99" || !strings.Contains(sent[0].Text, "perch channels approve") {
		t.Fatalf("sent %+v; want exactly one pairing answer to Bob", sent)
	}
	if h.Provider.Calls() != 0 {
		t.Fatalf("the model was called %d times for a stranger", h.Provider.Calls())
	}
	if h.Logs.Count("not on allow_from") != 2 {
		t.Errorf("want one debug line per refused message:\n%s", h.Logs)
	}

	// The control: listed by id, and by username.
	fake.Add(telegramtest.Message{From: alice, Text: "hi"})
	fake.Add(telegramtest.Message{From: telegramtest.User{ID: 55, FirstName: "Carol", Username: "Carol"}, Text: "hey"})
	sent = fake.WaitSent(3, 10*time.Second)
	if len(sent) != 3 {
		t.Fatalf("allowed senders got %d answers, want 2: %+v", len(sent)-1, sent)
	}

	// The owner approves Bob's code: Bob is in at once.
	code := pairingCode(t, sent[0].Text)
	a, err := h.Hub.Approve(strings.ToLower(code))
	if err != nil {
		t.Fatal(err)
	}
	if a.SenderID != "99" || len(saved) != 1 || saved[0] != "telegram:99" {
		t.Errorf("approval %+v saved %v; want Bob's id in channels.telegram.allow_from", a, saved)
	}
	fake.Add(telegramtest.Message{From: bob, Text: "thanks"})
	sent = fake.WaitSent(5, 10*time.Second)
	var texts []string
	for _, s := range sent[3:] {
		texts = append(texts, s.Text)
	}
	if strings.Join(texts, "|") != "You have been approved: you can talk to me now.|echo: thanks" {
		t.Errorf("after approval Bob got %q", texts)
	}
	if _, err := h.Hub.Approve(code); !errors.Is(err, channel.ErrNoPairing) {
		t.Errorf("a spent code approved again: %v", err)
	}
}

func pairingCode(t *testing.T, text string) string {
	t.Helper()
	_, rest, ok := strings.Cut(text, "approve ")
	if !ok {
		t.Fatalf("no code in %q", text)
	}
	return strings.Fields(rest)[0]
}

func TestGroupMessagesNeedAMentionOrAReply(t *testing.T) {
	fake := newFake(t)
	h, _ := start(t, fake, channeltest.Options{}, nil, fastOptions())
	group := func(m telegramtest.Message) telegramtest.Message {
		m.ChatID, m.ChatType, m.From = -500, "group", alice
		return m
	}
	mention := map[string]any{"type": "mention", "offset": 0, "length": len("@perch_test_bot")}
	cases := []struct {
		msg   telegramtest.Message
		model string // what the model sees; "" means not answered
	}{
		{group(telegramtest.Message{Text: "just chatting among us"}), ""},
		{group(telegramtest.Message{Text: "@perch_test_bot what is the time", Entities: []map[string]any{mention}}), "what is the time"},
		{group(telegramtest.Message{Text: "and the weather?", ReplyToBot: true}), "and the weather?"},
		{group(telegramtest.Message{Text: "Perch, water the plants"}), "water the plants"},
		{group(telegramtest.Message{Text: "perchance it rains"}), ""},
		{telegramtest.Message{From: alice, Text: "no mention needed here"}, "no mention needed here"},
		// The mention goes; the user's lines and indents stay.
		{group(telegramtest.Message{Text: "@perch_test_bot why does this fail?\n```\nfor i in x:\n    print(i)\n```", Entities: []map[string]any{mention}}),
			"why does this fail?\n```\nfor i in x:\n    print(i)\n```"},
		// A bare command in a group is for every bot there; one addressed
		// to another bot is not for this one.
		{group(telegramtest.Message{Text: "/weather", Entities: []map[string]any{{"type": "bot_command", "offset": 0, "length": 8}}}), "/weather"},
		{group(telegramtest.Message{Text: "/weather@other_bot", Entities: []map[string]any{{"type": "bot_command", "offset": 0, "length": 18}}}), ""},
		// In a private chat nothing is taken out: the bot's name is a word.
		{telegramtest.Message{From: alice, Text: "What do perch eat?"}, "What do perch eat?"},
	}
	want := 0
	for _, c := range cases {
		fake.Add(c.msg)
		if c.model != "" {
			want++
		}
	}
	fake.WaitSent(want, 10*time.Second)
	time.Sleep(300 * time.Millisecond)
	var seen []string
	for _, r := range h.Provider.Requests() {
		seen = append(seen, providertest.LastUser(r.Body))
	}
	var wantSeen []string
	for _, c := range cases {
		if c.model != "" {
			wantSeen = append(wantSeen, c.model)
		}
	}
	if strings.Join(sorted(seen), "|") != strings.Join(sorted(wantSeen), "|") {
		t.Errorf("the model saw %q, want %q", seen, wantSeen)
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

func TestLongReplyArrivesWholeInOrderInPartsWithinTheLimit(t *testing.T) {
	fake := newFake(t)
	prov := providertest.New()
	defer prov.Close()
	var sb strings.Builder
	for i := 0; sb.Len() < 11000; i++ {
		sb.WriteString("Paragraph " + strconv.Itoa(i) + ": the plants were watered at dawn & <noon>, 🌱 twice.\n\n")
		if i == 40 {
			sb.WriteString("```\n" + strings.Repeat("x := 1 // code\n", 40) + "```\n\n")
		}
	}
	long := strings.TrimSpace(sb.String())
	prov.Enqueue(providertest.Reply{Content: long})
	start(t, fake, channeltest.Options{Provider: prov}, nil, fastOptions())
	fake.Add(telegramtest.Message{From: alice, Text: "tell me everything"})
	fake.WaitSent(3, 15*time.Second)
	time.Sleep(300 * time.Millisecond)
	sent := fake.Sent()
	if len(sent) < 3 {
		t.Fatalf("got %d parts, want at least 3", len(sent))
	}
	var shown []string
	for i, s := range sent {
		plain, err := telegramtest.CheckHTML(s.Text)
		if err != nil {
			t.Fatalf("part %d is not valid Telegram HTML: %v", i, err)
		}
		// Telegram counts the text the HTML shows, after entities.
		if n := len(utf16.Encode([]rune(plain))); n > telegram.Limit {
			t.Errorf("part %d shows %d UTF-16 units", i, n)
		}
		if (i == 0) != (s.ReplyTo != 0) {
			t.Errorf("part %d quotes %d; only the first part quotes the message", i, s.ReplyTo)
		}
		shown = append(shown, plain)
	}
	got := strings.Join(strings.Fields(strings.ReplaceAll(strings.Join(shown, "\n"), "```", "")), " ")
	want := strings.Join(strings.Fields(strings.ReplaceAll(long, "```", "")), " ")
	if got != want {
		t.Errorf("the parts do not add up to the reply in order:\n got %.200q…\nwant %.200q…", got, want)
	}
}

// Telegram's limit applies to the text a message shows: a code block of
// shell full of &&, >> and <...> that fits goes as one message, though its
// HTML (&amp;&amp;, &gt;&gt;) is longer than the limit; each part of a
// longer one shows close to the limit.
func TestLimitCountsTheShownText(t *testing.T) {
	line := "if [ -f a ] && [ -f b ]; then cat a >> b; echo '<done>' >&2; fi\n"
	for _, c := range []struct {
		lines, parts int
	}{{50, 1}, {60, 1}, {130, 3}} {
		md := "```sh\n" + strings.Repeat(line, c.lines) + "```"
		parts := channel.Prepare(md, telegram.Format())
		if len(parts) != c.parts {
			t.Errorf("%d lines (%d characters): %d parts, want %d", c.lines, len(md), len(parts), c.parts)
		}
		for i, p := range parts {
			plain, err := telegramtest.CheckHTML(p.Text)
			if err != nil {
				t.Fatalf("%d lines, part %d: %v", c.lines, i, err)
			}
			if n := len(utf16.Encode([]rune(plain))); n > telegram.Limit || (i < len(parts)-1 && n < telegram.Limit*3/4) {
				t.Errorf("%d lines, part %d shows %d units (limit %d)", c.lines, i, n, telegram.Limit)
			}
		}
	}
}

func TestFormattingRejectionFallsBackToPlainText(t *testing.T) {
	fake := newFake(t)
	fake.RejectFormatting(true)
	prov := providertest.New()
	defer prov.Close()
	prov.Enqueue(providertest.Reply{Content: "**Done**: the `pump` ran for [5 min](https://example.com/log)"})
	h, _ := start(t, fake, channeltest.Options{Provider: prov}, nil, fastOptions())
	fake.Add(telegramtest.Message{From: alice, Text: "status"})
	sent := fake.WaitSent(1, 10*time.Second)
	if len(sent) != 1 || sent[0].ParseMode != "" || sent[0].Text != "Done: the pump ran for 5 min (https://example.com/log)" {
		t.Fatalf("sent %+v; want the reply once as plain text", sent)
	}
	if !strings.Contains(h.Logs.String(), "refused the reply's formatting") {
		t.Errorf("the fallback is not logged:\n%s", h.Logs)
	}
}

func TestRateLimitIsHonoured(t *testing.T) {
	fake := newFake(t)
	fake.FailNext("sendMessage", telegramtest.Failure{Code: 429, Description: "Too Many Requests: retry after 1", RetryAfter: 1})
	start(t, fake, channeltest.Options{}, nil, fastOptions())
	added := time.Now()
	fake.Add(telegramtest.Message{From: alice, Text: "quick"})
	sent := fake.WaitSent(1, 10*time.Second)
	if len(sent) != 1 {
		t.Fatalf("sent %d, want 1", len(sent))
	}
	if waited := sent[0].At.Sub(added); waited < time.Second {
		t.Errorf("sent %s after the message; retry_after 1 asks for a second", waited)
	}
}

func TestTokenRejectedAtStartNamesTheKey(t *testing.T) {
	fake := telegramtest.New("999:other-token")
	defer fake.Close()
	h := channeltest.New(t, channeltest.Options{})
	c, err := telegram.New(h.Deps(section(fake.Base(), nil)), fastOptions())
	if err != nil {
		t.Fatal(err)
	}
	err = h.Start(c)
	if !errors.Is(err, telegram.ErrTokenRejected) || !strings.Contains(err.Error(), "channels.telegram.token") {
		t.Fatalf("Start = %v; want the rejected token naming channels.telegram.token", err)
	}
	if strings.Contains(err.Error(), token) {
		t.Fatal("the error shows the token")
	}
}

func TestUnreachableAtStartThenRecovers(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close() // nothing listens: Telegram is unreachable
	h := channeltest.New(t, channeltest.Options{})
	c, err := telegram.New(h.Deps(section("http://"+addr, nil)), fastOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(c); err != nil {
		t.Fatal(err)
	}
	ok, msg := c.Check(context.Background())
	if ok || !strings.Contains(msg, "unreachable") {
		t.Fatalf("check = %v %q; want failing, saying Telegram is unreachable", ok, msg)
	}
	fake := telegramtest.NewAt(token, addr)
	defer fake.Close()
	channeltest.Eventually(t, 10*time.Second, "the channel to connect", func() bool { ok, _ := c.Check(context.Background()); return ok })
	fake.Add(telegramtest.Message{From: alice, Text: "are you up?"})
	if sent := fake.WaitSent(1, 10*time.Second); len(sent) != 1 {
		t.Fatalf("after recovering, sent %d", len(sent))
	}
}

func TestPrivacyModeIsShownInTheCheck(t *testing.T) {
	fake := newFake(t)
	_, c := start(t, fake, channeltest.Options{}, nil, fastOptions())
	channeltest.Eventually(t, 5*time.Second, "connected", func() bool { ok, _ := c.Check(context.Background()); return ok })
	if _, msg := c.Check(context.Background()); !strings.Contains(msg, "privacy mode is on") || !strings.Contains(msg, "/setprivacy") {
		t.Errorf("check %q does not explain privacy mode", msg)
	}
	bot := fake.Bot()
	bot.CanReadAllGroupMessages = true
	fake2 := newFake(t)
	fake2.SetBot(bot)
	_, c2 := start(t, fake2, channeltest.Options{}, nil, fastOptions())
	channeltest.Eventually(t, 5*time.Second, "connected", func() bool { ok, _ := c2.Check(context.Background()); return ok })
	if _, msg := c2.Check(context.Background()); strings.Contains(msg, "privacy") {
		t.Errorf("check %q mentions privacy mode though the bot reads all messages", msg)
	}
}

func TestRestartNeverAnswersTwice(t *testing.T) {
	fake := newFake(t)
	dir := t.TempDir()
	h, _ := start(t, fake, restartOptions(dir), nil, fastOptions())
	id := fake.Add(telegramtest.Message{From: alice, Text: "one"})
	fake.WaitSent(1, 10*time.Second)
	h.Stop()
	if fake.Confirmed() <= id {
		t.Errorf("confirmed offset %d at stop; want past update %d", fake.Confirmed(), id)
	}

	// A restart: the same database, the same bot.
	h2, _ := start(t, fake, restartOptions(dir, h.Provider), nil, fastOptions())
	fake.Add(telegramtest.Message{From: alice, Text: "two"})
	fake.WaitSent(2, 10*time.Second)
	// Telegram redelivers the first update (its confirmation was lost).
	fake.Redeliver(id)
	time.Sleep(500 * time.Millisecond)
	var texts []string
	for _, s := range fake.Sent() {
		texts = append(texts, s.Text)
	}
	if strings.Join(texts, "|") != "echo: one|echo: two" {
		t.Errorf("answers %q; want each message answered once", texts)
	}
	_ = h2
}

func TestTurnInterruptedByShutdownIsAnsweredOnceAfterRestart(t *testing.T) {
	fake := newFake(t)
	prov := providertest.New()
	defer prov.Close()
	block := make(chan struct{})
	calls := make(chan struct{}, 10)
	prov.Default = func(r providertest.ChatRequest) providertest.Reply {
		calls <- struct{}{}
		<-block
		return providertest.Reply{Content: "late"}
	}
	dir := t.TempDir()
	h, _ := start(t, fake, restartOptions(dir, prov), nil, fastOptions())
	fake.Add(telegramtest.Message{From: alice, Text: "slow question"})
	<-calls // the turn is running
	h.Stop()
	if n := len(fake.Sent()); n != 0 {
		t.Fatalf("sent %d before the turn finished", n)
	}
	close(block)
	prov.Default = nil // answers at once now: "echo: …"
	h2, _ := start(t, fake, restartOptions(dir, prov), nil, fastOptions())
	fake.WaitSent(1, 10*time.Second)
	time.Sleep(500 * time.Millisecond)
	sent := fake.Sent()
	if len(sent) != 1 || sent[0].Text != "echo: slow question" {
		t.Fatalf("after the restart sent %+v; want the interrupted message answered once", sent)
	}
	hist, err := h2.Store.History("telegram:42")
	if err != nil || len(hist) != 2 || hist[0].Content != "slow question" {
		t.Errorf("history %+v, %v; want the question once, then the answer", hist, err)
	}
}

func TestConflictIsReportedAndNotRetriedInAHotLoop(t *testing.T) {
	fake := newFake(t)
	fake.SetConflict(true)
	h, c := start(t, fake, channeltest.Options{}, nil, fastOptions())
	time.Sleep(1500 * time.Millisecond)
	ok, msg := c.Check(context.Background())
	if ok || !strings.Contains(msg, "another program is polling this bot") || !strings.Contains(msg, "channels.telegram.token") {
		t.Errorf("check = %v %q; want failing, explaining the conflict", ok, msg)
	}
	// 300 ms, then 600 ms, then 1.2 s: three or four polls in 1.5 s.
	if n := fake.Polls(); n > 5 {
		t.Errorf("%d polls in 1.5 s under a conflict: a hot loop", n)
	}
	if n := h.Logs.Count("another program is polling this bot"); n < 1 {
		t.Errorf("the conflict is not in the log:\n%s", h.Logs)
	}
	fake.SetConflict(false)
	channeltest.Eventually(t, 10*time.Second, "the channel to recover", func() bool { ok, _ := c.Check(context.Background()); return ok })
}

func TestWatchdogReplacesAWedgedPoll(t *testing.T) {
	fake := newFake(t)
	opts := fastOptions()
	opts.Quiet = 400 * time.Millisecond
	opts.PollTimeout = 100 * time.Millisecond
	_, c := start(t, fake, channeltest.Options{}, nil, opts)
	channeltest.Eventually(t, 5*time.Second, "connected", func() bool { ok, _ := c.Check(context.Background()); return ok })
	fake.SetWedged(true)
	channeltest.Eventually(t, 5*time.Second, "the watchdog to replace the wedged poll", func() bool { return c.Replaced() >= 1 })
	fake.SetWedged(false)
	fake.Add(telegramtest.Message{From: alice, Text: "still there?"})
	if sent := fake.WaitSent(1, 10*time.Second); len(sent) != 1 {
		t.Fatalf("after the watchdog, sent %d", len(sent))
	}
}

func TestFiftyForcedReconnectsLeakNothing(t *testing.T) {
	fake := newFake(t)
	_, c := start(t, fake, channeltest.Options{}, nil, fastOptions())
	channeltest.Eventually(t, 5*time.Second, "connected", func() bool { ok, _ := c.Check(context.Background()); return ok })
	settle := func() (int, uint64) {
		time.Sleep(100 * time.Millisecond)
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return runtime.NumGoroutine(), ms.HeapAlloc
	}
	g0, m0 := settle()
	for i := 0; i < 50; i++ {
		channeltest.Eventually(t, 5*time.Second, "a poll to wait", func() bool { return fake.Pollers() > 0 })
		before := fake.Polls()
		fake.CloseClientConnections() // the network drops
		channeltest.Eventually(t, 5*time.Second, "a new poll", func() bool { return fake.Polls() > before })
	}
	g1, m1 := settle()
	if g1 > g0+3 {
		t.Errorf("goroutines grew from %d to %d across 50 reconnects", g0, g1)
	}
	if m1 > m0+2<<20 {
		t.Errorf("heap grew from %d to %d bytes across 50 reconnects", m0, m1)
	}
	if n := fake.Pollers(); n > 1 {
		t.Errorf("%d polls open at once after reconnects, want 1", n)
	}
	fake.Add(telegramtest.Message{From: alice, Text: "ping"})
	if sent := fake.WaitSent(1, 10*time.Second); len(sent) != 1 {
		t.Fatalf("after 50 reconnects, sent %d", len(sent))
	}
}

func TestVoiceIsTranscribedAndPhotosAreSaved(t *testing.T) {
	fake := newFake(t)
	prov := providertest.New()
	defer prov.Close()
	prov.Transcript = "turn on the greenhouse fan"
	tr := transcriber(t, prov)
	h, _ := start(t, fake, channeltest.Options{Provider: prov, Transcribe: tr}, nil, fastOptions())
	fake.AddFile("voice1", []byte("OggS fake opus audio"))
	fake.AddFile("photo1", []byte("\xff\xd8\xff fake jpeg"))
	fake.Add(telegramtest.Message{From: alice, Voice: "voice1"})
	fake.WaitSent(1, 10*time.Second)
	fake.Add(telegramtest.Message{From: alice, Photo: "photo1", Text: "what is this?"})
	fake.WaitSent(2, 10*time.Second)
	reqs := prov.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d model calls, want 2", len(reqs))
	}
	voice := providertest.LastUser(reqs[0].Body)
	if !strings.Contains(voice, "[voice message, transcribed]: turn on the greenhouse fan") {
		t.Errorf("the model saw %q for the voice message", voice)
	}
	if tx := prov.Transcribed(); len(tx) != 1 || tx[0].FileName != "audio.ogg" {
		t.Errorf("transcriptions %+v; want audio.ogg uploaded once", tx)
	}
	photo := providertest.LastUser(reqs[1].Body)
	if !strings.Contains(photo, "what is this?") || !strings.Contains(photo, "[image attached: ") {
		t.Fatalf("the model saw %q for the photo", photo)
	}
	path := strings.TrimSuffix(strings.SplitN(photo, "[image attached: ", 2)[1], "]")
	want := filepath.Join(h.Workspace, "media", "telegram", time.Now().Format("2006-01-02"))
	if !strings.HasPrefix(path, want) || filepath.Base(path) != "image.jpg" {
		t.Errorf("photo saved at %s, want %s/<message>/image.jpg", path, want)
	}
	if data, err := os.ReadFile(path); err != nil || string(data) != "\xff\xd8\xff fake jpeg" {
		t.Errorf("saved photo = %q, %v", data, err)
	}
}

func TestVoiceWithoutTranscriptionTellsTheModel(t *testing.T) {
	fake := newFake(t)
	h, _ := start(t, fake, channeltest.Options{}, nil, fastOptions())
	fake.AddFile("v", []byte("OggS"))
	fake.Add(telegramtest.Message{From: alice, Voice: "v"})
	fake.WaitSent(1, 10*time.Second)
	got := providertest.LastUser(h.Provider.Requests()[0].Body)
	if !strings.Contains(got, "could not be transcribed") || !strings.Contains(got, "providers.groq.api_key") {
		t.Errorf("the model saw %q", got)
	}
}

func TestImageReplyArrivesAsAPhoto(t *testing.T) {
	fake := newFake(t)
	prov := providertest.New()
	defer prov.Close()
	png := "data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
	prov.Enqueue(
		providertest.Reply{ToolCalls: []providertest.ToolCall{{ID: "c1", Name: "canvas", Args: `{"action":"create_node","type":"image","title":"sunrise","content":"` + png + `"}`}}},
		providertest.Reply{Content: "Here is your picture."},
	)
	start(t, fake, channeltest.Options{Provider: prov, TestTools: true}, nil, fastOptions())
	fake.Add(telegramtest.Message{From: alice, Text: "draw a sunrise"})
	sent := fake.WaitSent(2, 10*time.Second)
	if len(sent) != 2 || sent[0].Text != "Here is your picture." || sent[1].Method != "sendPhoto" || sent[1].FileSize < 60 || sent[1].ChatID != "42" {
		t.Fatalf("sent %+v; want the text, then the image as a photo", sent)
	}
}

func TestStickerAndDocumentAreDescribed(t *testing.T) {
	fake := newFake(t)
	h, _ := start(t, fake, channeltest.Options{}, nil, fastOptions())
	fake.Add(telegramtest.Message{From: alice, Sticker: true})
	fake.WaitSent(1, 10*time.Second)
	fake.Add(telegramtest.Message{From: alice, Document: &telegramtest.Document{Name: "plan.pdf", MIME: "application/pdf", Size: 2048}})
	fake.WaitSent(2, 10*time.Second)
	reqs := h.Provider.Requests()
	if got := providertest.LastUser(reqs[0].Body); got != "[sticker]" {
		t.Errorf("sticker reached the model as %q", got)
	}
	if got := providertest.LastUser(reqs[1].Body); !strings.Contains(got, `"plan.pdf"`) || !strings.Contains(got, "not downloaded") {
		t.Errorf("document reached the model as %q", got)
	}
}

func TestUnknownSendersGetOnlySafeTools(t *testing.T) {
	for _, tc := range []struct {
		name      string
		allowAll  bool
		offered   bool
		refusedBy string
	}{
		{"open channel restricts", false, false, "channels.telegram.allow_all_tools"},
		{"allow_all_tools lifts it", true, true, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fake := newFake(t)
			prov := providertest.New()
			defer prov.Close()
			// A model that calls the hidden tool anyway.
			prov.Enqueue(
				providertest.Reply{ToolCalls: []providertest.ToolCall{{ID: "c1", Name: "switch_relay", Args: `{}`}}},
				providertest.Reply{Content: "ok"},
			)
			h, _ := start(t, fake, channeltest.Options{Provider: prov, TestTools: true}, func(b *config.BotChannel) { b.AllowAllTools = tc.allowAll }, fastOptions())
			fake.Add(telegramtest.Message{From: bob, Text: "switch the relay"})
			fake.WaitSent(1, 10*time.Second)
			reqs := prov.Requests()
			if len(reqs) != 2 {
				t.Fatalf("%d model calls", len(reqs))
			}
			offered := false
			for _, tool := range reqs[0].Body.Tools {
				if strings.Contains(toJSON(tool), `"switch_relay"`) {
					offered = true
				}
			}
			if offered != tc.offered {
				t.Errorf("switch_relay offered = %v, want %v", offered, tc.offered)
			}
			system := reqs[0].Body.Messages[0].Content
			result := providertest.LastTool(reqs[1].Body)
			if tc.refusedBy != "" {
				if h.Executed("switch_relay") != 0 || !strings.Contains(result, "refused") || !strings.Contains(result, tc.refusedBy) {
					t.Errorf("ran %d times, result %q; want refused naming %s", h.Executed("switch_relay"), result, tc.refusedBy)
				}
				if !strings.Contains(system, "withheld: switch_relay") || !strings.Contains(system, tc.refusedBy) {
					t.Errorf("the system prompt does not say what is withheld and why:\n%s", system)
				}
			} else if h.Executed("switch_relay") != 1 {
				t.Errorf("switch_relay ran %d times with allow_all_tools", h.Executed("switch_relay"))
			}
		})
	}
}

func inboxLen(t *testing.T, h *channeltest.Env) int {
	n := 0
	if err := h.Store.InboxList(func(uint64, []byte) error { n++; return nil }); err != nil {
		t.Fatal(err)
	}
	return n
}

// TestReadyBeforeTheFirstLongPollAnswers: with nothing to deliver, Telegram
// holds a long poll for its whole timeout; the channel is ready as soon as
// getMe answers, not a poll timeout after every start.
func TestReadyBeforeTheFirstLongPollAnswers(t *testing.T) {
	fake := telegramtest.New(token)
	t.Cleanup(fake.Close)
	opts := fastOptions()
	opts.PollTimeout = 30 * time.Second
	opts.Quiet = time.Minute
	_, c := start(t, fake, channeltest.Options{}, nil, opts)
	deadline := time.Now().Add(5 * time.Second)
	for {
		ok, msg := c.Check(context.Background())
		if ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("not ready 5 s after start while the first long poll holds: %s", msg)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSlowDownloadIsNotTheConnectionGoingQuiet: a photo whose download
// takes longer than the watchdog's bound (a large file on a slow link;
// downloads and transcriptions may take two minutes each, Quiet is 80 s)
// reaches the model downloaded, and the connection is not replaced.
func TestSlowDownloadIsNotTheConnectionGoingQuiet(t *testing.T) {
	fake := newFake(t)
	opts := fastOptions()
	opts.Quiet = 400 * time.Millisecond
	opts.PollTimeout = 100 * time.Millisecond
	h, c := start(t, fake, channeltest.Options{}, nil, opts)
	fake.AddFile("photo1", []byte("\xff\xd8\xff fake jpeg"))
	fake.SlowDownloads(1500 * time.Millisecond)
	fake.Add(telegramtest.Message{From: alice, Photo: "photo1", Text: "what is this?"})
	if sent := fake.WaitSent(1, 10*time.Second); len(sent) != 1 {
		t.Fatalf("sent %d, want the answer", len(sent))
	}
	got := providertest.LastUser(h.Provider.Requests()[0].Body)
	if !strings.Contains(got, "[image attached: ") || strings.Contains(got, "not downloaded") {
		t.Errorf("the model saw %q; want the photo downloaded", got)
	}
	if n := c.Replaced(); n != 0 || h.Logs.Count("connection lost") != 0 {
		t.Errorf("the watchdog replaced the connection %d times while a download ran:\n%s", n, h.Logs)
	}
}

// TestAnotherBotsTokenStartsFromItsOwnUpdates: the owner makes a new bot
// with BotFather and puts its token in the config. Update ids are each
// bot's own sequence: the old bot's saved offset and the ids it saw must
// neither make Telegram drop the new bot's first messages nor drop them
// here as redeliveries.
func TestAnotherBotsTokenStartsFromItsOwnUpdates(t *testing.T) {
	fake := newFake(t)
	dir := t.TempDir()
	h, _ := start(t, fake, restartOptions(dir), nil, fastOptions())
	for i := range 5 {
		fake.Add(telegramtest.Message{From: alice, Text: "old bot " + strconv.Itoa(i)})
	}
	fake.WaitSent(5, 10*time.Second)
	h.Stop()

	const token2 = "654321:OTHER-token-abcdefghijklmnopqrs"
	fake2 := telegramtest.New(token2)
	defer fake2.Close()
	fake2.SetBot(telegramtest.User{ID: 888000222, IsBot: true, FirstName: "Perch2", Username: "perch2_bot"})
	var ids []int64
	for i := range 3 {
		ids = append(ids, fake2.Add(telegramtest.Message{From: alice, Text: "new bot " + strconv.Itoa(i)}))
	}
	h2, _ := start(t, fake2, restartOptions(dir, h.Provider), func(b *config.BotChannel) { b.Token = token2 }, fastOptions())
	sent := fake2.WaitSent(3, 10*time.Second)
	if len(sent) != 3 {
		t.Fatalf("the new bot answered %d of its 3 messages (updates %v; offset it was asked from: %d)", len(sent), ids, fake2.Confirmed())
	}
	if h2.Logs.Count("the saved Telegram update offset is another bot's") != 1 {
		t.Errorf("the change of bot is not in the log:\n%s", h2.Logs)
	}
	if strings.Contains(h2.Logs.String(), token2) || strings.Contains(h2.Logs.String(), token) {
		t.Error("the log shows a token")
	}
}

// TestOffsetSavedBeforeBotIDsIsKeptForTheSameBot: an offset saved as a
// bare number (before offsets named their bot) is this bot's after the
// upgrade: the updates below it are not answered again, and an update
// received just before the upgrade, whose offset was not saved yet, is
// dropped as a redelivery.
func TestOffsetSavedBeforeBotIDsIsKeptForTheSameBot(t *testing.T) {
	fake := newFake(t)
	handled := fake.Add(telegramtest.Message{From: alice, Text: "answered before the upgrade"})
	received := fake.Add(telegramtest.Message{From: alice, Text: "received before the upgrade"})
	fake.Add(telegramtest.Message{From: alice, Text: "new"})
	h := channeltest.New(t, restartOptions(t.TempDir()))
	if err := h.Store.Put(store.BucketChannels, "telegram/offset", handled+1); err != nil {
		t.Fatal(err)
	}
	// The old version admitted the second update under its bare id, then
	// stopped before saving the offset past it.
	id, _, err := h.Store.Admit("telegram", strconv.FormatInt(received, 10), 100, func(uint64) ([]byte, error) { return []byte(`{}`), nil })
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Store.InboxDelete(id); err != nil {
		t.Fatal(err)
	}
	c, err := telegram.New(h.Deps(section(fake.Base(), nil)), fastOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(c); err != nil {
		t.Fatal(err)
	}
	fake.WaitSent(1, 10*time.Second)
	time.Sleep(300 * time.Millisecond)
	var texts []string
	for _, s := range fake.Sent() {
		texts = append(texts, s.Text)
	}
	if strings.Join(texts, "|") != "echo: new" {
		t.Errorf("answers %q; want only the update after the saved offset that was not received yet", texts)
	}
	var saved struct{ Bot, Next int64 }
	if err := h.Store.Get(store.BucketChannels, "telegram/offset", &saved); err != nil || saved.Bot != fake.Bot().ID {
		t.Errorf("saved offset %+v, %v; want it to name bot %d", saved, err, fake.Bot().ID)
	}
}

// An album (photos sent together, each its own Telegram message) is one
// message to the agent, with every photo and the caption, whichever photo
// carries it; in a group, the mention on one photo admits the album. A
// photo that arrives a moment after the others still joins them.
func TestAnAlbumIsOneMessage(t *testing.T) {
	fake := newFake(t)
	h, _ := start(t, fake, channeltest.Options{}, nil, fastOptions())
	for _, id := range []string{"p1", "p2", "p3"} {
		fake.AddFile(id, []byte("\xff\xd8\xff fake jpeg "+id))
	}
	mention := map[string]any{"type": "mention", "offset": 0, "length": len("@perch_test_bot")}
	fake.Add(telegramtest.Message{From: alice, ChatID: -500, ChatType: "group", Photo: "p1", MediaGroup: "g1"})
	fake.Add(telegramtest.Message{From: alice, ChatID: -500, ChatType: "group", Photo: "p2", MediaGroup: "g1",
		Text: "@perch_test_bot which of these plants is sick?", Entities: []map[string]any{mention}})
	fake.WaitSent(1, 10*time.Second)
	fake.Add(telegramtest.Message{From: alice, Photo: "p1", MediaGroup: "g2"})
	time.Sleep(300 * time.Millisecond) // the second photo comes in a later getUpdates answer
	fake.Add(telegramtest.Message{From: alice, Photo: "p3", MediaGroup: "g2", Text: "and these?"})
	fake.WaitSent(2, 10*time.Second)
	time.Sleep(500 * time.Millisecond)
	reqs := h.Provider.Requests()
	if len(reqs) != 2 || len(fake.Sent()) != 2 {
		t.Fatalf("%d model calls, %d answers; want one for each album", len(reqs), len(fake.Sent()))
	}
	for i, want := range []string{"which of these plants is sick?", "and these?"} {
		got := providertest.LastUser(reqs[i].Body)
		if !strings.Contains(got, want) || strings.Count(got, "[image attached: ") != 2 {
			t.Errorf("album %d: the model saw %q; want the caption and both photos", i+1, got)
		}
	}
}

// TestARateLimitedChatHoldsUpNoOtherChat: Telegram slows one group down
// for a minute; a private chat's answer meanwhile goes out at once, and
// the group's after the wait. The channel's one sender sat out the
// minute, and every chat of the channel waited with it.
func TestARateLimitedChatHoldsUpNoOtherChat(t *testing.T) {
	fake := newFake(t)
	h, _ := start(t, fake, channeltest.Options{}, nil, fastOptions())
	fake.FailNext("sendMessage", telegramtest.Failure{Code: 429, Description: "Too Many Requests: retry after 60", RetryAfter: 60})
	fake.Add(telegramtest.Message{From: alice, Text: "slowed down"})
	channeltest.Eventually(t, 5*time.Second, "the first reply to meet the rate limit", func() bool { return fake.FailuresLeft("sendMessage") == 0 })
	fake.Add(telegramtest.Message{From: bob, Text: "hello"})
	sent := fake.WaitSent(1, 3*time.Second)
	if len(sent) != 1 || sent[0].ChatID != "99" {
		t.Fatalf("sent %+v within 3 s; want Bob's answer while Alice's chat waits out its minute", sent)
	}
	channeltest.Eventually(t, 5*time.Second, "the inbox to hold Alice's message alone, its reply kept for later", func() bool { return inboxLen(t, h) == 1 })
}
