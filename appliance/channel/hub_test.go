package channel

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/store"
)

// rig is a hub on a real store with its bus, without an agent: tests read
// what reaches the agent from the bus and answer themselves.
type rig struct {
	t     *testing.T
	dir   string
	db    *store.DB
	bus   *bus.Bus
	hub   *Hub
	now   time.Time
	nowMu sync.Mutex
}

func newRig(t *testing.T, dir string) *rig {
	t.Helper()
	if dir == "" {
		dir = t.TempDir()
	}
	db, err := store.Open(filepath.Join(dir, "perch.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := &rig{t: t, dir: dir, db: db, bus: bus.New(16), now: time.Now()}
	r.hub = NewHub(HubOptions{Bus: r.bus, Store: db, Log: slog.New(slog.DiscardHandler), Workspace: filepath.Join(dir, "ws"),
		Now: func() time.Time { r.nowMu.Lock(); defer r.nowMu.Unlock(); return r.now }})
	t.Cleanup(func() { r.hub.Stop(); db.Close() })
	return r
}

func (r *rig) advance(d time.Duration) {
	r.nowMu.Lock()
	r.now = r.now.Add(d)
	r.nowMu.Unlock()
}

func (r *rig) intake(mutate func(*config.BotChannel)) *Intake {
	cfg := config.Default()
	cfg.Channels.Telegram.Enabled = true
	if mutate != nil {
		mutate(&cfg.Channels.Telegram)
	}
	sec, _ := cfg.Channels.Section("telegram")
	return NewIntake(Deps{Section: sec, Bus: r.bus, Store: r.db, Log: slog.New(slog.DiscardHandler), Workspace: filepath.Join(r.dir, "ws"), Hub: r.hub}, IntakeOptions{})
}

// inbound returns what reached the agent within wait.
func (r *rig) inbound(wait time.Duration) []bus.Inbound {
	var out []bus.Inbound
	timeout := time.After(wait)
	for {
		select {
		case in := <-r.bus.Inbound():
			out = append(out, in)
		case <-timeout:
			return out
		}
	}
}

func (r *rig) outbound(wait time.Duration) []bus.Outbound {
	var out []bus.Outbound
	timeout := time.After(wait)
	for {
		select {
		case o := <-r.bus.Outbound():
			out = append(out, o)
		case <-timeout:
			return out
		}
	}
}

// restart stops r and starts a rig on its database in dir with a telegram
// intake, whose sends arrive on sent.
func (r *rig) restart(t *testing.T, dir string) (r2 *rig, sent chan bus.Outbound) {
	t.Helper()
	r.hub.Stop()
	r.db.Close()
	r2 = newRig(t, dir)
	r2.intake(nil)
	sent = make(chan bus.Outbound, 4)
	r2.hub.Prepare()
	r2.hub.Start(context.Background(), func(_ context.Context, o bus.Outbound) error { sent <- o; return nil })
	return r2, sent
}

func (r *rig) inboxLen() int {
	n := 0
	r.db.InboxList(func(uint64, []byte) error { n++; return nil })
	return n
}

func TestReceiveDropsRedeliveriesAndRacingDuplicates(t *testing.T) {
	r := newRig(t, "")
	in := r.intake(nil)
	msg := Message{EventID: "u1", ChatID: "5", SenderID: "5", MessageID: "m1", Text: "hi"}
	var wg sync.WaitGroup
	for i := 0; i < 5; i++ {
		wg.Add(1)
		go func() { defer wg.Done(); in.Receive(context.Background(), msg) }()
	}
	wg.Wait()
	in.Receive(context.Background(), msg)
	got := r.inbound(200 * time.Millisecond)
	if len(got) != 1 {
		t.Fatalf("%d copies reached the agent, want 1", len(got))
	}
	g := got[0]
	if g.InboxID == 0 || g.SessionKey != "telegram:5" || g.ReplyTo != "m1" || !g.RestrictTools || g.Text != "hi" {
		t.Errorf("inbound %+v", g)
	}
	if r.inboxLen() != 1 {
		t.Errorf("inbox holds %d entries, want 1 until answered", r.inboxLen())
	}
}

func TestReceiveGroupRule(t *testing.T) {
	r := newRig(t, "")
	in := r.intake(nil)
	for i, m := range []Message{
		{IsGroup: true, Text: "chatter"},
		{IsGroup: true, Mentioned: true, Text: "to the bot"},
		{IsGroup: true, ReplyToBot: true, Text: "a reply"},
		{Text: "one to one"},
	} {
		m.EventID, m.ChatID, m.SenderID = fmt.Sprint(i), "-1", "7"
		in.Receive(context.Background(), m)
	}
	var texts []string
	for _, g := range r.inbound(200 * time.Millisecond) {
		texts = append(texts, g.Text)
	}
	if strings.Join(texts, "|") != "to the bot|a reply|one to one" {
		t.Errorf("reached the agent: %q", texts)
	}
}

func TestRestrictionFollowsAllowFromAndAllowAllTools(t *testing.T) {
	for _, tc := range []struct {
		name       string
		mutate     func(*config.BotChannel)
		restricted bool
	}{
		{"open channel", nil, true},
		{"open with allow_all_tools", func(b *config.BotChannel) { b.AllowAllTools = true }, false},
		{"allow_from set", func(b *config.BotChannel) { b.AllowFrom = []string{"7"} }, false},
	} {
		r := newRig(t, "")
		in := r.intake(tc.mutate)
		in.Receive(context.Background(), Message{EventID: "e", ChatID: "7", SenderID: "7", Text: "hi"})
		got := r.inbound(200 * time.Millisecond)
		if len(got) != 1 || got[0].RestrictTools != tc.restricted {
			t.Errorf("%s: %+v; want RestrictTools %v", tc.name, got, tc.restricted)
		}
	}
}

func TestPairingAnswerAtMostOnceADay(t *testing.T) {
	r := newRig(t, "")
	in := r.intake(func(b *config.BotChannel) { b.AllowFrom = []string{"1"} })
	stranger := func(ev string) {
		in.Receive(context.Background(), Message{EventID: ev, ChatID: "9", SenderID: "9", Username: "eve", Text: "hello"})
	}
	stranger("a")
	stranger("b")
	outs := r.outbound(200 * time.Millisecond)
	if len(outs) != 1 || outs[0].ChatID != "9" || !strings.Contains(outs[0].Text, "perch channels approve ") {
		t.Fatalf("answers %+v; want one pairing answer", outs)
	}
	if got := r.inbound(50 * time.Millisecond); len(got) != 0 {
		t.Fatalf("a stranger reached the agent: %+v", got)
	}
	code := strings.Fields(strings.SplitN(outs[0].Text, "approve ", 2)[1])[0]
	r.advance(25 * time.Hour)
	if _, err := r.hub.Approve(code); !errors.Is(err, ErrNoPairing) {
		t.Errorf("a day-old code was accepted: %v", err)
	}
	stranger("c")
	outs = r.outbound(200 * time.Millisecond)
	if len(outs) != 1 || strings.Contains(outs[0].Text, code) {
		t.Fatalf("the next day: %+v; want one answer with a new code", outs)
	}
	code2 := strings.Fields(strings.SplitN(outs[0].Text, "approve ", 2)[1])[0]
	a, err := r.hub.Approve(strings.ToLower(code2[:3]) + "-" + code2[3:])
	if err != nil || a.SenderID != "9" || a.Key != "channels.telegram.allow_from" {
		t.Fatalf("approve typed with a dash and in lower case: %+v, %v", a, err)
	}
	r.outbound(100 * time.Millisecond) // the welcome
	stranger("d")
	if got := r.inbound(200 * time.Millisecond); len(got) != 1 {
		t.Errorf("after approval %d messages reached the agent", len(got))
	}
}

func TestPairingCodesAreBounded(t *testing.T) {
	r := newRig(t, "")
	for i := 0; i < maxPairings; i++ {
		if code, err := RequestPairing(r.db, Pairing{Channel: "telegram", SenderID: fmt.Sprint(i)}, r.now); err != nil || code == "" {
			t.Fatalf("code %d: %q %v", i, code, err)
		}
	}
	if _, err := RequestPairing(r.db, Pairing{Channel: "telegram", SenderID: "extra"}, r.now); err == nil {
		t.Error("more codes than the bound were handed out")
	}
	list, _ := Pairings(r.db, r.now)
	if len(list) != maxPairings {
		t.Errorf("%d codes listed", len(list))
	}
	if _, err := RequestPairing(r.db, Pairing{Channel: "telegram", SenderID: "extra"}, r.now.Add(PairingTTL)); err != nil {
		t.Errorf("after expiry no room was made: %v", err)
	}
}

func TestMediaIsSavedCappedAndDescribed(t *testing.T) {
	r := newRig(t, "")
	in := r.intake(func(b *config.BotChannel) { b.MaxMediaMB = 1 })
	fetch := func(data string, size int64) FetchFunc {
		return func(context.Context) (io.ReadCloser, int64, error) {
			return io.NopCloser(strings.NewReader(data)), size, nil
		}
	}
	big := strings.Repeat("x", 1<<20+10)
	in.Receive(context.Background(), Message{EventID: "1", ChatID: "5", SenderID: "5", MessageID: "42", Text: "look", Media: []MediaRef{
		{Kind: MediaImage, MIME: "image/jpeg", Fetch: fetch("jpegdata", 8)},
		{Kind: MediaVideo, Size: 50 << 20, Fetch: fetch("never read", -1)},
		{Kind: MediaVideo, Fetch: fetch(big, -1)}, // lies about nothing, just too big
		{Kind: MediaSticker},
		{Kind: MediaFile, Name: "plan.pdf", Size: 2048, MIME: "application/pdf"},
		{Kind: MediaVoice, MIME: "audio/ogg", Fetch: fetch("OggS", 4)},
	}})
	got := r.inbound(300 * time.Millisecond)
	if len(got) != 1 {
		t.Fatalf("%d inbound", len(got))
	}
	g := got[0]
	for _, want := range []string{"look", "not downloaded: larger than channels.telegram.max_media_mb", "[sticker]", `"plan.pdf"`, "could not be transcribed"} {
		if !strings.Contains(g.Text, want) {
			t.Errorf("text lacks %q:\n%s", want, g.Text)
		}
	}
	if len(g.Media) != 2 {
		t.Fatalf("media %+v; want the image and the voice file", g.Media)
	}
	dir := filepath.Join(r.dir, "ws", "media", "telegram", time.Now().Format("2006-01-02"), "42")
	if g.Media[0].Path != filepath.Join(dir, "image.jpg") || g.Media[1].Path != filepath.Join(dir, "audio-6.ogg") {
		t.Errorf("paths %s, %s", g.Media[0].Path, g.Media[1].Path)
	}
	ents, _ := os.ReadDir(dir)
	if len(ents) != 2 {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("files left in %s: %v; the oversized download must be removed", dir, names)
	}
}

func TestInterruptedTurnIsReplayedUntilAnsweredThenDropped(t *testing.T) {
	dir := t.TempDir()
	r := newRig(t, dir)
	in := r.intake(nil)
	in.Receive(context.Background(), Message{EventID: "e1", ChatID: "5", SenderID: "5", Text: "question"})
	first := r.inbound(200 * time.Millisecond)
	r.hub.Stop()
	r.db.Close()
	// Three restarts without an answer: the turn ran three times.
	for restart := 1; restart <= 3; restart++ {
		r2 := newRig(t, dir)
		r2.intake(nil)
		r2.hub.Start(context.Background(), func(context.Context, bus.Outbound) error { return nil })
		got := r2.inbound(200 * time.Millisecond)
		want := 1
		if restart == 3 {
			want = 0 // dropped after maxTurns
		}
		if len(got) != want {
			t.Fatalf("restart %d: %d replays, want %d", restart, len(got), want)
		}
		if want == 1 && got[0].InboxID != first[0].InboxID {
			t.Errorf("replayed with inbox id %d, want %d", got[0].InboxID, first[0].InboxID)
		}
		r2.hub.Stop()
		r2.db.Close()
	}
	r3 := newRig(t, dir)
	if r3.inboxLen() != 0 {
		t.Errorf("the inbox still holds %d entries", r3.inboxLen())
	}
}

func TestSettleClearsOrKeepsTheReply(t *testing.T) {
	r := newRig(t, "")
	in := r.intake(nil)
	var mu sync.Mutex
	fail := true
	var sent []string
	r.hub.Start(context.Background(), func(_ context.Context, out bus.Outbound) error {
		mu.Lock()
		defer mu.Unlock()
		if fail {
			return errors.New("network down")
		}
		sent = append(sent, out.Text)
		return nil
	})
	for i, ev := range []string{"a", "b", "c"} {
		in.Receive(context.Background(), Message{EventID: ev, ChatID: fmt.Sprint(i), SenderID: "1", Text: ev})
	}
	ins := r.inbound(200 * time.Millisecond)
	if len(ins) != 3 {
		t.Fatalf("%d inbound", len(ins))
	}
	r.hub.Settle(bus.Outbound{Channel: "telegram", ChatID: "0", Text: "done a", InboxID: ins[0].InboxID}, nil)
	r.hub.Settle(bus.Outbound{Channel: "telegram", ChatID: "1", Text: "lost b", InboxID: ins[1].InboxID}, Fail(Permanent, errors.New("chat gone")))
	r.hub.Settle(bus.Outbound{Channel: "telegram", ChatID: "2", Text: "later c", InboxID: ins[2].InboxID}, errors.New("timeout"))
	if n := r.inboxLen(); n != 1 {
		t.Fatalf("inbox holds %d, want only the reply to retry", n)
	}
	mu.Lock()
	fail = false
	mu.Unlock()
	r.hub.poke()
	deadline := time.Now().Add(10 * time.Second)
	for r.inboxLen() != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if strings.Join(sent, "|") != "later c" || r.inboxLen() != 0 {
		t.Errorf("sweeper sent %q, inbox %d", sent, r.inboxLen())
	}
}

func TestEmptyReplyOnlyClearsTheInbox(t *testing.T) {
	r := newRig(t, "")
	in := r.intake(nil)
	ch := &recorder{name: "telegram"}
	m := NewManager(r.bus, slog.New(slog.DiscardHandler))
	m.UseHub(r.hub)
	m.Register(ch)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer m.Stop(context.Background())
	in.Receive(context.Background(), Message{EventID: "x", ChatID: "3", SenderID: "3", Text: "/new"})
	got := r.inbound(200 * time.Millisecond)
	r.bus.PublishOutbound(bus.Outbound{Channel: "telegram", ChatID: "3", InboxID: got[0].InboxID})
	deadline := time.Now().Add(5 * time.Second)
	for r.inboxLen() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if r.inboxLen() != 0 || ch.count() != 0 {
		t.Errorf("inbox %d, sends %d; an empty reply sends nothing and clears its entry", r.inboxLen(), ch.count())
	}
}

func TestStopSendsRepliesAlreadyQueued(t *testing.T) {
	b := bus.New(16)
	ch := &recorder{name: "telegram", delay: 20 * time.Millisecond}
	m := NewManager(b, slog.New(slog.DiscardHandler))
	m.Register(ch)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		b.PublishOutbound(bus.Outbound{Channel: "telegram", ChatID: "1", Text: fmt.Sprint(i)})
	}
	m.Stop(context.Background())
	if got := ch.texts(); strings.Join(got, "") != "01234" {
		t.Errorf("sent before stopping: %q; want all five, in order", got)
	}
}

type recorder struct {
	name  string
	delay time.Duration
	mu    sync.Mutex
	sent  []string
}

func (r *recorder) Name() string                         { return r.name }
func (r *recorder) Start(context.Context) error          { return nil }
func (r *recorder) Stop(context.Context) error           { return nil }
func (r *recorder) Check(context.Context) (bool, string) { return true, "" }
func (r *recorder) Send(_ context.Context, m bus.Outbound) error {
	time.Sleep(r.delay)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.sent = append(r.sent, m.Text)
	return nil
}
func (r *recorder) count() int { r.mu.Lock(); defer r.mu.Unlock(); return len(r.sent) }
func (r *recorder) texts() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.sent...)
}

