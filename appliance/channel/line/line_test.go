package line_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf16"

	"github.com/perchhq/perch/appliance/gateway/gatewaytest"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/channel"
	"github.com/perchhq/perch/appliance/channel/channeltest"
	"github.com/perchhq/perch/appliance/channel/line"
	"github.com/perchhq/perch/appliance/channel/line/linetest"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/provider"
	"github.com/perchhq/perch/appliance/provider/providertest"
)

const (
	accessToken = "line-access-token-0123456789abcdef"
	secret      = "0123456789abcdef0123456789abcdef"
	alice       = "U11111111111111111111111111111111"
	bob         = "U22222222222222222222222222222222"
	group       = "C33333333333333333333333333333333"
)

func section(base string, port int, mutate func(*config.LINEChannel)) config.ChannelSection {
	cfg := config.Default()
	l := &cfg.Channels.LINE
	l.Enabled, l.ChannelSecret, l.ChannelAccessToken = true, secret, accessToken
	l.APIBase, l.DataAPIBase = base, base
	l.WebhookHost, l.WebhookPort = "127.0.0.1", port
	if mutate != nil {
		mutate(l)
	}
	sec, _ := cfg.Channels.Section("line")
	return sec
}

type env struct {
	h    *channeltest.Env
	c    *line.Channel
	fake *linetest.Server
	url  string
}

func fastOptions() line.Options {
	return line.Options{Backoff: channel.Backoff{Min: 5 * time.Millisecond, Max: 50 * time.Millisecond}, StartTimeout: 2 * time.Second}
}

