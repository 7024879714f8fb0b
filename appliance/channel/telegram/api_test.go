package telegram

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/channel"
	"github.com/perchhq/perch/appliance/channel/channeltest"
	"github.com/perchhq/perch/appliance/channel/telegram/telegramtest"
	"github.com/perchhq/perch/appliance/config"
)

const apiToken = "123456:API-test-token-abcdefghijklmnop"

// newChannel builds (does not start) a channel with token against base.
func newChannel(t *testing.T, base, token string) (*Channel, *channeltest.Env, error) {
	t.Helper()
	cfg := config.Default()
	cfg.Channels.Telegram.Enabled = true
	cfg.Channels.Telegram.Token = config.Secret(token)
	cfg.Channels.Telegram.APIBase = base
	sec, _ := cfg.Channels.Section("telegram")
	h := channeltest.New(t, channeltest.Options{})
	c, err := New(h.Deps(sec), Options{PollTimeout: time.Second, Backoff: channel.Backoff{Min: 5 * time.Millisecond, Max: 20 * time.Millisecond}})
	return c, h, err
}

func mustChannel(t *testing.T, base string) (*Channel, *channeltest.Env) {
	t.Helper()
	c, h, err := newChannel(t, base, apiToken)
	if err != nil {
		t.Fatal(err)
	}
	return c, h
}

func TestUnreachableAPIErrorsNeverShowTheToken(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c, h := mustChannel(t, "http://"+addr)
	_, err = c.apiGetMe(context.Background())
	if err == nil {
		t.Fatal("getMe against a closed port succeeded")
	}
	if strings.Contains(err.Error(), apiToken) || !strings.Contains(err.Error(), "getMe") || !strings.Contains(err.Error(), "refused") {
		t.Errorf("error %q; want the method and the cause, without the token", err)
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		t.Errorf("the error chain holds a *url.Error (%q), whose text carries the URL with the token", ue)
	}
	// Start logs the failure; neither the log nor the check shows the token.
	if err := h.Start(c); err != nil {
		t.Fatal(err)
	}
	_, msg := c.Check(context.Background())
	time.Sleep(100 * time.Millisecond) // a few polls fail and are logged
	h.Stop()
	if strings.Contains(h.Logs.String(), apiToken) || strings.Contains(msg, apiToken) {
		t.Errorf("the token reached the log or the check:\n%s\n%s", msg, h.Logs)
	}
	if !strings.Contains(h.Logs.String(), "getMe") {
		t.Errorf("the failed getMe is not logged:\n%s", h.Logs)
	}
}

func TestTimedOutCallKeepsTheDeadlineInItsChain(t *testing.T) {
	hang := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-hang:
		case <-r.Context().Done():
		}
	}))
	defer srv.Close()
	defer close(hang)
	c, _ := mustChannel(t, srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := c.apiGetMe(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("error %v; want it to wrap context.DeadlineExceeded", err)
	}
	if err != nil && strings.Contains(err.Error(), apiToken) {
		t.Errorf("error %q shows the token", err)
	}
}

func TestAnswerThatIsNotTheBotAPIsIsReportedWithoutTheToken(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// A proxy's error page that echoes the path, token and all.
		w.WriteHeader(http.StatusBadGateway)
		w.Write([]byte("<html>502 Bad Gateway for " + r.URL.Path + "</html>"))
	}))
	defer srv.Close()
	c, _ := mustChannel(t, srv.URL)
	_, err := c.apiGetMe(context.Background())
	if err == nil || !strings.Contains(err.Error(), "HTTP 502") || !strings.Contains(err.Error(), "not the Bot API's") {
		t.Fatalf("error %v; want the status and that the body is not the Bot API's", err)
	}
	if strings.Contains(err.Error(), apiToken) {
		t.Errorf("error %q shows the token", err)
	}
}

func TestOversizedAnswerIsNotRead(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(`{"ok":true,"result":{"id":1,"first_name":"`))
		w.Write([]byte(strings.Repeat("x", maxAnswer)))
		w.Write([]byte(`"}}`))
	}))
	defer srv.Close()
	c, _ := mustChannel(t, srv.URL)
	_, err := c.apiGetMe(context.Background())
	if err == nil || !strings.Contains(err.Error(), "over") {
		t.Fatalf("error %v; want the answer refused as too large", err)
	}
}