func TestOpenChannelLogsEachNewSenderOnce(t *testing.T) {
	r := newRig(t, "")
	var buf strings.Builder
	var mu sync.Mutex
	cfg := config.Default()
	sec, _ := cfg.Channels.Section("line")
	in := NewIntake(Deps{Section: sec, Bus: r.bus, Store: r.db, Hub: r.hub,
		Log: slog.New(slog.NewTextHandler(writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return buf.Write(p) }), nil))}, IntakeOptions{})
	for i, sender := range []string{"Ua", "Ua", "Ub"} {
		in.Receive(context.Background(), Message{EventID: fmt.Sprint(i), ChatID: sender, SenderID: sender, Text: "hi"})
	}
	mu.Lock()
	defer mu.Unlock()
	if n := strings.Count(buf.String(), "open to anyone"); n != 2 || !strings.Contains(buf.String(), "channels.line.allow_from") || !strings.Contains(buf.String(), "sender=Ub") {
		t.Errorf("log:\n%s", buf.String())
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestHubConnectsCountsConnectionsComingUp: the idle trimmer's signal
// changes when a channel's connection comes up (first time or again after
// a drop), not while it stays up.
func TestHubConnectsCountsConnectionsComingUp(t *testing.T) {
	r := newRig(t, "")
	in := r.intake(nil)
	if n := r.hub.Connects(); n != 0 {
		t.Fatalf("before any connection: %d", n)
	}
	in.State().Disconnected("Telegram unreachable at start")
	if n := r.hub.Connects(); n != 0 {
		t.Fatalf("after a failed first try: %d", n)
	}
	in.State().Connected()
	in.State().Connected() // every successful poll says so again
	if n := r.hub.Connects(); n != 1 {
		t.Fatalf("after connecting: %d, want 1", n)
	}
	in.State().Disconnected("connection went quiet")
	in.State().Connected()
	if n := r.hub.Connects(); n != 2 {
		t.Fatalf("after reconnecting: %d, want 2", n)
	}
}

// A reply that failed after some of its parts were delivered is sent again
// from the first undelivered part, and not before the wait the platform
// asked for.
func TestAPartlySentReplyResumesAfterTheWaitAsked(t *testing.T) {
	r := newRig(t, "")
	in := r.intake(nil)
	var mu sync.Mutex
	var calls []int // out.Delivered at each send
	r.hub.Start(context.Background(), func(_ context.Context, out bus.Outbound) error {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, out.Delivered)
		if len(calls) == 1 {
			return Partial(3, RetryAfter(10*time.Minute, errors.New("429 Too Many Requests")))
		}
		return nil
	})
	in.Receive(context.Background(), Message{EventID: "e", ChatID: "5", SenderID: "1", Text: "tell me everything"})
	ins := r.inbound(200 * time.Millisecond)
	if len(ins) != 1 {
		t.Fatalf("%d inbound", len(ins))
	}
	r.hub.Settle(bus.Outbound{Channel: "telegram", ChatID: "5", Text: "a long answer", InboxID: ins[0].InboxID}, Partial(2, errors.New("connection reset")))
	sends := func() []int {
		mu.Lock()
		defer mu.Unlock()
		return append([]int(nil), calls...)
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(sends()) < 1 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	r.hub.poke()
	time.Sleep(500 * time.Millisecond)
	if got := sends(); fmt.Sprint(got) != "[2]" {
		t.Fatalf("sends from part %v; want one from part 2, then none during the 10 minutes asked", got)
	}
	r.advance(11 * time.Minute)
	r.hub.poke()
	for r.inboxLen() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := sends(); fmt.Sprint(got) != "[2 3]" || r.inboxLen() != 0 {
		t.Errorf("sends from part %v, inbox %d; want part 2, then part 3 after the wait", got, r.inboxLen())
	}
}

// Every platform's typing indicator lasts as long as a turn may run: it
// stopped after two minutes, while the agent may work for five.
func TestTypingLastsAsLongAsATurnMay(t *testing.T) {
	r := newRig(t, "")
	cfg := config.Default()
	sec, _ := cfg.Channels.Section("telegram")
	for turn, want := range map[time.Duration]time.Duration{0: 300*time.Second + SendTimeout, 10 * time.Minute: 10*time.Minute + SendTimeout} {
		in := NewIntake(Deps{Section: sec, Bus: r.bus, Store: r.db, Log: slog.New(slog.DiscardHandler), Hub: r.hub, TurnTimeout: turn}, IntakeOptions{})
		if got := in.TypingFor(); got != want {
			t.Errorf("turn timeout %s: typing for %s, want %s", turn, got, want)
		}
	}
}

// A command that replaced a folder of the media path by a link out of the
// workspace (to the config's directory) does not get the attachment
// written there: the download is refused and nothing lands outside.
func TestMediaIsNotWrittenThroughALinkOut(t *testing.T) {
	r := newRig(t, "")
	in := r.intake(nil)
	outside := t.TempDir()
	media := filepath.Join(r.dir, "ws", "media")
	if err := os.MkdirAll(media, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(media, "telegram")); err != nil {
		t.Fatal(err)
	}
	in.Receive(context.Background(), Message{EventID: "1", ChatID: "5", SenderID: "5", MessageID: "43", Text: "look", Media: []MediaRef{
		{Kind: MediaImage, MIME: "image/jpeg", Fetch: func(context.Context) (io.ReadCloser, int64, error) {
			return io.NopCloser(strings.NewReader(`{"providers":{}}`)), 16, nil
		}},
	}})
	got := r.inbound(300 * time.Millisecond)
	if len(got) != 1 || len(got[0].Media) != 0 || !strings.Contains(got[0].Text, "not downloaded") {
		t.Fatalf("inbound %+v", got)
	}
	var found []string
	filepath.WalkDir(outside, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			found = append(found, p)
		}
		return nil
	})
	if len(found) > 0 {
		t.Errorf("written outside the workspace: %v", found)
	}
}

