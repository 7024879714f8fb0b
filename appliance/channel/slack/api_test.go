package slack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/agent"
	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/channel"
	"github.com/perchhq/perch/appliance/config"
)

// client is the Web API client pointed at f with the given tokens.
func client(t *testing.T, base, bot, app string) *webAPI {
	t.Helper()
	u, err := apiBase(base)
	if err != nil {
		t.Fatal(err)
	}
	return &webAPI{http: &http.Client{Timeout: 5 * time.Second}, base: u, bot: config.Secret(bot), app: config.Secret(app)}
}

func sendKind(err error) (channel.FailKind, time.Duration) {
	var se *channel.SendError
	if errors.As(err, &se) {
		return se.Kind, se.RetryAfter
	}
	return -1, 0
}

// TestWebAPIAnswersClassified: Slack's {ok:false} codes, a 429 with
// Retry-After and a 5xx each become what the sender and the start-up
// check act on, and no error text carries a token.
func TestWebAPIAnswersClassified(t *testing.T) {
	f := newFake(t)
	ctx := context.Background()
	noToken := func(err error, toks ...string) {
		t.Helper()
		for _, tok := range toks {
			if err != nil && strings.Contains(err.Error(), tok) {
				t.Errorf("the error shows a token: %v", err)
			}
		}
	}

	good := client(t, f.APIBase(), f.BotToken, f.AppToken)
	if bot, err := good.authTest(ctx); err != nil || bot.UserID != f.BotUserID || bot.Name != f.BotName || bot.TeamID != f.TeamID {
		t.Errorf("auth.test = %+v, %v", bot, err)
	}
	if u, err := good.userInfo(ctx, "U1"); err != nil || u.display() != "Ann" || u.Name != "ann" {
		t.Errorf("users.info = %+v, %v", u, err)
	}

	wrong := client(t, f.APIBase(), "xoxb-wrong-secret", f.BotToken) // the bot token as the app token
	_, err := wrong.authTest(ctx)
	if code, ok := fatalCode(err); !ok || code != "invalid_auth" {
		t.Errorf("auth.test with a wrong token: %v (fatal %q %v)", err, code, ok)
	}
	noToken(err, "xoxb-wrong-secret")
	_, err = wrong.connectionsOpen(ctx)
	if _, ok := fatalCode(err); !ok {
		t.Errorf("apps.connections.open with the bot token: %v, want a fatal refusal", err)
	}
	noToken(err, f.BotToken)

	f.RateLimit(2)
	err = classify(good.postMessage(ctx, "C1", "", "hi", true))
	if kind, after := sendKind(err); kind != channel.RateLimited || after != 2*time.Second {
		t.Errorf("429: %v (kind %v, retry after %v); want rate limited for 2s", err, kind, after)
	}
	err = classify(good.postMessage(ctx, "", "", "hi", true))
	if kind, _ := sendKind(err); kind != channel.Permanent || !strings.Contains(err.Error(), "channel_not_found") {
		t.Errorf("channel_not_found: %v (kind %v)", err, kind)
	}
	f.RejectMrkdwn(true)
	if kind, _ := sendKind(classify(good.postMessage(ctx, "C1", "", "*hi*", true))); kind != channel.BadFormat {
		t.Errorf("invalid_blocks: kind %v, want bad format", kind)
	}
	if err := good.postMessage(ctx, "C1", "T1", "*hi*", false); err != nil {
		t.Errorf("plain text refused: %v", err)
	}
	f.Down(true)
	err = classify(good.postMessage(ctx, "C1", "", "hi", true))
	if kind, _ := sendKind(err); kind != channel.Transient {
		t.Errorf("503: %v (kind %v), want transient", err, kind)
	}
	f.Down(false)
	if p := f.Posted(); len(p) != 1 || p[0].Mrkdwn || p[0].ThreadTS != "T1" {
		t.Errorf("posted %v; want the one plain-text message in thread T1", p)
	}

	// Nothing listens here: a transport error names the method, not the token.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	_, err = client(t, "http://"+addr+"/api/", "xoxb-offline-secret", "xapp-offline-secret").authTest(ctx)
	if err == nil || !strings.Contains(err.Error(), "auth.test") {
		t.Errorf("unreachable: %v", err)
	}
	noToken(err, "xoxb-offline-secret", "xapp-offline-secret")
}

