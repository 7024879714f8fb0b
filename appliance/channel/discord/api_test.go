package discord

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/channel"
)

func testREST(base, token string) *restClient {
	return newREST(&http.Client{Timeout: 10 * time.Second}, base, token, "test")
}

func text(s string) messageSend { return messageSend{Content: s, AllowedMentions: noPings()} }

// TestRESTRateLimitWaitedThenSent: a 429 with retry_after is sat out and
// the message sent once after it; the answer's exhausted bucket makes the
// next call on the route wait too.
func TestRESTRateLimitWaitedThenSent(t *testing.T) {
	f := newFake(t)
	c := testREST(f.APIBase(), f.Token)
	f.RateLimit("user", 400*time.Millisecond)
	start := time.Now()
	if err := c.createMessage(context.Background(), "500", text("hello"), nil); err != nil {
		t.Fatalf("createMessage: %v", err)
	}
	sent := f.Sent()
	if len(sent) != 1 || sent[0].Content != "hello" {
		t.Fatalf("sent %v; want hello once", sent)
	}
	if d := sent[0].At.Sub(start); d < 400*time.Millisecond {
		t.Errorf("sent %v after the 429; retry_after asked for 400ms", d)
	}
}

// TestRESTGlobalRateLimitHoldsEveryRoute: a global 429 on one route holds
// calls on the others until it ends; a wait longer than the client sits
// out comes back at once as a RetryAfter, without a request.
func TestRESTGlobalRateLimitHoldsEveryRoute(t *testing.T) {
	f := newFake(t)
	c := testREST(f.APIBase(), f.Token)
	c.retries = 0
	f.RateLimit("global", 500*time.Millisecond)
	err := c.createMessage(context.Background(), "500", text("hello"), nil)
	var rl *rateLimitError
	if !errors.As(err, &rl) || !rl.Global || rl.RetryAfter != 500*time.Millisecond {
		t.Fatalf("createMessage = %v; want a global rate limit of 500ms", err)
	}
	start := time.Now()
	if err := c.triggerTyping(context.Background(), "600"); err != nil {
		t.Fatal(err)
	}
	if d := time.Since(start); d < 300*time.Millisecond {
		t.Errorf("typing in another channel went after %v, inside the global limit", d)
	}
	if f.Typing("600") != 1 {
		t.Error("the typing call never arrived")
	}

	f.RateLimit("user", 3*time.Second)
	c.waitMax = 200 * time.Millisecond
	start = time.Now()
	err = classify(c.createMessage(context.Background(), "500", text("again"), nil))
	var se *channel.SendError
	if !errors.As(err, &se) || se.Kind != channel.RateLimited || se.RetryAfter != 3*time.Second || time.Since(start) > time.Second {
		t.Fatalf("classified %v (%+v) after %v; want RateLimited for 3s at once", err, se, time.Since(start))
	}
	err = c.createMessage(context.Background(), "500", text("within the limit"), nil)
	if !errors.As(err, &rl) || rl.RetryAfter < 2*time.Second {
		t.Errorf("a call inside the known limit = %v; want a rate limit without a request", err)
	}
	if got := f.Sent(); len(got) != 0 {
		t.Errorf("sent %v while rate limited", got)
	}
}

// TestRESTContextEndsRateLimitWait: cancelling the context ends a
// rate-limit wait at once, and nothing is sent.
func TestRESTContextEndsRateLimitWait(t *testing.T) {
	f := newFake(t)
	c := testREST(f.APIBase(), f.Token)
	f.RateLimit("user", 4*time.Second) // within what the client sits out
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	err := c.createMessage(ctx, "500", text("hello"), nil)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("createMessage = %v; want context.Canceled", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("returned %v after the cancel", d)
	}
	if got := f.Sent(); len(got) != 0 {
		t.Errorf("sent %v after the cancel", got)
	}
}

// TestRESTErrorsNameTheCauseNotTheToken: Discord's JSON error comes back
// with its status, code and message (and the field error of an Invalid
// Form Body), classified as the sender needs it; no error shows the
// token.
func TestRESTErrorsNameTheCauseNotTheToken(t *testing.T) {
	f := newFake(t)
	f.RejectContent(func(c string) bool { return strings.Contains(c, "**") })
	c := testREST(f.APIBase(), f.Token)
	for _, tc := range []struct {
		name   string
		client *restClient
		call   func(c *restClient) error
		want   []string
		kind   channel.FailKind
	}{
		{"markup", c, func(c *restClient) error {
			return c.createMessage(context.Background(), "500", text("**bold**"), nil)
		}, []string{"POST /channels/500/messages", "HTTP 400", "Invalid Form Body", "code 50035", "content: CONTENT_TYPE_INVALID"}, channel.BadFormat},
		{"length", c, func(c *restClient) error {
			return c.createMessage(context.Background(), "500", text(strings.Repeat("x", 2001)), nil)
		}, []string{"code 50035", "content: BASE_TYPE_MAX_LENGTH"}, channel.TooLong},
		{"empty", c, func(c *restClient) error {
			return c.createMessage(context.Background(), "500", messageSend{}, nil)
		}, []string{"Cannot send an empty message", "code 50006"}, channel.Permanent},
		{"token", testREST(f.APIBase(), "wrong-token-0042"), func(c *restClient) error {
			_, err := c.gatewayBot(context.Background())
			return err
		}, []string{"GET /gateway/bot", "HTTP 401"}, channel.Permanent},
		{"unreachable", testREST("http://127.0.0.1:1/api/v10", f.Token), func(c *restClient) error {
			return c.triggerTyping(context.Background(), "500")
		}, []string{"POST /channels/500/typing", "connection refused"}, channel.Transient},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.call(tc.client)
			if err == nil {
				t.Fatal("no error")
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
			if k := channel.KindOf(classify(err)); k != tc.kind {
				t.Errorf("classified %v, want %v", k, tc.kind)
			}
			if tokenRejected(err) != (tc.name == "token") {
				t.Errorf("tokenRejected = %v", tokenRejected(err))
			}
			if tok := tc.client.token.Value(); strings.Contains(err.Error(), tok) {
				t.Errorf("the error shows the token: %v", err)
			}
		})
	}
}