// A reply held for sending when the gateway stops (or dies) before the
// platform took it all is sent at the next start, from the part that did
// not arrive: the turn is not run again (a second, different answer after
// the first one's start, and the message twice in the history).
func TestHeldReplyIsSentAtTheNextStartNotAnsweredAgain(t *testing.T) {
	for _, how := range []string{"killed while sending", "stopped during a rate-limit wait"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			r := newRig(t, dir)
			in := r.intake(nil)
			in.Receive(context.Background(), Message{EventID: "e1", ChatID: "5", SenderID: "5", Text: "long please"})
			got := r.inbound(200 * time.Millisecond)
			if len(got) != 1 {
				t.Fatalf("%d inbound", len(got))
			}
			out := bus.Outbound{Channel: "telegram", ChatID: "5", Text: "part one\n\npart two", InboxID: got[0].InboxID}
			r.hub.Hold(out)
			if how == "stopped during a rate-limit wait" {
				// The sender's report as the gateway stops: one part went.
				r.hub.Stopped(out, &PartialError{Delivered: 1, Err: &SendError{Kind: RateLimited, Err: errors.New("429")}})
			}
			r2, sent := r.restart(t, dir)
			if again := r2.inbound(300 * time.Millisecond); len(again) != 0 {
				t.Fatalf("the turn ran again: %+v", again)
			}
			select {
			case o := <-sent:
				want := 0
				if how == "stopped during a rate-limit wait" {
					want = 1
				}
				if o.Text != out.Text || o.Delivered != want {
					t.Errorf("resent %q from part %d, want %q from part %d", o.Text, o.Delivered, out.Text, want)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("the held reply was not sent")
			}
			select {
			case o := <-sent:
				t.Errorf("sent twice: %+v", o)
			case <-time.After(300 * time.Millisecond):
			}
		})
	}
}