// TestUploadTokenStaysWithSlack: the upload URL Slack names gets the bot
// token only when it is Slack's own host or the API's.
func TestUploadTokenStaysWithSlack(t *testing.T) {
	f := newFake(t)
	auth := make(chan string, 1)
	elsewhere := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		auth <- r.Header.Get("Authorization")
	}))
	t.Cleanup(elsewhere.Close)
	a := client(t, f.APIBase(), f.BotToken, f.AppToken)
	if err := a.putUpload(context.Background(), elsewhere.URL+"/upload/F1", "a.png", []byte("data")); err != nil {
		t.Fatal(err)
	}
	if got := <-auth; got != "" {
		t.Errorf("a foreign upload host got Authorization %q", got)
	}
	for raw, want := range map[string]bool{
		"https://files.slack.com/upload/v1/x": true,
		"http://files.slack.com/upload/v1/x":  false,
		f.HTTP.URL + "/upload/F1":             true,
		"https://slack.com.evil.example/x":    false,
	} {
		u, _ := url.Parse(raw)
		if tokenMayGo(a.base, u) != want {
			t.Errorf("tokenMayGo(%s) = %v, want %v", raw, !want, want)
		}
	}
}

// TestSlashCommands: Slack's client takes a message starting with "/" for
// its own command, so the chat commands are reached through the app's
// slash command: "/perch status" answers as /status, "/perch" alone as
// /help, "/perch <question>" asks the model, and a chat command registered
// as its own slash command works too. Each envelope is acknowledged once
// and answered once, in the channel it was typed in; allow_from applies.
// They were acknowledged and never answered.
func TestSlashCommands(t *testing.T) {
	f := newFake(t)
	f.SetAckTimeout(300 * time.Millisecond)
	h := start(t, f, setup{section: func(s *config.ChannelSection) { s.AllowFrom = []string{"ann"} }})
	h.connected(t)
	f.SlashCommand("/perch", "status", "D1", "U1")
	if p := waitPosted(t, f, 1)[0]; p.Channel != "D1" || !contains(p.Text, "Model") && !contains(p.Text, "model") {
		t.Errorf("/perch status answered %+v", p)
	}
	f.SlashCommand("/perch", "", "D1", "U1")
	if p := waitPosted(t, f, 2)[1]; !contains(p.Text, "/new") {
		t.Errorf("/perch alone answered %+v; want the help", p)
	}
	f.SlashCommand("/perch", "is the door shut?", "C1", "U1")
	if p := waitPosted(t, f, 3)[2]; p.Channel != "C1" || p.Text != "echo: is the door shut?" {
		t.Errorf("/perch with a question answered %+v", p)
	}
	f.SlashCommand("/tools", "", "D1", "U1")
	if p := waitPosted(t, f, 4)[3]; !contains(p.Text, "tools") {
		t.Errorf("/tools answered %+v", p)
	}
	// A command the gateway adds to the agent (as /sensors and /cron are)
	// is one too: the channel asks the agent, it keeps no list of its own.
	h.env.Agent.RegisterChatCommand(agent.ChatCommand{Name: "/ping", Help: "answer pong", Run: func(_ context.Context, _ bus.Inbound, args string) (string, error) {
		return "pong " + args, nil
	}})
	f.SlashCommand("/perch", "ping twice", "D1", "U1")
	if p := waitPosted(t, f, 5)[4]; p.Text != "pong twice" {
		t.Errorf("/perch ping answered %+v", p)
	}
	// Bob is not on allow_from: a pairing answer, nothing reaches the model.
	f.SlashCommand("/perch", "run this", "D2", "U2")
	if p := waitPosted(t, f, 6)[5]; p.Channel != "D2" || !contains(p.Text, "perch channels approve") {
		t.Errorf("a stranger's slash command answered %+v", p)
	}
	waitFor(t, "the acknowledgements", func() bool { return f.Unacked() == 0 && f.Stats().Acks == 6 })
	time.Sleep(400 * time.Millisecond)
	if st := f.Stats(); st.Retries != 0 || st.Acks != 6 || len(f.Posted()) != 6 {
		t.Errorf("retries %d, acks %d, posts %d; want six of each and no redelivery", st.Retries, st.Acks, len(f.Posted()))
	}
	if n := h.env.Provider.Calls(); n != 1 {
		t.Errorf("the model was called %d times; want once, for the question", n)
	}
}

// TestAnErrorEchoingTheTokenShowsNoToken: an answer that quotes the
// request (a proxy's page, a wrong api_base) puts no token in the error,
// which reaches the log, /ready and the page.
func TestAnErrorEchoingTheTokenShowsNoToken(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"ok":false,"error":"denied: %s"}`, r.Header.Get("Authorization"))
	}))
	defer srv.Close()
	a := client(t, srv.URL+"/", "xoxb-secret-bot-token", "xapp-secret-app-token")
	_, err := a.authTest(context.Background())
	if err == nil || strings.Contains(err.Error(), "secret-bot-token") || !strings.Contains(err.Error(), "denied: Bearer [redacted]") {
		t.Fatalf("auth.test = %v; want the echo with the token redacted", err)
	}
}