func TestTokenThatCannotBeOneIsRefusedNamingTheKey(t *testing.T) {
	for _, tok := range []string{"", "  ", "123:abc/def", "123:abc def", "123:abc\n"} {
		_, _, err := newChannel(t, "http://127.0.0.1:1", tok)
		if err == nil || !strings.Contains(err.Error(), "channels.telegram.token") {
			t.Errorf("token %q: New = %v; want an error naming channels.telegram.token", tok, err)
			continue
		}
		if strings.TrimSpace(tok) != "" && strings.Contains(err.Error(), tok) {
			t.Errorf("token %q: the error %q shows it", tok, err)
		}
	}
}

func TestSendErrorsAreClassified(t *testing.T) {
	fake := telegramtest.New(apiToken)
	defer fake.Close()
	c, _ := mustChannel(t, fake.Base())
	cases := []struct {
		f     telegramtest.Failure
		kind  channel.FailKind
		after time.Duration
	}{
		{telegramtest.Failure{Code: 429, Description: "Too Many Requests: retry after 7", RetryAfter: 7}, channel.RateLimited, 7 * time.Second},
		{telegramtest.Failure{Code: 400, Description: "Bad Request: can't parse entities: unsupported start tag \"x\""}, channel.BadFormat, 0},
		{telegramtest.Failure{Code: 400, Description: "Bad Request: message is too long"}, channel.TooLong, 0},
		{telegramtest.Failure{Code: 400, Description: "Bad Request: chat not found"}, channel.Permanent, 0},
		{telegramtest.Failure{Code: 403, Description: "Forbidden: bot was blocked by the user"}, channel.Permanent, 0},
		{telegramtest.Failure{Code: 401, Description: "Unauthorized"}, channel.Permanent, 0},
		{telegramtest.Failure{Code: 502, Description: "Bad Gateway"}, channel.Transient, 0},
	}
	for _, tc := range cases {
		fake.FailNext("sendMessage", tc.f)
		err := c.attempt(context.Background(), func(ctx context.Context) error {
			return c.callJSON(ctx, "sendMessage", &sendMessageParams{ChatID: 42, Text: "hi"}, nil)
		})
		if err == nil || channel.KindOf(err) != tc.kind {
			t.Errorf("%d %q: %v classified %v, want %v", tc.f.Code, tc.f.Description, err, channel.KindOf(err), tc.kind)
			continue
		}
		var se *channel.SendError
		if errors.As(err, &se) && se.RetryAfter != tc.after {
			t.Errorf("%d: retry after %s, want %s", tc.f.Code, se.RetryAfter, tc.after)
		}
		if !strings.Contains(err.Error(), tc.f.Description) {
			t.Errorf("error %q does not carry Telegram's description %q", err, tc.f.Description)
		}
	}
}

func TestAnswerFollowsAGroupMigratedToASupergroup(t *testing.T) {
	fake := telegramtest.New(apiToken)
	defer fake.Close()
	c, _ := mustChannel(t, fake.Base())
	fake.FailNext("sendMessage", telegramtest.Failure{Code: 400, Description: "Bad Request: group chat was upgraded to a supergroup chat", MigrateTo: -1001234})
	if err := c.Send(context.Background(), bus.Outbound{ChatID: "-55", Text: "hello group", ReplyTo: "9"}); err != nil {
		t.Fatal(err)
	}
	sent := fake.Sent()
	if len(sent) != 1 || sent[0].ChatID != "-1001234" || sent[0].Text != "hello group" || sent[0].ReplyTo != 9 {
		t.Fatalf("sent %+v; want the answer once in supergroup -1001234, quoting message 9", sent)
	}
}