// While a sender has a reply, the sweeper leaves it alone: a held reply is
// not sent twice in one run.
func TestHeldReplyIsNotSweptMeanwhile(t *testing.T) {
	r := newRig(t, "")
	in := r.intake(nil)
	in.Receive(context.Background(), Message{EventID: "e1", ChatID: "5", SenderID: "5", Text: "hi"})
	got := r.inbound(200 * time.Millisecond)
	swept := make(chan bus.Outbound, 4)
	r.hub.Start(context.Background(), func(_ context.Context, o bus.Outbound) error { swept <- o; return nil })
	out := bus.Outbound{Channel: "telegram", ChatID: "5", Text: "hello", InboxID: got[0].InboxID}
	r.hub.Hold(out)
	r.hub.poke()
	select {
	case o := <-swept:
		t.Fatalf("the sweeper sent a held reply: %+v", o)
	case <-time.After(300 * time.Millisecond):
	}
	r.hub.Settle(out, nil)
	if e, ok := r.hub.load(out.InboxID); ok {
		t.Errorf("the entry outlived its delivered reply: %+v", e)
	}
}

// TestAllowFromIDsAreNotUsernames: an allow_from entry shaped like an id
// admits that account only. A stranger who took the owner's numeric id
// as their username was let in with every tool.
func TestAllowFromIDsAreNotUsernames(t *testing.T) {
	r := newRig(t, "")
	in := r.intake(func(b *config.BotChannel) { b.AllowFrom = []string{"100000000000000001", "bob", "@4242"} })
	for i, tc := range []struct {
		id, username string
		allowed      bool
	}{
		{"77", "100000000000000001", false}, // the owner's id as a username
		{"100000000000000001", "someone", true},
		{"78", "Bob", true},  // usernames ignore case and the @
		{"79", "@bob", true}, // as Telegram writes them
		{"80", "4242", true}, // a digits username written with @
		{"81", "", false},    // no username, not listed
		{"", "eve", false},   // no id, not listed
	} {
		in.Receive(context.Background(), Message{EventID: fmt.Sprint(i), ChatID: "c" + fmt.Sprint(i), SenderID: tc.id, Username: tc.username, Text: "hi"})
		got := r.inbound(100 * time.Millisecond)
		if (len(got) == 1) != tc.allowed {
			t.Errorf("sender %q username %q: %d messages reached the agent, want allowed=%v", tc.id, tc.username, len(got), tc.allowed)
		}
		r.outbound(20 * time.Millisecond)
	}
}