func start(t *testing.T, fake *linetest.Server, o channeltest.Options, mutate func(*config.LINEChannel), opts line.Options) *env {
	t.Helper()
	h := channeltest.New(t, o)
	port := gatewaytest.FreePort(t)
	c, err := line.New(h.Deps(section(fake.Base(), port, mutate)), opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(c); err != nil {
		t.Fatal(err)
	}
	return &env{h: h, c: c, fake: fake, url: "http://" + c.Addr() + "/webhook/line"}
}

func newFake(t *testing.T) *linetest.Server {
	fake := linetest.New(accessToken, secret)
	t.Cleanup(fake.Close)
	return fake
}

func (e *env) deliver(t *testing.T, ds ...linetest.Delivery) {
	t.Helper()
	code, err := e.fake.Deliver(e.url, ds...)
	if err != nil || code != 200 {
		t.Fatalf("webhook answered %d, %v", code, err)
	}
}

func TestMessageIsAnsweredWithTheReplyTokenQuotingIt(t *testing.T) {
	fake := newFake(t)
	e := start(t, fake, channeltest.Options{}, nil, fastOptions())
	// A model takes a while; the instant fake could answer before the
	// loading animation's request left (an answer that quick needs none,
	// and the channel then sends none), so it answers once LINE has it.
	e.h.Provider.Default = func(r providertest.ChatRequest) providertest.Reply {
		for deadline := time.Now().Add(5 * time.Second); len(fake.Loadings()) == 0 && time.Now().Before(deadline); {
			time.Sleep(5 * time.Millisecond)
		}
		return providertest.Reply{Content: "echo: " + providertest.LastUser(r)}
	}
	d := fake.NewEvent(linetest.Event{UserID: alice, Text: "hello"})
	e.deliver(t, d)
	sent := fake.WaitSent(1, 10*time.Second)
	if len(sent) != 1 || sent[0].API != "reply" || sent[0].To != alice || sent[0].Text != "echo: hello" || sent[0].QuoteToken != d.QuoteToken {
		t.Fatalf("sent %+v; want the echo as a reply quoting the message", sent)
	}
	if fake.Pushes() != 0 || e.c.PushesThisMonth() != 0 {
		t.Errorf("pushed %d messages; a fresh reply token needs none", fake.Pushes())
	}
	if l := fake.Loadings(); len(l) == 0 || l[0].ChatID != alice || l[0].Seconds != 60 {
		t.Errorf("loading animations %+v; want one for 60 s in Alice's chat", l)
	}
	if _, err := e.h.Store.Session("line:" + alice); err != nil {
		t.Errorf("no session line:%s: %v", alice, err)
	}
}

func TestSignatureIsRequired(t *testing.T) {
	fake := newFake(t)
	e := start(t, fake, channeltest.Options{}, nil, fastOptions())
	body := linetest.Body(fake.NewEvent(linetest.Event{UserID: alice, Text: "forged"}))
	good := linetest.Signature(secret, body)
	bad := []byte(good)
	bad[len(bad)-3] ^= 1 // one bit off: same length, same prefix
	for _, tc := range []struct {
		name, sig string
		want      int
	}{
		{"missing", "", 403},
		{"wrong secret", linetest.Signature("another-secret", body), 403},
		{"one bit off", string(bad), 403},
		{"not base64", "!!!", 403},
		{"right", good, 200},
	} {
		code, err := linetest.Post(e.url, body, tc.sig)
		if err != nil || code != tc.want {
			t.Errorf("%s signature: %d, %v; want %d", tc.name, code, err, tc.want)
		}
	}
	fake.WaitSent(1, 10*time.Second)
	time.Sleep(200 * time.Millisecond)
	if n := len(fake.Sent()); n != 1 || e.h.Provider.Calls() != 1 {
		t.Errorf("%d answers and %d model calls; only the signed delivery may reach the agent", n, e.h.Provider.Calls())
	}
	if !line.ValidSignature([]byte(secret), body, good) || line.ValidSignature([]byte(secret), body, string(bad)) {
		t.Error("ValidSignature disagrees with LINE's definition")
	}
}

func TestExpiredReplyTokenFallsBackToPushAndIsCounted(t *testing.T) {
	fake := newFake(t)
	prov := providertest.New()
	defer prov.Close()
	prov.Default = func(r providertest.ChatRequest) providertest.Reply {
		time.Sleep(300 * time.Millisecond) // longer than the token lives
		return providertest.Reply{Content: "slow answer"}
	}
	opts := fastOptions()
	opts.ReplyTTL = 100 * time.Millisecond
	e := start(t, fake, channeltest.Options{Provider: prov}, nil, opts)
	e.deliver(t, fake.NewEvent(linetest.Event{UserID: alice, Text: "take your time"}))
	sent := fake.WaitSent(1, 10*time.Second)
	if len(sent) != 1 || sent[0].API != "push" || sent[0].To != alice || fake.Requests("reply") != 0 {
		t.Fatalf("sent %+v (%d reply calls); want one push, no reply with a stale token", sent, fake.Requests("reply"))
	}
	channeltest.Eventually(t, 5*time.Second, "the push to be counted", func() bool { return e.c.PushesThisMonth() == 1 })
	if st := e.h.Manager.Status()["line"]; st.Extra["pushes_this_month"] != 1 {
		t.Errorf("/admin/status shows %+v; want pushes_this_month 1", st.Extra)
	}
}

func TestReplyTokenRefusedByLINEFallsBackToPush(t *testing.T) {
	fake := newFake(t)
	fake.SetReplyTTL(time.Millisecond) // LINE's side expired it already
	e := start(t, fake, channeltest.Options{}, nil, fastOptions())
	e.deliver(t, fake.NewEvent(linetest.Event{UserID: alice, Text: "hi"}))
	sent := fake.WaitSent(1, 10*time.Second)
	if len(sent) != 1 || sent[0].API != "push" || sent[0].Text != "echo: hi" {
		t.Fatalf("sent %+v; want the answer pushed after LINE refused the token", sent)
	}
	_ = e
}

func TestRedeliveryIsAnsweredOnce(t *testing.T) {
	fake := newFake(t)
	dir := t.TempDir()
	e := start(t, fake, restartOptions(dir), nil, fastOptions())
	d := fake.NewEvent(linetest.Event{UserID: alice, Text: "once"})
	e.deliver(t, d)
	fake.WaitSent(1, 10*time.Second)
	e.deliver(t, fake.Redelivery(d))
	// And after a restart, LINE redelivers again.
	e.h.Stop()
	e2 := start(t, fake, restartOptions(dir, e.h.Provider), nil, fastOptions())
	e2.deliver(t, fake.Redelivery(d))
	time.Sleep(500 * time.Millisecond)
	if n := len(fake.Sent()); n != 1 {
		t.Errorf("answered %d times, want once", n)
	}
}

func TestAllowFromRefusesStrangersWithOnePairingCode(t *testing.T) {
	fake := newFake(t)
	e := start(t, fake, channeltest.Options{}, func(l *config.LINEChannel) { l.AllowFrom = []string{alice} }, fastOptions())
	e.deliver(t, fake.NewEvent(linetest.Event{UserID: bob, Text: "let me in"}), fake.NewEvent(linetest.Event{UserID: bob, Text: "please"}))
	fake.WaitSent(1, 10*time.Second)
	time.Sleep(300 * time.Millisecond)
	sent := fake.Sent()
	if len(sent) != 1 || sent[0].To != bob || !strings.Contains(sent[0].Text, "perch channels approve") || e.h.Provider.Calls() != 0 {
		t.Fatalf("sent %+v, %d model calls; want one pairing answer and nothing for the model", sent, e.h.Provider.Calls())
	}
	e.deliver(t, fake.NewEvent(linetest.Event{UserID: alice, Text: "hi"}))
	if sent := fake.WaitSent(2, 10*time.Second); len(sent) != 2 || sent[1].Text != "echo: hi" {
		t.Fatalf("the allowed sender got %+v", sent)
	}
}

func TestGroupMessagesNeedAMentionOrAReply(t *testing.T) {
	fake := newFake(t)
	e := start(t, fake, channeltest.Options{}, nil, fastOptions())
	ev := func(ev linetest.Event) linetest.Delivery {
		ev.UserID, ev.GroupID = alice, group
		return fake.NewEvent(ev)
	}
	e.deliver(t, ev(linetest.Event{Text: "talking among ourselves"}))
	e.deliver(t, ev(linetest.Event{Text: "@Perch what time is it", SelfMention: true, MentionIndex: 0, MentionLength: 6}))
	fake.WaitSent(1, 10*time.Second)
	e.deliver(t, ev(linetest.Event{Text: "Perch, water the plants"}))
	sent := fake.WaitSent(2, 10*time.Second)
	e.deliver(t, ev(linetest.Event{Text: "and the roses too", QuotedMessageID: sent[0].ID}))
	fake.WaitSent(3, 10*time.Second)
	// The mention goes; the user's lines stay.
	e.deliver(t, ev(linetest.Event{Text: "@Perch summarise:\n1. a\n2. b", SelfMention: true, MentionIndex: 0, MentionLength: 6}))
	fake.WaitSent(4, 10*time.Second)
	// In a one-to-one chat nothing is taken out: the bot's name is a word.
	e.deliver(t, fake.NewEvent(linetest.Event{UserID: alice, Text: "What does a perch eat?"}))
	fake.WaitSent(5, 10*time.Second)
	time.Sleep(300 * time.Millisecond)
	var seen []string
	for _, r := range e.h.Provider.Requests() {
		seen = append(seen, providertest.LastUser(r.Body))
	}
	want := "what time is it|water the plants|and the roses too|summarise:\n1. a\n2. b|What does a perch eat?"
	if strings.Join(seen, "|") != want {
		t.Errorf("the model saw %q, want %q", seen, want)
	}
	for _, l := range fake.Loadings() {
		if l.ChatID == group {
			t.Errorf("loading animation %+v in a group (LINE has none there)", l)
		}
	}
}

func TestLongReplyArrivesWholeInOrder(t *testing.T) {
	fake := newFake(t)
	prov := providertest.New()
	defer prov.Close()
	var sb strings.Builder
	for i := 0; sb.Len() < 33000; i++ {
		sb.WriteString("Line " + strconv.Itoa(i) + " of the **garden log**: 🌿 watered, soil moist.\n")
		if i%20 == 19 {
			sb.WriteString("\n")
		}
	}
	long := sb.String()
	prov.Enqueue(providertest.Reply{Content: long})
	e := start(t, fake, channeltest.Options{Provider: prov}, nil, fastOptions())
	e.deliver(t, fake.NewEvent(linetest.Event{UserID: alice, Text: "the whole log"}))
	fake.WaitSent(7, 15*time.Second)
	time.Sleep(300 * time.Millisecond)
	sent := fake.Sent()
	if len(sent) < 7 {
		t.Fatalf("%d messages; want more than 5 (the reply carries 5, the rest is pushed)", len(sent))
	}
	var texts []string
	for i, s := range sent {
		if n := len(utf16.Encode([]rune(s.Text))); n > line.TextLimit {
			t.Errorf("message %d is %d units", i, n)
		}
		if wantAPI := map[bool]string{true: "reply", false: "push"}[i < 5]; s.API != wantAPI {
			t.Errorf("message %d went by %s, want %s", i, s.API, wantAPI)
		}
		texts = append(texts, s.Text)
	}
	got := strings.Join(strings.Fields(strings.Join(texts, "\n")), " ")
	want := strings.Join(strings.Fields(strings.ReplaceAll(long, "**", "")), " ")
	if got != want {
		t.Errorf("the messages do not add up to the reply as plain text in order")
	}
	channeltest.Eventually(t, 5*time.Second, "the pushes to be counted", func() bool { return e.c.PushesThisMonth() == len(sent)-5 })
	if e.c.PushesThisMonth() != len(sent)-5 {
		t.Errorf("pushes counted %d, want %d", e.c.PushesThisMonth(), len(sent)-5)
	}
}

func TestMarkdownArrivesAsPlainText(t *testing.T) {
	// LINE has no markup to refuse: the reply is rendered as plain text
	// before it is sent, so there is no formatting for LINE to reject.
	fake := newFake(t)
	prov := providertest.New()
	defer prov.Close()
	prov.Enqueue(providertest.Reply{Content: "## Status\n- **pump**: on\n- `fan`: off"})
	e := start(t, fake, channeltest.Options{Provider: prov}, nil, fastOptions())
	e.deliver(t, fake.NewEvent(linetest.Event{UserID: alice, Text: "status"}))
	sent := fake.WaitSent(1, 10*time.Second)
	if len(sent) != 1 || sent[0].Text != "Status\n• pump: on\n• fan: off" {
		t.Fatalf("sent %+v", sent)
	}
}

func TestRateLimitIsRetried(t *testing.T) {
	fake := newFake(t)
	fake.FailNext("reply", linetest.Failure{Status: 429, Message: "The API rate limit has been exceeded. Try again later.", RetryAfter: 1})
	e := start(t, fake, channeltest.Options{}, nil, fastOptions())
	at := time.Now()
	e.deliver(t, fake.NewEvent(linetest.Event{UserID: alice, Text: "hi"}))
	sent := fake.WaitSent(1, 10*time.Second)
	if len(sent) != 1 || sent[0].At.Sub(at) < time.Second || fake.Requests("reply") != 2 {
		t.Fatalf("sent %+v after %d reply calls; want one answer after the second's wait", sent, fake.Requests("reply"))
	}
}

func TestMonthlyQuotaIsReportedNotRetried(t *testing.T) {
	fake := newFake(t)
	fake.SetReplyTTL(time.Millisecond)
	fake.FailNext("push", linetest.Failure{Status: 429, Message: "You have reached your monthly limit."})
	e := start(t, fake, channeltest.Options{}, nil, fastOptions())
	e.deliver(t, fake.NewEvent(linetest.Event{UserID: alice, Text: "hi"}))
	channeltest.Eventually(t, 5*time.Second, "the failure to be recorded", func() bool {
		return strings.Contains(e.h.Manager.Status()["line"].LastError, "monthly message quota")
	})
	if fake.Requests("push") != 1 {
		t.Errorf("%d push calls; a used-up quota must not be retried", fake.Requests("push"))
	}
}

func TestTokenRejectedAtStartNamesTheKey(t *testing.T) {
	fake := linetest.New("another-token", secret)
	defer fake.Close()
	h := channeltest.New(t, channeltest.Options{})
	c, err := line.New(h.Deps(section(fake.Base(), gatewaytest.FreePort(t), nil)), fastOptions())
	if err != nil {
		t.Fatal(err)
	}
	err = h.Start(c)
	if !errors.Is(err, line.ErrTokenRejected) || !strings.Contains(err.Error(), "channels.line.channel_access_token") || strings.Contains(err.Error(), accessToken) {
		t.Fatalf("Start = %v", err)
	}
}

func TestBusyWebhookPortNamesTheKey(t *testing.T) {
	fake := newFake(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	h := channeltest.New(t, channeltest.Options{})
	c, err := line.New(h.Deps(section(fake.Base(), ln.Addr().(*net.TCPAddr).Port, nil)), fastOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(c); err == nil || !strings.Contains(err.Error(), "channels.line.webhook_port") {
		t.Fatalf("Start on a busy port = %v; want an error naming channels.line.webhook_port", err)
	}
}

func TestUnreachableAtStartThenRecovers(t *testing.T) {
	port := gatewaytest.FreePort(t)
	h := channeltest.New(t, channeltest.Options{})
	c, err := line.New(h.Deps(section("http://127.0.0.1:"+strconv.Itoa(port), gatewaytest.FreePort(t), nil)), fastOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(c); err != nil {
		t.Fatal(err)
	}
	if ok, msg := c.Check(context.Background()); ok || !strings.Contains(msg, "unreachable") {
		t.Fatalf("check = %v %q; want failing, saying LINE is unreachable", ok, msg)
	}
	fake := linetest.NewAt(accessToken, secret, "127.0.0.1:"+strconv.Itoa(port))
	defer fake.Close()
	channeltest.Eventually(t, 10*time.Second, "the channel to recover", func() bool { ok, _ := c.Check(context.Background()); return ok })
	code, err := fake.Deliver("http://"+c.Addr()+"/webhook/line", fake.NewEvent(linetest.Event{UserID: alice, Text: "up?"}))
	if err != nil || code != 200 {
		t.Fatal(code, err)
	}
	if sent := fake.WaitSent(1, 10*time.Second); len(sent) != 1 {
		t.Fatalf("sent %d after recovering", len(sent))
	}
}

// routes is a gateway listener stand-in: the routes a channel registers.
type routes struct{ mux *http.ServeMux }

func (r *routes) HandleWebhook(method, path string, h http.HandlerFunc) error {
	r.mux.HandleFunc(method+" "+path, h)
	return nil
}

func TestServedOnTheGatewayListenerWhenThePortsMatch(t *testing.T) {
	fake := newFake(t)
	h := channeltest.New(t, channeltest.Options{})
	rt := &routes{mux: http.NewServeMux()}
	gw := httptest.NewServer(rt.mux)
	defer gw.Close()
	port := gw.Listener.Addr().(*net.TCPAddr).Port
	d := h.Deps(section(fake.Base(), port, nil))
	d.Routes, d.GatewayPort = rt, port
	c, err := line.New(d, fastOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(c); err != nil {
		t.Fatal(err)
	}
	if !c.OnGateway() || c.Addr() != "" {
		t.Fatalf("on gateway = %v, own listener %q; want the gateway's listener only", c.OnGateway(), c.Addr())
	}
	code, err := fake.Deliver(gw.URL+"/webhook/line", fake.NewEvent(linetest.Event{UserID: alice, Text: "via the gateway"}))
	if err != nil || code != 200 {
		t.Fatal(code, err)
	}
	if sent := fake.WaitSent(1, 10*time.Second); len(sent) != 1 || sent[0].Text != "echo: via the gateway" {
		t.Fatalf("sent %+v", sent)
	}
}

func TestAudioIsTranscribed(t *testing.T) {
	fake := newFake(t)
	prov := providertest.New()
	defer prov.Close()
	prov.Transcript = "open the window"
	cfg := config.Default()
	cfg.Providers.OpenAI.APIKey, cfg.Providers.OpenAI.APIBase = "sk-test", prov.Base()
	tr, err := provider.NewTranscriber(context.Background(), cfg, nil)
	if err != nil || tr == nil {
		t.Fatal(err)
	}
	e := start(t, fake, channeltest.Options{Provider: prov, Transcribe: tr.Transcribe}, nil, fastOptions())
	d := fake.NewEvent(linetest.Event{UserID: alice, Type: "audio", MessageID: "9001"})
	fake.AddContent("9001", []byte("\x00\x00\x00\x18ftypM4A fake"))
	e.deliver(t, d)
	fake.WaitSent(1, 10*time.Second)
	got := providertest.LastUser(prov.Requests()[0].Body)
	if !strings.Contains(got, "[voice message, transcribed]: open the window") {
		t.Errorf("the model saw %q", got)
	}
	if tx := prov.Transcribed(); len(tx) != 1 || tx[0].FileName != "audio.m4a" || tx[0].Model != "whisper-1" {
		t.Errorf("transcriptions %+v", tx)
	}
}

func TestManyDeliveriesLeakNothing(t *testing.T) {
	fake := newFake(t)
	e := start(t, fake, channeltest.Options{}, nil, fastOptions())
	settle := func() int {
		time.Sleep(200 * time.Millisecond)
		runtime.GC()
		return runtime.NumGoroutine()
	}
	e.deliver(t, fake.NewEvent(linetest.Event{UserID: alice, Text: "warm up"}))
	fake.WaitSent(1, 10*time.Second)
	g0 := settle()
	for i := 0; i < 50; i++ {
		// Each on a connection of its own, closed after: LINE's
		// deliveries come and go.
		e.deliver(t, fake.NewEvent(linetest.Event{UserID: alice, Text: "n" + strconv.Itoa(i)}))
	}
	fake.WaitSent(51, 20*time.Second)
	// A leak per delivery would show as 50 more. The reply client may keep
	// up to MaxIdleConns (4) idle connections to the platform, two
	// goroutines each, where the warm-up needed one: the deliveries' replies
	// overlap. Closed connections' goroutines take a moment to end on a
	// busy machine, so the count is read until it settles.
	limit := g0 + 2*4
	g1 := settle()
	for deadline := time.Now().Add(5 * time.Second); g1 > limit && time.Now().Before(deadline); {
		g1 = settle()
	}
	if g1 > limit {
		t.Errorf("goroutines grew from %d to %d across 50 deliveries", g0, g1)
	}
}

// restartOptions put the database and workspace in dir, so a second
// Env on the same dir is the gateway restarted.
func restartOptions(dir string, prov ...*providertest.Server) channeltest.Options {
	o := channeltest.Options{StorePath: filepath.Join(dir, "perch.db"), Workspace: filepath.Join(dir, "workspace")}
	if len(prov) > 0 {
		o.Provider = prov[0]
	}
	return o
}

// A reply sent again after its first messages were delivered sends only
// the rest, by push (the reply token and the quote went with the first),
// and a failure says how many messages were delivered before it.
func TestAPartlySentReplyResumesWhereItStopped(t *testing.T) {
	fake := newFake(t)
	e := start(t, fake, channeltest.Options{}, nil, fastOptions())
	var sb strings.Builder
	for i := 0; sb.Len() < 33000; i++ {
		sb.WriteString("Line " + strconv.Itoa(i) + " of the garden log: watered, soil moist.\n")
	}
	out := bus.Outbound{Channel: "line", ChatID: alice, Text: sb.String(), Delivered: 5}
	fake.FailNext("push", linetest.Failure{Status: 400, Message: "The request body has 1 error(s)"})
	if err := e.c.Send(context.Background(), out); channel.Delivered(err) != 5 {
		t.Fatalf("Send = %v (delivered %d); want a failure after the 5 delivered", err, channel.Delivered(err))
	}
	if err := e.c.Send(context.Background(), out); err != nil {
		t.Fatal(err)
	}
	sent := fake.Sent()
	if len(sent) < 1 || len(sent) > 5 {
		t.Fatalf("sent %d messages; want only those after the fifth", len(sent))
	}
	for _, s := range sent {
		if s.API != "push" || s.QuoteToken != "" || strings.Contains(s.Text, "Line 0 ") {
			t.Errorf("resent %+v", s)
		}
	}
	out.Delivered = 5 + len(sent)
	if err := e.c.Send(context.Background(), out); err != nil || len(fake.Sent()) != len(sent) {
		t.Errorf("a reply delivered whole was sent again: %v, %d messages", err, len(fake.Sent()))
	}
}

// gate holds the model's answers until it is opened, so a test can deliver
// more while turns wait.
func gate(t *testing.T, prov *providertest.Server) (open func()) {
	release := make(chan struct{})
	prov.Default = func(r providertest.ChatRequest) providertest.Reply {
		select {
		case <-release:
		case <-time.After(10 * time.Second):
		}
		return providertest.Reply{Content: "echo: " + providertest.LastUser(r)}
	}
	var once sync.Once
	open = func() { once.Do(func() { close(release) }) }
	t.Cleanup(open)
	return open
}

func TestGroupChatterDoesNotCrowdOutReplyTokens(t *testing.T) {
	fake := newFake(t)
	opts := fastOptions()
	opts.ReplyTokens = 8
	e := start(t, fake, channeltest.Options{}, nil, opts)
	open := gate(t, e.h.Provider)
	d := fake.NewEvent(linetest.Event{UserID: alice, Text: "hello"})
	e.deliver(t, d)
	// While the answer is being written, a busy group talks among itself:
	// none of it is for the bot.
	var chatter []linetest.Delivery
	for i := range 20 {
		chatter = append(chatter, fake.NewEvent(linetest.Event{UserID: bob, GroupID: group, Text: "among people " + strconv.Itoa(i)}))
	}
	e.deliver(t, chatter...)
	open()
	sent := fake.WaitSent(1, 10*time.Second)
	if len(sent) != 1 || sent[0].API != "reply" || sent[0].QuoteToken != d.QuoteToken {
		t.Fatalf("sent %+v; want the answer by reply token, quoting the message, whatever the group said meanwhile", sent)
	}
	if n := e.c.PushesThisMonth(); n != 0 {
		t.Errorf("%d pushes; the reply token was fresh", n)
	}
}

func TestAFullReplyTokenTableDropsItsOldest(t *testing.T) {
	fake := newFake(t)
	opts := fastOptions()
	opts.ReplyTokens = 2
	e := start(t, fake, channeltest.Options{}, nil, opts)
	open := gate(t, e.h.Provider)
	carol := "U44444444444444444444444444444444"
	var ds []linetest.Delivery
	for _, u := range []string{alice, bob, carol} {
		d := fake.NewEvent(linetest.Event{UserID: u, Text: "hi from " + u[:3]})
		e.deliver(t, d)
		ds = append(ds, d)
	}
	open()
	fake.WaitSent(3, 10*time.Second)
	byChat := map[string]linetest.Sent{}
	for _, s := range fake.Sent() {
		byChat[s.To] = s
	}
	// The newest messages are answered for free; the oldest one's token
	// made way.
	if s := byChat[carol]; s.API != "reply" || s.QuoteToken != ds[2].QuoteToken {
		t.Errorf("the newest message was answered %+v; want by its reply token, quoting it", s)
	}
	if s := byChat[bob]; s.API != "reply" {
		t.Errorf("the second message was answered %+v; want by its reply token", s)
	}
	if s := byChat[alice]; s.API != "push" {
		t.Errorf("the oldest message was answered %+v; its token was dropped for the newer ones", s)
	}
}

func TestAnsweredTokensAreNotHeldForAnHour(t *testing.T) {
	fake := newFake(t)
	opts := fastOptions()
	opts.ReplyTTL = 100 * time.Millisecond
	e := start(t, fake, channeltest.Options{}, nil, opts)
	e.deliver(t, fake.NewEvent(linetest.Event{UserID: alice, Text: "one"}))
	fake.WaitSent(1, 10*time.Second)
	time.Sleep(150 * time.Millisecond) // past the reply token's life
	e.deliver(t, fake.NewEvent(linetest.Event{UserID: alice, Text: "two"}))
	fake.WaitSent(2, 10*time.Second)
	if n := e.c.RepliesHeld(); n != 1 {
		t.Errorf("%d messages' tokens held; the answered one whose reply token expired should have gone", n)
	}
	// Chatter in a group holds none.
	e.deliver(t, fake.NewEvent(linetest.Event{UserID: bob, GroupID: group, Text: "not for the bot"}))
	if n := e.c.RepliesHeld(); n != 1 {
		t.Errorf("%d messages' tokens held after a group message the bot does not answer; want 1", n)
	}
}

func TestAReplyToTheBotInAGroupReachesItAfterARestart(t *testing.T) {
	fake := newFake(t)
	dir := t.TempDir()
	e := start(t, fake, restartOptions(dir), nil, fastOptions())
	e.deliver(t, fake.NewEvent(linetest.Event{UserID: alice, GroupID: group, Text: "@Perch hi", SelfMention: true, MentionIndex: 0, MentionLength: 6}))
	sent := fake.WaitSent(1, 10*time.Second)
	e.h.Stop()
	e2 := start(t, fake, restartOptions(dir, e.h.Provider), nil, fastOptions())
	// No mention: quoting the bot's answer is enough.
	e2.deliver(t, fake.NewEvent(linetest.Event{UserID: alice, GroupID: group, Text: "and more?", QuotedMessageID: sent[0].ID}))
	if got := fake.WaitSent(2, 5*time.Second); len(got) != 2 || got[1].Text != "echo: and more?" {
		t.Fatalf("sent %+v; a reply to the bot's message from before the restart should reach the bot", got)
	}
}

func TestAReplyWhoseAnswerWasLostIsNotSentAgain(t *testing.T) {
	fake := newFake(t)
	// LINE takes the reply, then its answer never comes back in time.
	fake.StallNext("reply", 5*time.Second)
	opts := fastOptions()
	opts.RequestTimeout = 300 * time.Millisecond
	e := start(t, fake, channeltest.Options{}, nil, opts)
	d := fake.NewEvent(linetest.Event{UserID: alice, Text: "hi"})
	e.deliver(t, d)
	fake.WaitSent(1, 10*time.Second)
	// The retry with the same token is refused: it was used.
	channeltest.Eventually(t, 10*time.Second, "the reply to be retried", func() bool { return fake.Requests("reply") >= 2 })
	time.Sleep(300 * time.Millisecond)
	if sent := fake.Sent(); len(sent) != 1 || sent[0].API != "reply" || sent[0].QuoteToken != d.QuoteToken {
		t.Errorf("sent %+v; want the one reply LINE took, not a push of it again", sent)
	}
	if fake.Pushes() != 0 || e.c.PushesThisMonth() != 0 {
		t.Errorf("%d pushed, %d counted; want none", fake.Pushes(), e.c.PushesThisMonth())
	}
}

func TestAReplyTokenRefusedAfterAnAnsweredFailureIsPushed(t *testing.T) {
	fake := newFake(t)
	// LINE answered the first try with an error, so the reply did not go;
	// the token is refused on the retry (it expired meanwhile): push it.
	fake.FailNext("reply", linetest.Failure{Status: 500, Message: "Internal error"}, linetest.Failure{Status: 400, Message: "Invalid reply token"})
	e := start(t, fake, channeltest.Options{}, nil, fastOptions())
	e.deliver(t, fake.NewEvent(linetest.Event{UserID: alice, Text: "hi"}))
	if sent := fake.WaitSent(1, 10*time.Second); len(sent) != 1 || sent[0].API != "push" {
		t.Fatalf("sent %+v; want the answer pushed", sent)
	}
	_ = e
}

// TestAStalledPushDoesNotHoldTheChannel: a push LINE takes and never
// answers is given up after MessageTimeout and retried with its retry key
// (LINE answers 409: delivered), so the channel's other messages wait
// seconds, not the client's minute. They waited the whole RequestTimeout.
func TestAStalledPushDoesNotHoldTheChannel(t *testing.T) {
	fake := newFake(t)
	fake.StallNext("push", 10*time.Second)
	opts := fastOptions()
	opts.MessageTimeout = 300 * time.Millisecond
	e := start(t, fake, channeltest.Options{}, nil, opts)
	began := time.Now()
	if err := e.c.Send(context.Background(), bus.Outbound{Channel: "line", ChatID: alice, Text: "water the plants"}); err != nil {
		t.Fatalf("send: %v", err)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Errorf("the send took %s", d.Round(time.Millisecond))
	}
	if sent := fake.Sent(); len(sent) != 1 || sent[0].Text != "water the plants" {
		t.Errorf("sent %+v; want it once", sent)
	}
}

// TestAnErrorEchoingTheTokenShowsNoToken: an error answer that quotes the
// request (a proxy's page, a wrong api_base) puts no access token in the
// channel's check, which /ready's details and the page show, or the log.
func TestAnErrorEchoingTheTokenShowsNoToken(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte("ECHO " + r.Header.Get("Authorization")))
	}))
	defer srv.Close()
	h := channeltest.New(t, channeltest.Options{})
	c, err := line.New(h.Deps(section(srv.URL, gatewaytest.FreePort(t), nil)), fastOptions())
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Start(c); err != nil {
		t.Fatal(err)
	}
	ok, msg := c.Check(context.Background())
	if ok || strings.Contains(msg, accessToken) || !strings.Contains(msg, "Bearer [redacted]") {
		t.Fatalf("check = %v %q; want failing, with the token redacted", ok, msg)
	}
}
