package main

import (
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/channel/telegram/telegramtest"
	"github.com/perchhq/perch/appliance/provider/providertest"
)

const tgToken = "123456:E2E-token-abcdefghijklmnopqrst"

var tgUser = telegramtest.User{ID: 4242, FirstName: "Ada", Username: "ada"}

// telegramHome is a home with channels.telegram pointed at fake.
func telegramHome(t *testing.T, fake *telegramtest.Server, token string) *Home {
	return NewHome(t, func(cfg map[string]any) {
		cfg["channels"] = map[string]any{"telegram": map[string]any{
			"enabled": true, "token": token, "api_base": fake.Base(), "allow_from": []string{"4242"},
		}}
	})
}

// A token Telegram refuses stops the gateway at start with one line that
// names the key — and never shows the token.
func TestTelegramTokenRejectedExitsNamingTheKey(t *testing.T) {
	fake := telegramtest.New("999:the-real-token")
	t.Cleanup(fake.Close) // after the gateway is killed (cleanups run last first)
	h := telegramHome(t, fake, tgToken)
	g := h.StartNoWait()
	if code := g.Wait(30 * time.Second); code != 1 {
		t.Fatalf("exit %d, want 1:\n%s", code, g.Stderr())
	}
	var lines []string
	for _, l := range strings.Split(g.Stderr(), "\n") {
		if strings.HasPrefix(l, "perch: ") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 1 || !strings.Contains(lines[0], "channels.telegram.token") {
		t.Errorf("stderr's error lines %q; want one naming channels.telegram.token", lines)
	}
	if strings.Contains(g.Stderr(), "E2E-token") {
		t.Error("the token is in the output")
	}
}

// A Telegram message reaches the agent and its answer reaches the chat,
// through the real binary.
func TestTelegramMessageAnsweredEndToEnd(t *testing.T) {
	fake := telegramtest.New(tgToken)
	t.Cleanup(fake.Close) // after the gateway is killed (cleanups run last first)
	h := telegramHome(t, fake, tgToken)
	g := h.Start()
	fake.Add(telegramtest.Message{From: tgUser, Text: "is the greenhouse warm?"})
	sent := fake.WaitSent(1, 20*time.Second)
	if len(sent) != 1 || sent[0].ChatID != "4242" || sent[0].Text != "echo: is the greenhouse warm?" || sent[0].ReplyTo == 0 {
		t.Fatalf("sent %+v", sent)
	}
	status, ready := g.Do("GET", "/ready", nil)
	check, _ := ready["checks"].(map[string]any)["channel:telegram"].(map[string]any)
	if status != 200 || check["status"] != "ok" || !strings.Contains(check["message"].(string), "privacy mode") {
		t.Errorf("/ready %d, channel:telegram = %v", status, check)
	}
	// A stranger gets one pairing answer, nothing more.
	fake.Add(telegramtest.Message{From: telegramtest.User{ID: 7, FirstName: "Mallory"}, Text: "run rm -rf /"})
	sent = fake.WaitSent(2, 20*time.Second)
	if len(sent) != 2 || sent[1].ChatID != "7" || !strings.Contains(sent[1].Text, "perch channels approve") {
		t.Errorf("the stranger got %+v", sent[1:])
	}
	if n := len(h.Fake.Requests()); n != 1 {
		t.Errorf("the model was called %d times; the stranger must not reach it", n)
	}
}

// Neither a clean restart nor a crash in the middle of a turn makes the
// gateway answer a message twice or drop it.
func TestTelegramRestartNeverAnswersTwice(t *testing.T) {
	fake := telegramtest.New(tgToken)
	t.Cleanup(fake.Close) // after the gateway is killed (cleanups run last first)
	h := telegramHome(t, fake, tgToken)
	g := h.Start()
	first := fake.Add(telegramtest.Message{From: tgUser, Text: "one"})
	fake.WaitSent(1, 20*time.Second)
	g.Signal(syscall.SIGTERM)
	if code := g.Wait(20 * time.Second); code != 0 {
		t.Fatalf("SIGTERM exit %d", code)
	}
	if fake.Confirmed() <= first {
		t.Errorf("offset %d confirmed at stop; update %d was handled", fake.Confirmed(), first)
	}

	// A turn that is running when the power goes.
	release := make(chan struct{})
	calls := make(chan struct{}, 4)
	h.Fake.Default = func(r providertest.ChatRequest) providertest.Reply {
		calls <- struct{}{}
		select {
		case <-release:
		case <-time.After(30 * time.Second):
		}
		return providertest.Reply{Content: "answer to " + providertest.LastUser(r)}
	}
	g = h.Start()
	fake.Add(telegramtest.Message{From: tgUser, Text: "two"})
	select {
	case <-calls:
	case <-time.After(20 * time.Second):
		t.Fatal("the turn did not start")
	}
	g.Signal(syscall.SIGKILL)
	g.Wait(10 * time.Second)
	close(release)

	g = h.Start()
	fake.WaitSent(2, 30*time.Second)
	// A duplicate answer would follow the second within moments.
	time.Sleep(time.Second)
	sent := fake.Sent()
	var texts []string
	for _, s := range sent {
		texts = append(texts, s.Text)
	}
	if strings.Join(texts, "|") != "echo: one|answer to two" {
		t.Errorf("answers %q; want each message answered exactly once", texts)
	}
	_ = g
}

// A reminder due while Telegram is down is kept and arrives when Telegram
// answers again; the job says it waits rather than failing. A few seconds
// of outage used to lose it and disable the job.
func TestTelegramReminderWaitsOutAnOutage(t *testing.T) {
	fake := telegramtest.New(tgToken)
	t.Cleanup(fake.Close) // after the gateway is killed (cleanups run last first)
	h := telegramHome(t, fake, tgToken)
	g := h.Start()
	down := make([]telegramtest.Failure, 6) // the send's own tries, and the sweeper's first
	for i := range down {
		down[i] = telegramtest.Failure{Code: 502, Description: "Bad Gateway"}
	}
	fake.FailNext("sendMessage", down...)
	if status, _ := g.Do("POST", "/admin/cron", map[string]any{"message": "Water the plants", "deliver": true, "channel": "telegram", "to": "4242", "schedule": map[string]any{"at_seconds": 0}}); status != 200 {
		t.Fatalf("cron add = %d", status)
	}
	sent := fake.WaitSent(1, 60*time.Second)
	if len(sent) != 1 || sent[0].ChatID != "4242" || sent[0].Text != "Water the plants" {
		t.Fatalf("sent %+v", sent)
	}
	_, raw := g.DoRaw("GET", "/admin/cron", nil, true)
	if !strings.Contains(string(raw), "waiting for telegram to take it") || strings.Contains(string(raw), `"last_failed":true`) {
		t.Errorf("the job's record: %s", raw)
	}
	time.Sleep(500 * time.Millisecond)
	if n := len(fake.Sent()); n != 1 {
		t.Errorf("sent %d times", n)
	}
}