// TestNoPairingForAMessageWithoutSender: a message whose platform left
// the sender out gets no code; a code stored for one (older gateways gave
// them) is refused and removed, and allow_from stays as it was. Approving
// one wrote "" into allow_from, and the next start refused the config.
func TestNoPairingForAMessageWithoutSender(t *testing.T) {
	r := newRig(t, "")
	var saved []string
	r.hub.o.SaveAllowFrom = func(ch, id string) error { saved = append(saved, id); return nil }
	in := r.intake(func(b *config.BotChannel) { b.AllowFrom = []string{"1"} })
	in.Receive(context.Background(), Message{EventID: "e", ChatID: "-5", IsGroup: true, Mentioned: true, Text: "hi"})
	if outs := r.outbound(200 * time.Millisecond); len(outs) != 0 {
		t.Errorf("a message with no sender was answered: %+v", outs)
	}
	if got := r.inbound(50 * time.Millisecond); len(got) != 0 {
		t.Errorf("it reached the agent: %+v", got)
	}
	code, err := RequestPairing(r.db, Pairing{Channel: "telegram", ChatID: "-5"}, r.now)
	if err != nil || code == "" {
		t.Fatalf("storing an old code: %q %v", code, err)
	}
	if _, err := r.hub.Approve(code); err == nil || !strings.Contains(err.Error(), "no sender id") {
		t.Errorf("approving a code without a sender: %v", err)
	}
	if len(saved) != 0 {
		t.Errorf("allow_from gained %q", saved)
	}
	if list, _ := Pairings(r.db, r.now); len(list) != 0 {
		t.Errorf("the code is still pending: %+v", list)
	}
}