func TestDocumentsAndLinkedPhotosAreSent(t *testing.T) {
	fake := telegramtest.New(apiToken)
	defer fake.Close()
	c, _ := mustChannel(t, fake.Base())
	path := filepath.Join(t.TempDir(), "report.csv")
	data := strings.Repeat("time,temp\n12:00,21.5\n", 300)
	if err := os.WriteFile(path, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	// The first upload is refused with a 429: the retry must send the
	// whole file again.
	fake.FailNext("sendDocument", telegramtest.Failure{Code: 429, Description: "Too Many Requests: retry after 1", RetryAfter: 1})
	out := bus.Outbound{ChatID: "42", ThreadID: "5", Media: []bus.Media{
		{Kind: "file", Path: path, MIME: "text/csv"},
		{Kind: "image", URL: "https://example.com/plot.png", Name: "plot"},
	}}
	if err := c.Send(context.Background(), out); err != nil {
		t.Fatal(err)
	}
	sent := fake.Sent()
	if len(sent) != 2 {
		t.Fatalf("sent %+v; want a document and a photo", sent)
	}
	if d := sent[0]; d.Method != "sendDocument" || d.FileName != "report.csv" || d.FileSize != len(data) || d.ChatID != "42" || d.ThreadID != "5" {
		t.Errorf("document sent as %+v; want report.csv whole (%d bytes) in topic 5 of chat 42", d, len(data))
	}
	if p := sent[1]; p.Method != "sendPhoto" || p.FileName != "https://example.com/plot.png" || p.Text != "plot" || p.ThreadID != "5" {
		t.Errorf("photo sent as %+v; want the URL for Telegram to fetch, captioned plot", p)
	}
}

func TestTypingActionIsSentToTheTopic(t *testing.T) {
	fake := telegramtest.New(apiToken)
	defer fake.Close()
	c, _ := mustChannel(t, fake.Base())
	if err := c.typing(context.Background(), bus.Inbound{ChatID: "42", ThreadID: "3"}); err != nil {
		t.Fatal(err)
	}
	if fake.Actions() != 1 {
		t.Errorf("%d chat actions, want 1", fake.Actions())
	}
}

// A reply that failed after some of its parts reached the chat says how
// many did, and sending it again with that count sends only the rest: the
// chat never reads a part twice, and only the first part quotes.
func TestAPartlySentReplyResumesWhereItStopped(t *testing.T) {
	fake := telegramtest.New(apiToken)
	defer fake.Close()
	c, _ := mustChannel(t, fake.Base())
	var sb strings.Builder
	for i := 0; sb.Len() < 9000; i++ {
		sb.WriteString("Paragraph " + strconv.Itoa(i) + " of the long answer.\n\n")
	}
	path := filepath.Join(t.TempDir(), "plot.csv")
	os.WriteFile(path, []byte("a,b\n1,2\n"), 0o600)
	out := bus.Outbound{ChatID: "42", Text: sb.String(), ReplyTo: "9", Media: []bus.Media{{Kind: "file", Path: path}}}
	fake.FailNext("sendMessage", telegramtest.Failure{Pass: true}, telegramtest.Failure{Code: 403, Description: "Forbidden: bot was blocked by the user"})
	err := c.Send(context.Background(), out)
	if n := channel.Delivered(err); err == nil || n != 1 {
		t.Fatalf("Send = %v (delivered %d); want a failure after the first part", err, n)
	}
	out.Delivered = 1
	fake.FailNext("sendDocument", telegramtest.Failure{Code: 403, Description: "Forbidden: bot was blocked by the user"})
	err = c.Send(context.Background(), out)
	sent := fake.Sent()
	parts := len(sent) // the text's parts, all delivered now
	if n := channel.Delivered(err); err == nil || n != parts {
		t.Fatalf("Send = %v (delivered %d); want a failure at the file, after %d parts", err, n, parts)
	}
	out.Delivered = parts
	if err := c.Send(context.Background(), out); err != nil {
		t.Fatal(err)
	}
	sent = fake.Sent()
	var text strings.Builder
	for i, s := range sent[:parts] {
		if (s.ReplyTo != 0) != (i == 0) {
			t.Errorf("part %d quotes %d", i, s.ReplyTo)
		}
		text.WriteString(s.Text + "\n")
	}
	if got, want := strings.Join(strings.Fields(text.String()), " "), strings.Join(strings.Fields(out.Text), " "); got != want || parts < 3 {
		t.Errorf("the %d parts do not add up to the answer once", parts)
	}
	if len(sent) != parts+1 || sent[parts].Method != "sendDocument" {
		t.Errorf("sent %d messages; want the %d parts and the file once", len(sent), parts)
	}
}

// shownLen counts what Telegram counts against its limit: the text the
// HTML shows, in UTF-16 units; it agrees with the fake's own parser.
func TestShownLen(t *testing.T) {
	for _, c := range []struct {
		html string
		want int
	}{
		{"plain", 5},
		{"<b>bold</b> &amp;&amp; <i>it</i>", 10},
		{"a &lt;b&gt; c", 7},
		{"&quot;q&quot;", 3},
		{"&#39;&#x1F600;", 3}, // ' and an emoji of two units
		{"AT&T; & co", 10},    // not entities: counted as written
		{"🌱", 2},
		{`<a href="https://x.test/?a=1&amp;b=2">link</a>`, 4},
		{"<pre><code class=\"language-sh\">x &gt;&gt; y</code></pre>", 6},
	} {
		if got := shownLen(c.html); got != c.want {
			t.Errorf("shownLen(%q) = %d, want %d", c.html, got, c.want)
		}
	}
}