// TestRESTUploadIsMultipart: a file goes as files[0] with its name and
// content type, the message (reference, allowed mentions, the attachment
// slot) as payload_json.
func TestRESTUploadIsMultipart(t *testing.T) {
	f := newFake(t)
	c := testREST(f.APIBase(), f.Token)
	data := []byte("\x89PNG\r\n\x1a\nnot really")
	no := false
	m := messageSend{AllowedMentions: noPings(), Reference: &messageReference{MessageID: "123", ChannelID: "500", FailIfNotExists: &no}}
	if err := c.createMessage(context.Background(), "500", m, &upload{Name: `chart "v2".png`, MIME: "image/png", Data: data}); err != nil {
		t.Fatal(err)
	}
	sent := f.Sent()
	if len(sent) != 1 {
		t.Fatalf("sent %v", sent)
	}
	s := sent[0]
	if len(s.Files) != 1 || s.Files[0] != `chart "v2".png` || string(s.FileData[0]) != string(data) || s.FileTypes[0] != "image/png" {
		t.Errorf("files %q types %q data %q", s.Files, s.FileTypes, s.FileData)
	}
	var p struct {
		Reference struct {
			MessageID       string `json:"message_id"`
			FailIfNotExists *bool  `json:"fail_if_not_exists"`
		} `json:"message_reference"`
		AllowedMentions struct {
			Parse       []string `json:"parse"`
			RepliedUser bool     `json:"replied_user"`
		} `json:"allowed_mentions"`
		Attachments []struct {
			ID       int    `json:"id"`
			Filename string `json:"filename"`
		} `json:"attachments"`
	}
	if err := json.Unmarshal(s.Raw, &p); err != nil {
		t.Fatalf("payload_json %q: %v", s.Raw, err)
	}
	if p.Reference.MessageID != "123" || p.Reference.FailIfNotExists == nil || *p.Reference.FailIfNotExists ||
		p.AllowedMentions.Parse == nil || len(p.AllowedMentions.Parse) != 0 || !p.AllowedMentions.RepliedUser ||
		len(p.Attachments) != 1 || p.Attachments[0].ID != 0 || p.Attachments[0].Filename != `chart "v2".png` {
		t.Errorf("payload_json %s", s.Raw)
	}
}

// TestRESTHeadersAndCaps: every call carries the Bot authorization and a
// DiscordBot User-Agent; an answer over the cap is refused unread; a
// proxy's error page is quoted briefly and retried.
func TestRESTHeadersAndCaps(t *testing.T) {
	var (
		mu       sync.Mutex
		auth, ua string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		auth, ua = r.Header.Get("Authorization"), r.Header.Get("User-Agent")
		mu.Unlock()
		if strings.HasSuffix(r.URL.Path, "/typing") {
			w.WriteHeader(http.StatusBadGateway)
			w.Write([]byte("<html><body>502 Bad Gateway</body></html>"))
			return
		}
		w.Write([]byte(`{"url":"wss://x","pad":"`))
		w.Write([]byte(strings.Repeat("x", maxAnswer)))
		w.Write([]byte(`"}`))
	}))
	t.Cleanup(srv.Close)
	c := testREST(srv.URL+"/api/v10/", "tok-123")
	_, err := c.gatewayBot(context.Background())
	if err == nil || !strings.Contains(err.Error(), "over 1048576 bytes") {
		t.Errorf("a huge answer = %v; want it refused", err)
	}
	mu.Lock()
	if auth != "Bot tok-123" || !strings.HasPrefix(ua, "DiscordBot (https://github.com/perchhq/perch, test)") {
		t.Errorf("Authorization %q User-Agent %q", auth, ua)
	}
	mu.Unlock()
	err = c.triggerTyping(context.Background(), "500")
	if err == nil || !strings.Contains(err.Error(), "HTTP 502") || !strings.Contains(err.Error(), "502 Bad Gateway</body>") {
		t.Errorf("a proxy's page = %v", err)
	}
	if k := channel.KindOf(classify(err)); k != channel.Transient {
		t.Errorf("a 502 classified %v, want transient", k)
	}
}

// TestRESTAgainstTheFakeGateway: GET /gateway/bot answers the fake's
// gateway URL.
func TestRESTAgainstTheFakeGateway(t *testing.T) {
	f := newFake(t)
	u, err := testREST(f.APIBase(), f.Token).gatewayBot(context.Background())
	if err != nil || u != f.GatewayURL() {
		t.Errorf("gatewayBot = %q, %v; want %q", u, err, f.GatewayURL())
	}
}

// TestAnErrorEchoingTheTokenShowsNoToken: an error answer that quotes the
// request (a proxy's page, a wrong api_base) puts no token in the error,
// which reaches the log, /ready's details and the page.
func TestAnErrorEchoingTheTokenShowsNoToken(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusInternalServerError)
		w.Write([]byte("ECHO " + r.Header.Get("Authorization")))
	}))
	defer srv.Close()
	c := testREST(srv.URL, "secret-discord-bot-token")
	c.retries = 0
	err := c.createMessage(context.Background(), "500", text("hello"), nil)
	if err == nil || strings.Contains(err.Error(), "secret-discord-bot-token") || !strings.Contains(err.Error(), "Bot [redacted]") {
		t.Errorf("%v; want the echo with the token redacted", err)
	}
}