// TestWelcomeGoesToThePairingThread: the welcome after approval lands in
// the thread where the code was given (a Slack channel thread), not at the
// channel's top level.
func TestWelcomeGoesToThePairingThread(t *testing.T) {
	r := newRig(t, "")
	in := r.intake(func(b *config.BotChannel) { b.AllowFrom = []string{"1"} })
	in.Receive(context.Background(), Message{EventID: "e", ChatID: "C011", ThreadID: "1700000000.010400", SenderID: "9", IsGroup: true, Mentioned: true, Text: "hi"})
	outs := r.outbound(200 * time.Millisecond)
	if len(outs) != 1 || outs[0].ThreadID != "1700000000.010400" {
		t.Fatalf("pairing answers %+v", outs)
	}
	code := strings.Fields(strings.SplitN(outs[0].Text, "approve ", 2)[1])[0]
	if _, err := r.hub.Approve(code); err != nil {
		t.Fatal(err)
	}
	outs = r.outbound(200 * time.Millisecond)
	if len(outs) != 1 || outs[0].ChatID != "C011" || outs[0].ThreadID != "1700000000.010400" || !strings.Contains(outs[0].Text, "approved") {
		t.Errorf("welcome %+v; want it in the thread", outs)
	}
}

// TestMessageAnsweringNobodyIsKeptThroughAnOutage: a reminder, heartbeat
// or notice the platform did not take for now waits in the inbox and goes
// out when the platform answers again, after a restart too; one it refused
// for good is not kept. Such messages were lost after a few seconds of
// outage.
func TestMessageAnsweringNobodyIsKeptThroughAnOutage(t *testing.T) {
	dir := t.TempDir()
	r := newRig(t, dir)
	r.intake(nil)
	r.hub.Start(context.Background(), func(context.Context, bus.Outbound) error { return errors.New("network down") })
	r.hub.Settle(bus.Outbound{Channel: "telegram", ChatID: "5", Text: "water the plants"}, errors.New("timeout"))
	r.hub.Settle(bus.Outbound{Channel: "telegram", ChatID: "6", Text: "to a chat that is gone"}, Fail(Permanent, errors.New("chat not found")))
	r.hub.Stopped(bus.Outbound{Channel: "telegram", ChatID: "7", Text: "cut short by the stop"}, &SendError{Kind: RateLimited, Err: errors.New("429")})
	if n := r.inboxLen(); n != 2 {
		t.Fatalf("inbox holds %d, want the two that failed for now", n)
	}
	r2, sent := r.restart(t, dir)
	var got []string
	for len(got) < 2 {
		select {
		case o := <-sent:
			got = append(got, o.ChatID+":"+o.Text)
		case <-time.After(10 * time.Second):
			t.Fatalf("sent %q; want both kept messages", got)
		}
	}
	sort.Strings(got)
	if strings.Join(got, "|") != "5:water the plants|7:cut short by the stop" {
		t.Errorf("sent %q", got)
	}
	if again := r2.inbound(200 * time.Millisecond); len(again) != 0 {
		t.Errorf("a kept message became a turn: %+v", again)
	}
	deadline := time.Now().Add(5 * time.Second)
	for r2.inboxLen() != 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := r2.inboxLen(); n != 0 {
		t.Errorf("inbox holds %d after sending", n)
	}
	select {
	case o := <-sent:
		t.Errorf("sent twice: %+v", o)
	case <-time.After(300 * time.Millisecond):
	}
}

// limitedOnce refuses its first message with a long rate limit and takes
// the rest, recording them.
type limitedOnce struct {
	recorder
	refused bool
}

func (l *limitedOnce) Send(ctx context.Context, m bus.Outbound) error {
	l.mu.Lock()
	first := !l.refused
	l.refused = true
	l.mu.Unlock()
	if first {
		return RetryAfter(10*time.Minute, errors.New("429 Too Many Requests"))
	}
	return l.recorder.Send(ctx, m)
}

// TestAChatReadsItsRepliesInOrder: while a reply to a chat waits out a
// rate limit, a later reply to that chat waits behind it, and other chats
// are not held up. B's reply reached the chat minutes before A's.
func TestAChatReadsItsRepliesInOrder(t *testing.T) {
	r := newRig(t, "")
	in := r.intake(nil)
	ch := &limitedOnce{recorder: recorder{name: "telegram"}}
	m := NewManager(r.bus, slog.New(slog.DiscardHandler))
	m.UseHub(r.hub)
	m.Register(ch)
	if err := m.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Stop(context.Background()) })
	for i, c := range []string{"5", "5", "6"} {
		in.Receive(context.Background(), Message{EventID: fmt.Sprint(i), ChatID: c, SenderID: c, Text: fmt.Sprint(i)})
	}
	ins := r.inbound(200 * time.Millisecond)
	if len(ins) != 3 {
		t.Fatalf("%d inbound", len(ins))
	}
	reply := func(i int, text string) {
		r.bus.PublishOutbound(bus.Outbound{Channel: "telegram", ChatID: ins[i].ChatID, Text: text, InboxID: ins[i].InboxID})
	}
	reply(0, "A to 5")
	deadline := time.Now().Add(5 * time.Second)
	for {
		ch.mu.Lock()
		refused := ch.refused
		ch.mu.Unlock()
		if refused || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // the refusal settles: A is kept
	reply(1, "B to 5")
	reply(2, "C to 6")
	for ch.count() < 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	time.Sleep(300 * time.Millisecond)
	if got := strings.Join(ch.texts(), "|"); got != "C to 6" {
		t.Fatalf("sent %q during the rate limit; want only the other chat's", got)
	}
	r.advance(11 * time.Minute)
	r.hub.poke()
	for ch.count() < 3 && time.Now().Before(deadline.Add(10*time.Second)) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := strings.Join(ch.texts(), "|"); got != "C to 6|A to 5|B to 5" {
		t.Errorf("sent %q; want chat 5's replies in order after the wait", got)
	}
	for r.inboxLen() != 0 && time.Now().Before(deadline.Add(10*time.Second)) {
		time.Sleep(10 * time.Millisecond) // the last send is settled just after it
	}
	if n := r.inboxLen(); n != 0 {
		t.Errorf("inbox holds %d", n)
	}
}

// TestAChatsMessagesKeepTheirOrderPastAFullQueue: a message the agent's
// queue had no room for waits in the inbox, and the chat's later messages
// wait behind it, though the queue has room again when they come; handed
// over at once, they were answered before it.
func TestAChatsMessagesKeepTheirOrderPastAFullQueue(t *testing.T) {
	r := newRig(t, "")
	in := r.intake(nil)
	r.hub.Prepare()
	r.hub.Start(context.Background(), func(context.Context, bus.Outbound) error { return nil })
	receive := func(i int) {
		if err := in.Receive(context.Background(), Message{EventID: fmt.Sprint(i), ChatID: "5", SenderID: "5", Text: fmt.Sprintf("m%02d", i)}); err != nil {
			t.Fatal(err)
		}
	}
	const n = 30
	for i := range 17 { // the queue holds 16: the 17th waits in the inbox
		receive(i)
	}
	got := make(chan []string)
	go func() {
		var texts []string
		for len(texts) < n {
			select {
			case ib := <-r.bus.Inbound():
				texts = append(texts, ib.Text)
			case <-time.After(10 * time.Second):
				got <- texts
				return
			}
		}
		got <- texts
	}()
	time.Sleep(50 * time.Millisecond) // the agent has taken messages: there is room
	for i := 17; i < n; i++ {
		receive(i)
	}
	texts := <-got
	var want []string
	for i := range n {
		want = append(want, fmt.Sprintf("m%02d", i))
	}
	if !slices.Equal(texts, want) {
		t.Errorf("the agent received\n%q\nwant\n%q", texts, want)
	}
}

// TestANewMessageWaitsForTheReplayOfItsChat: the channels start (and may
// take a message) before the hub replays what the last run left; a new
// message waits behind the replayed one of its chat, or it was answered
// first.
func TestANewMessageWaitsForTheReplayOfItsChat(t *testing.T) {
	dir := t.TempDir()
	r := newRig(t, dir)
	in := r.intake(nil)
	in.Receive(context.Background(), Message{EventID: "e1", ChatID: "5", SenderID: "5", Text: "left by the last run"})
	r.inbound(200 * time.Millisecond)
	r.hub.Stop()
	r.db.Close()

	r2 := newRig(t, dir)
	in2 := r2.intake(nil)
	r2.hub.Prepare() // as the channel manager does before the channels start
	if err := in2.Receive(context.Background(), Message{EventID: "e2", ChatID: "5", SenderID: "5", Text: "new"}); err != nil {
		t.Fatal(err)
	}
	r2.hub.Start(context.Background(), func(context.Context, bus.Outbound) error { return nil })
	got := r2.inbound(2 * time.Second)
	var texts []string
	for _, ib := range got {
		texts = append(texts, ib.Text)
	}
	if !slices.Equal(texts, []string{"left by the last run", "new"}) {
		t.Errorf("the agent received %q; want the replayed message first", texts)
	}
}
