package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/gateway/gatewaytest"

	"github.com/perchhq/perch/appliance/provider/providertest"
)

// TestChatTurnWithToolCall: the model asks for a tool, the result reaches it
// on the next call, and its final answer is the reply.
func TestChatTurnWithToolCall(t *testing.T) {
	h := NewHome(t, nil)
	h.Fake.Enqueue(
		providertest.Reply{ToolCalls: []providertest.ToolCall{{ID: "c1", Name: "cron", Args: `{"action":"list"}`}}},
		providertest.Reply{Content: "You have no jobs."},
	)
	g := h.Start()
	if got := g.MustChat("e2e:tool", "what is scheduled?"); got != "You have no jobs." {
		t.Fatalf("reply %q", got)
	}
	reqs := h.Fake.Requests()
	if len(reqs) != 2 {
		t.Fatalf("%d provider calls, want 2", len(reqs))
	}
	if got := providertest.LastTool(reqs[1].Body); got != "No scheduled jobs." {
		t.Fatalf("tool result the model saw: %q", got)
	}
	if reqs[0].Body.Model != "openai/gpt-4o-mini" || len(reqs[0].Body.Tools) == 0 || reqs[0].Body.ToolChoice != "auto" {
		t.Errorf("first request: %s", reqs[0].Raw)
	}
	if reqs[0].Header.Get("Authorization") != "Bearer sk-or-e2e-secret" {
		t.Error("provider key not sent as a bearer token")
	}
	if strings.Contains(g.Stderr(), "sk-or-e2e-secret") {
		t.Error("the provider key reached the log")
	}
}

func TestChatDefaultsAndResponseShape(t *testing.T) {
	h := NewHome(t, nil)
	g := h.Start()
	status, body := g.Do("POST", "/chat", map[string]any{"message": "hello", "extra_field": 1})
	if status != 200 || body["response"] != "echo: hello" {
		t.Fatalf("HTTP %d %v", status, body)
	}
	if ui, ok := body["ui_commands"].([]any); !ok || len(ui) != 0 {
		t.Fatalf("ui_commands = %#v, want []", body["ui_commands"])
	}
	// The omitted session_key is rest:default.
	_, ready := g.Do("GET", "/ready", nil)
	sessions := ready["agent"].(map[string]any)["sessions"].([]any)
	if len(sessions) != 1 || sessions[0].(map[string]any)["key"] != "rest:default" {
		t.Fatalf("sessions %v", sessions)
	}
}

// TestHistorySurvivesRestart: after SIGTERM and a new start, the same
// session's earlier turns are sent to the provider.
func TestHistorySurvivesRestart(t *testing.T) {
	h := NewHome(t, nil)
	g := h.Start()
	g.MustChat("e2e:mem", "my name is Ada")
	g.Signal(syscall.SIGTERM)
	if code := g.Wait(15 * time.Second); code != 0 {
		t.Fatalf("exit %d after SIGTERM", code)
	}
	g = h.Start()
	g.MustChat("e2e:mem", "what is my name?")
	reqs := h.Fake.Requests()
	last := reqs[len(reqs)-1].Body.Messages
	var texts []string
	for _, m := range last {
		texts = append(texts, m.Role+":"+m.Content)
	}
	joined := strings.Join(texts, "|")
	if !strings.Contains(joined, "user:my name is Ada|assistant:echo: my name is Ada|user:what is my name?") {
		t.Fatalf("history not sent after restart: %s", joined)
	}
}

func TestSignalsExitZero(t *testing.T) {
	// SIGHUP: the terminal or SSH session the gateway was started from
	// went away.
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) {
			h := NewHome(t, nil)
			g := h.Start()
			g.Signal(sig)
			if code := g.Wait(15 * time.Second); code != 0 {
				t.Fatalf("exit %d", code)
			}
			if _, err := os.Stat(filepath.Join(h.Dir, "perch.pid")); !os.IsNotExist(err) {
				t.Error("pid file left after a clean stop")
			}
			// The database was closed: the next start is not an unclean one.
			// The marker starts with "0" after a clean close ("1" while open).
			if b, err := os.ReadFile(filepath.Join(h.Dir, "perch.db.open")); err != nil || len(b) == 0 || b[0] != '0' {
				t.Errorf("the database's marker after a clean stop: %q, %v; want it to start with \"0\"", b, err)
			}
		})
	}
}

// TestStopAtTheFirstAnswer: a stop signal sent the moment the gateway first
// answers (a service manager restarting it, a health check's owner
// stopping it) ends in a clean close, at every restart. The gateway asked
// to hear signals only once its start was over, a little after its first
// answer: a SIGTERM in between killed it with the database's marker left
// at "1", and every next start checked every record as after a power cut.
func TestStopAtTheFirstAnswer(t *testing.T) {
	port := gatewaytest.FreePort(t)
	h := NewHome(t, func(c map[string]any) { c["gateway"].(map[string]any)["port"] = port })
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{DisableKeepAlives: true}}
	url := fmt.Sprintf("http://127.0.0.1:%d/ready", port)
	for i := range 3 {
		g := h.StartNoWait()
		deadline := time.Now().Add(20 * time.Second)
		for {
			resp, err := client.Get(url)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
			if time.Now().After(deadline) {
				t.Fatalf("start %d: no 200 from /ready: %v\n%s", i, err, g.Stderr())
			}
			time.Sleep(100 * time.Microsecond)
		}
		g.Signal(syscall.SIGTERM)
		if code := g.Wait(15 * time.Second); code != 0 {
			t.Fatalf("start %d: exit %d on a SIGTERM at the first answer\n%s", i, code, g.Stderr())
		}
		if b, err := os.ReadFile(filepath.Join(h.Dir, "perch.db.open")); err != nil || len(b) == 0 || b[0] != '0' {
			t.Fatalf("start %d: the database's marker after the stop: %q, %v; want it to start with \"0\"\n%s", i, b, err, g.Stderr())
		}
	}
}

// TestStopWithAPageOpen: a page's event stream, which never ends by
// itself, does not hold up the stop: with one open, SIGTERM took the
// shutdown's whole 30 s and the stop was unclean.
func TestStopWithAPageOpen(t *testing.T) {
	h := NewHome(t, nil)
	g := h.Start()
	status, m := g.Do("POST", "/events/ticket", map[string]any{})
	ticket, _ := m["ticket"].(string)
	if status != 200 || ticket == "" {
		t.Fatalf("ticket: %d %v", status, m)
	}
	resp, err := http.Get(g.Base + "/events?ticket=" + ticket)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("the event stream: %v %v", resp, err)
	}
	defer resp.Body.Close()
	start := time.Now()
	g.Signal(syscall.SIGTERM)
	if code := g.Wait(15 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if took := time.Since(start); took > 5*time.Second || strings.Contains(g.Stderr(), "unclean stop") {
		t.Errorf("the stop took %s with a page open:\n%s", took, g.Stderr())
	}
}

// TestHangupIgnoredUnderNohup: a gateway started ignoring SIGHUP (nohup
// perch gateway &) outlives its terminal.
func TestHangupIgnoredUnderNohup(t *testing.T) {
	h := NewHome(t, nil)
	h.IgnoreHUP = true
	g := h.Start()
	g.Signal(syscall.SIGHUP)
	time.Sleep(300 * time.Millisecond)
	if status, _ := g.Do("GET", "/health", nil); status != 200 {
		t.Fatalf("after SIGHUP under nohup: /health %d, want the gateway still running", status)
	}
	g.Signal(syscall.SIGTERM)
	if code := g.Wait(15 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
}

func TestBusyPortExitsOne(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	h := NewHome(t, func(c map[string]any) { c["gateway"].(map[string]any)["port"] = port })
	g := h.StartNoWait()
	if code := g.Wait(15 * time.Second); code != 1 {
		t.Fatalf("exit %d, want 1", code)
	}
	lines := strings.Split(strings.TrimSpace(g.Stderr()), "\n")
	last := lines[len(lines)-1]
	if !strings.Contains(last, "already in use") || !strings.Contains(last, "gateway.port") {
		t.Fatalf("last stderr line %q", last)
	}
}

// TestSecondGatewayOfTheHomeNamesTheFirst: a second `perch gateway` of the
// same home and port fails at once and names the running one's pid.
func TestSecondGatewayOfTheHomeNamesTheFirst(t *testing.T) {
	port := gatewaytest.FreePort(t)
	h := NewHome(t, func(c map[string]any) { c["gateway"].(map[string]any)["port"] = port })
	g := h.Start()
	defer g.Signal(syscall.SIGTERM)
	t0 := time.Now()
	_, stderr, code := h.Run("gateway")
	if code != 1 {
		t.Fatalf("second gateway: exit %d, want 1:\n%s", code, stderr)
	}
	lines := strings.Split(strings.TrimSpace(stderr), "\n")
	last := lines[len(lines)-1]
	for _, want := range []string{"already in use", fmt.Sprintf("pid %d", g.Cmd.Process.Pid), "gateway.port"} {
		if !strings.Contains(last, want) {
			t.Errorf("last stderr line %q lacks %q", last, want)
		}
	}
	// The port is taken before the database is opened, so the second one
	// does not wait out the database's lock (a second).
	if d := time.Since(t0); d > 900*time.Millisecond {
		t.Errorf("second gateway took %v to fail", d)
	}
	if status, _ := g.Do("GET", "/ready", nil); status != 200 {
		t.Errorf("the first gateway's /ready = %d after the second one failed", status)
	}
}

// TestClientsWaitWhileTheGatewayStarts: the port is bound before anything
// else is built, so a request sent while the gateway starts (here: while
// it waits for the database's lock) is answered once it is ready instead
// of being refused.
func TestClientsWaitWhileTheGatewayStarts(t *testing.T) {
	port := gatewaytest.FreePort(t)
	h := NewHome(t, func(c map[string]any) { c["gateway"].(map[string]any)["port"] = port })
	db, err := os.OpenFile(filepath.Join(h.Dir, "perch.db"), os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := syscall.Flock(int(db.Fd()), syscall.LOCK_EX); err != nil {
		t.Fatal(err)
	}
	g := h.StartNoWait()
	defer g.Signal(syscall.SIGTERM)
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the port was not bound while the database was locked: %v\n%s", err, g.Stderr())
		}
		time.Sleep(5 * time.Millisecond)
	}
	type answer struct {
		status int
		err    error
	}
	got := make(chan answer, 1)
	go func() {
		resp, err := (&http.Client{Timeout: 20 * time.Second}).Get("http://" + addr + "/ready")
		if err != nil {
			got <- answer{err: err}
			return
		}
		resp.Body.Close()
		got <- answer{status: resp.StatusCode}
	}()
	select {
	case a := <-got:
		t.Fatalf("answered while the database was still locked: %+v", a)
	case <-time.After(300 * time.Millisecond):
	}
	syscall.Flock(int(db.Fd()), syscall.LOCK_UN)
	select {
	case a := <-got:
		if a.err != nil || a.status != 200 {
			t.Fatalf("the request sent during start got %+v, want 200\n%s", a, g.Stderr())
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("no answer after the lock was released\n%s", g.Stderr())
	}
}

func TestConfigErrorsExitOne(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(map[string]any)
		want   []string
	}{
		{"unknown key", func(c map[string]any) { c["gateway"].(map[string]any)["prot"] = 1 }, []string{`"gateway.prot"`, `"gateway.port"`}},
		{"bad temperature", func(c map[string]any) {
			c["agents"].(map[string]any)["defaults"].(map[string]any)["temperature"] = 3
		}, []string{"agents.defaults.temperature"}},
		{"malformed api_base", func(c map[string]any) {
			c["providers"].(map[string]any)["openrouter"].(map[string]any)["api_base"] = "not a url"
		}, []string{"providers.openrouter.api_base"}},
		{"unknown provider", func(c map[string]any) {
			c["agents"].(map[string]any)["defaults"].(map[string]any)["provider"] = "mistral"
		}, []string{"agents.defaults.provider"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := NewHome(t, tc.mutate)
			_, stderr, code := h.Run("gateway")
			if code != 1 {
				t.Fatalf("exit %d, want 1; stderr %s", code, stderr)
			}
			lines := strings.Split(strings.TrimSpace(stderr), "\n")
			if len(lines) != 1 {
				t.Errorf("want one line on stderr, got %d: %s", len(lines), stderr)
			}
			for _, w := range tc.want {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr %q lacks %q", stderr, w)
				}
			}
		})
	}
}

func TestUpstreamRetriedAndErrorsClear(t *testing.T) {
	t.Run("429 then 200", func(t *testing.T) {
		h := NewHome(t, nil)
		h.Fake.Enqueue(providertest.Reply{Status: 429, RetryAfter: "0", ErrorMessage: "slow down"}, providertest.Reply{Content: "after retry"})
		g := h.Start()
		if got := g.MustChat("e2e:retry", "hi"); got != "after retry" {
			t.Fatalf("reply %q", got)
		}
		if h.Fake.Calls() != 2 {
			t.Fatalf("%d calls", h.Fake.Calls())
		}
	})
	t.Run("401 becomes a clear 502", func(t *testing.T) {
		h := NewHome(t, nil)
		h.Fake.Enqueue(providertest.Reply{Status: 401, ErrorMessage: "Invalid API key: sk-or-e2e-secret"})
		g := h.Start()
		status, body := g.Chat("e2e:auth", "hi")
		msg, _ := body["error"].(string)
		if status != 502 || !strings.Contains(msg, "authentication failed") || !strings.Contains(msg, "providers.openrouter.api_key") {
			t.Fatalf("HTTP %d %v", status, body)
		}
		if strings.Contains(msg, "sk-or-e2e-secret") || strings.Contains(g.Stderr(), "sk-or-e2e-secret") {
			t.Fatal("the key leaked into the error or the log")
		}
		// The user's message was stored before the call failed.
		g.Signal(syscall.SIGTERM)
		g.Wait(15 * time.Second)
		g = h.Start()
		g.MustChat("e2e:auth", "again")
		msgs := h.Fake.Requests()[len(h.Fake.Requests())-1].Body.Messages
		if msgs[1].Content != "hi" {
			t.Fatalf("acknowledged message lost: %+v", msgs)
		}
	})
	t.Run("unknown model names the vendor prefix", func(t *testing.T) {
		h := NewHome(t, nil)
		h.Fake.Enqueue(providertest.Reply{Status: 404, ErrorMessage: "gpt-4o-mini is not a valid model ID"})
		g := h.Start()
		status, body := g.Chat("e2e:model", "hi")
		if msg, _ := body["error"].(string); status != 502 || !strings.Contains(msg, "vendor prefix") {
			t.Fatalf("HTTP %d %v", status, body)
		}
	})
}

// TestParallelSessions: 50 sessions at once each get their own answer.
func TestParallelSessions(t *testing.T) {
	h := NewHome(t, nil)
	g := h.Start()
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			msg := fmt.Sprintf("hello from %d", i)
			status, body := g.Chat(fmt.Sprintf("par:%d", i), msg)
			if status != 200 || body["response"] != "echo: "+msg {
				errs <- fmt.Errorf("session %d: HTTP %d %v", i, status, body)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	_, ready := g.Do("GET", "/ready", nil)
	if n := len(ready["agent"].(map[string]any)["sessions"].([]any)); n != 50 {
		t.Errorf("%d sessions in /ready", n)
	}
}

func TestNoProviderDegraded(t *testing.T) {
	h := NewHome(t, func(c map[string]any) { delete(c, "providers") })
	g := h.Start()
	status, ready := g.Do("GET", "/ready", nil)
	check := ready["checks"].(map[string]any)["provider"].(map[string]any)
	if status != 503 || ready["status"] != "not ready" || check["status"] != "fail" ||
		!strings.Contains(check["message"].(string), "providers.openrouter.api_key") {
		t.Fatalf("HTTP %d %v", status, ready)
	}
	status, body := g.Chat("e2e:np", "hello")
	if status != 503 || !strings.Contains(body["error"].(string), "api_key") {
		t.Fatalf("chat without provider: HTTP %d %v", status, body)
	}
	for _, cmd := range []string{"/help", "/status", "/tools", "/new", "/cron", "/sensors", "/devices"} {
		if status, body := g.Chat("e2e:np", cmd); status != 200 || body["response"] == "" {
			t.Errorf("%s: HTTP %d %v", cmd, status, body)
		}
	}
	if status, _ := g.Do("GET", "/health", nil); status != 200 {
		t.Errorf("/health %d", status)
	}
}

func TestOfflineCommandsSkipTheModel(t *testing.T) {
	h := NewHome(t, nil)
	g := h.Start()
	help := g.MustChat("e2e:cmd", "/help")
	for _, c := range []string{"/help", "/new", "/status", "/tools", "/models", "/sensors", "/devices", "/cron"} {
		if !strings.Contains(help, c) {
			t.Errorf("/help lacks %s", c)
		}
	}
	g.MustChat("e2e:cmd", "/status")
	if h.Fake.Calls() != 0 {
		t.Fatalf("commands reached the model (%d calls)", h.Fake.Calls())
	}
	// A path is not a command.
	if got := g.MustChat("e2e:cmd", "/etc/hosts is a file"); got != "echo: /etc/hosts is a file" {
		t.Fatalf("reply %q", got)
	}
	// /new forgets the session.
	g.MustChat("e2e:cmd", "/new")
	g.MustChat("e2e:cmd", "fresh")
	msgs := h.Fake.Requests()[1].Body.Messages
	if len(msgs) != 2 {
		t.Fatalf("after /new the model saw %d messages", len(msgs))
	}
}

func TestHTTPErrors(t *testing.T) {
	h := NewHome(t, nil)
	g := h.Start()
	cases := []struct {
		name, method, path string
		body               any
		auth               bool
		want               int
	}{
		{"no token", "POST", "/chat", `{"message":"x"}`, false, 401},
		{"admin no token", "GET", "/admin/status", nil, false, 401},
		{"malformed", "POST", "/chat", `{"message":`, true, 400},
		{"empty message", "POST", "/chat", `{"message":"  "}`, true, 400},
		{"too large", "POST", "/chat", `{"message":"` + strings.Repeat("a", 1<<20+10) + `"}`, true, 413},
		{"unknown path", "GET", "/nope", nil, true, 404},
		{"wrong method", "GET", "/chat", nil, true, 405},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			status, raw := g.DoRaw(tc.method, tc.path, tc.body, tc.auth)
			var e map[string]any
			if status != tc.want || json.Unmarshal(raw, &e) != nil || e["error"] == "" {
				t.Fatalf("HTTP %d %s, want %d with an error body", status, raw, tc.want)
			}
		})
	}
	status, st := g.Do("GET", "/admin/status", nil)
	for _, k := range []string{"uptime", "ready", "version", "active_sessions", "queue_depth", "memory_mb", "goroutines"} {
		if _, ok := st[k]; !ok || status != 200 {
			t.Errorf("/admin/status lacks %s (HTTP %d)", k, status)
		}
	}
	for _, p := range []string{"/admin/service", "/admin/logs"} {
		status, body := g.Do("GET", p, nil)
		if _, ok := body["output"]; status != 200 || !ok {
			t.Errorf("%s: HTTP %d %v", p, status, body)
		}
	}
	// Started here, not by systemd: the log says where this gateway's own
	// lines are before whatever the journal holds for the unit.
	if _, body := g.Do("GET", "/admin/logs", nil); !strings.HasPrefix(fmt.Sprint(body["output"]), "This gateway's log does not go to the journal") {
		t.Errorf("/admin/logs off systemd: %v", body)
	}
}

// TestTokenlessGatewayWarns: without a token the API trusts every local
// process, the agent's commands included; the log says so at start.
func TestTokenlessGatewayWarns(t *testing.T) {
	h := NewHome(t, func(cfg map[string]any) { delete(cfg["gateway"].(map[string]any), "api_token") })
	g := h.Start()
	if !strings.Contains(g.Stderr(), "gateway.api_token is empty: every process on this machine can use the API, the commands the agent runs included") {
		t.Errorf("no warning:\n%s", g.Stderr())
	}
	g.Signal(syscall.SIGTERM)
	g.Wait(15 * time.Second)

	h = NewHome(t, nil)
	g = h.Start()
	if strings.Contains(g.Stderr(), "api_token is empty") {
		t.Errorf("warned with a token:\n%s", g.Stderr())
	}
}

// TestTokenChangedUnderARunningGateway: the config's api_token changed
// after the gateway started; the CLI says so and what to do, where it said
// "not ready" and the gateway's hint for HTTP clients.
func TestTokenChangedUnderARunningGateway(t *testing.T) {
	h := NewHome(t, nil)
	g := h.Start()
	path := filepath.Join(h.Dir, "config.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, bytes.Replace(data, []byte(`"test-token"`), []byte(`"a-new-token-of-32-characters-xx"`), 1), 0o600); err != nil {
		t.Fatal(err)
	}
	out, _, code := h.Run("status")
	if code != 0 || !strings.Contains(out, "refuses this config's gateway.api_token") {
		t.Errorf("status: %d %q", code, out)
	}
	_, errOut, code := h.Run("cron", "list")
	if code != 1 || !strings.Contains(errOut, "refused this config's gateway.api_token") || !strings.Contains(errOut, "restart the gateway") {
		t.Errorf("cron list: %d %q", code, errOut)
	}
	g.Signal(syscall.SIGTERM)
	g.Wait(15 * time.Second)
}

// TestModels: perch models lists the provider's models with their prices,
// and a FILTER narrows them as the chat's /models FILTER does.
func TestModels(t *testing.T) {
	h := NewHome(t, nil)
	h.Fake.SetModels([]map[string]any{
		{"id": "openai/gpt-4o-mini", "pricing": map[string]any{"prompt": "0.00000015", "completion": "0.0000006"}},
		{"id": "anthropic/claude-3.5-sonnet"},
		{"id": "openai/GPT-4.1"},
	})
	out, errOut, code := h.Run("models")
	if code != 0 || strings.Count(out, "\n") != 3 || !strings.Contains(out, "prompt 0.00000015") {
		t.Fatalf("models: %d %q %q", code, out, errOut)
	}
	out, _, code = h.Run("models", "gpt")
	if code != 0 || !strings.Contains(out, "openai/gpt-4o-mini") || !strings.Contains(out, "openai/GPT-4.1") || strings.Contains(out, "claude") {
		t.Errorf("models gpt: %d %q", code, out)
	}
	out, _, code = h.Run("models", "--json", "claude")
	var list []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil || len(list) != 1 || list[0]["id"] != "anthropic/claude-3.5-sonnet" {
		t.Errorf("models --json claude: %d %q", code, out)
	}
	out, _, code = h.Run("models", "llama")
	if code != 0 || !strings.Contains(out, `lists no models matching "llama" (of 3)`) {
		t.Errorf("models llama: %d %q", code, out)
	}
	if _, errOut, code := h.Run("models", "a", "b"); code != 1 || !strings.Contains(errOut, `unexpected argument "b"`) {
		t.Errorf("two filters: %d %q", code, errOut)
	}
}

func TestCLI(t *testing.T) {
	h := NewHome(t, nil)
	out, _, code := h.Run("version")
	if code != 0 || !regexp.MustCompile(`^perch \S+ \(commit \S+, built \S+, go\S+\)\n$`).MatchString(out) {
		t.Fatalf("version: %d %q", code, out)
	}
	out, _, code = h.Run("status")
	if code != 0 || !strings.Contains(out, "providers.openrouter.api_key") || strings.Contains(out, "sk-or-e2e-secret") ||
		!strings.Contains(out, "not running") {
		t.Fatalf("status: %d\n%s", code, out)
	}
	// cron without a gateway works on the database.
	id, stderr, code := h.Run("cron", "add", "--message", "water the plants", "--every", "3600")
	id = strings.TrimSpace(id)
	if code != 0 || !regexp.MustCompile(`^[0-9a-f]{8}$`).MatchString(id) {
		t.Fatalf("cron add: %d %q %s", code, id, stderr)
	}
	// With the gateway running, the CLI goes through its API.
	g := h.Start()
	out, _, code = h.Run("status")
	if code != 0 || !strings.Contains(out, "running (pid") {
		t.Fatalf("status with gateway: %s", out)
	}
	out, stderr, code = h.Run("cron", "list", "--json")
	var jobs []map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &jobs) != nil || len(jobs) != 1 || jobs[0]["id"] != id || jobs[0]["next_run"] == nil {
		t.Fatalf("cron list: %d %s %s", code, out, stderr)
	}
	if _, _, code := h.Run("cron", "disable", id); code != 0 {
		t.Fatal("cron disable failed")
	}
	out, _, _ = h.Run("cron", "list", "--json")
	jobs = nil
	json.Unmarshal([]byte(out), &jobs)
	if jobs[0]["enabled"] != false || jobs[0]["next_run"] != nil {
		t.Fatalf("after disable: %v", jobs[0])
	}
	if _, stderr, code := h.Run("cron", "remove", "nope"); code != 1 || !strings.Contains(stderr, "no such job") {
		t.Fatalf("remove unknown: %d %s", code, stderr)
	}
	out, _, code = h.Run("agent", "-m", "hi there", "-s", "cli:e2e")
	if code != 0 || strings.TrimSpace(out) != "echo: hi there" {
		t.Fatalf("agent -m via gateway: %d %q", code, out)
	}
	g.Signal(syscall.SIGTERM)
	g.Wait(15 * time.Second)
	// And in-process when no gateway runs, on the same history.
	out, _, code = h.Run("agent", "-m", "again", "-s", "cli:e2e")
	if code != 0 || strings.TrimSpace(out) != "echo: again" {
		t.Fatalf("agent -m in-process: %d %q", code, out)
	}
	msgs := h.Fake.Requests()[len(h.Fake.Requests())-1].Body.Messages
	if len(msgs) != 4 || msgs[1].Content != "hi there" {
		t.Fatalf("in-process agent did not see the history: %+v", msgs)
	}
}

// TestCrashLosesNoAcknowledgedMessage: SIGKILL mid-load, then every
// acknowledged exchange is in the history and the database opens.
func TestCrashLosesNoAcknowledgedMessage(t *testing.T) {
	h := NewHome(t, nil)
	g := h.Start()
	var mu sync.Mutex
	acked := map[string][]string{}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("crash:%d", w)
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				msg := fmt.Sprintf("m%d", i)
				body, _ := json.Marshal(map[string]any{"message": msg, "session_key": key})
				req, _ := http.NewRequest("POST", g.Base+"/chat", bytes.NewReader(body))
				req.Header.Set("Authorization", "Bearer "+g.Token)
				req.Header.Set("Content-Type", "application/json")
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					return // the gateway died under us: expected
				}
				resp.Body.Close()
				if resp.StatusCode != 200 {
					return
				}
				mu.Lock()
				acked[key] = append(acked[key], msg)
				mu.Unlock()
			}
		}()
	}
	time.Sleep(300 * time.Millisecond)
	g.Signal(syscall.SIGKILL)
	close(stop)
	wg.Wait()
	g.Wait(10 * time.Second)
	g = h.Start()
	total := 0
	for key, msgs := range acked {
		g.MustChat(key, "check")
		reqs := h.Fake.Requests()
		seen := map[string]bool{}
		for _, r := range reqs {
			if providertest.LastUser(r.Body) == "check" {
				for _, m := range r.Body.Messages {
					seen[m.Content] = true
				}
			}
		}
		for _, m := range msgs {
			total++
			if !seen[m] || !seen["echo: "+m] {
				t.Errorf("%s: acknowledged exchange %q lost", key, m)
			}
		}
	}
	if total == 0 {
		t.Fatal("no request was acknowledged before the kill")
	}
}

// TestDebugLogsCallsNotSecrets: --debug shows every tool and provider call,
// never a secret.
func TestDebugLogsCallsNotSecrets(t *testing.T) {
	h := NewHome(t, func(c map[string]any) {
		c["tools"] = map[string]any{"web": map[string]any{"search": map[string]any{"api_key": "brave-secret-key"}}}
	})
	h.Fake.Enqueue(
		providertest.Reply{ToolCalls: []providertest.ToolCall{{ID: "c1", Name: "cron", Args: `{"action":"list"}`}}},
		providertest.Reply{Content: "ok", Usage: [3]int{11, 4, 15}},
	)
	g := h.Start("--debug")
	g.MustChat("dbg:1", "list jobs")
	deadline := time.Now().Add(5 * time.Second)
	for !strings.Contains(g.Stderr(), "total_tokens=15") && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	log := g.Stderr()
	for _, want := range []string{"tool call", "tool=cron", "session=dbg:1", "provider call", "model=openai/gpt-4o-mini", "status=ok", "total_tokens=15"} {
		if !strings.Contains(log, want) {
			t.Errorf("debug log lacks %q", want)
		}
	}
	for _, secret := range []string{"sk-or-e2e-secret", "brave-secret-key", "test-token"} {
		if strings.Contains(log, secret) {
			t.Errorf("debug log contains the secret %q", secret)
		}
	}
}

// TestSIGTERMCancelsTurnInFlight: a slow provider does not hold up a clean
// stop; the waiting client gets a 503.
func TestSIGTERMCancelsTurnInFlight(t *testing.T) {
	h := NewHome(t, nil)
	h.Fake.Default = func(providertest.ChatRequest) providertest.Reply {
		time.Sleep(3 * time.Second)
		return providertest.Reply{Content: "too late"}
	}
	g := h.Start()
	got := make(chan int, 1)
	go func() {
		status, _ := g.Chat("slow:1", "take your time")
		got <- status
	}()
	for h.Fake.Calls() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	start := time.Now()
	g.Signal(syscall.SIGTERM)
	if code := g.Wait(10 * time.Second); code != 0 {
		t.Fatalf("exit %d", code)
	}
	if el := time.Since(start); el > 2*time.Second {
		t.Errorf("stop took %v with a turn in flight", el)
	}
	if status := <-got; status != 503 {
		t.Errorf("client got %d, want 503", status)
	}
}

// TestChatMediaConfigReachesTheModel: media_config becomes part of the
// model's instructions; an oversized session key is a clear 400.
func TestChatMediaConfigReachesTheModel(t *testing.T) {
	h := NewHome(t, nil)
	g := h.Start()
	status, _ := g.Do("POST", "/chat", map[string]any{"message": "draw a heron", "session_key": "media:1",
		"media_config": map[string]any{"type": "image", "size": "1024x1024", "aspect_ratio": "16:9"}})
	if status != 200 {
		t.Fatalf("HTTP %d", status)
	}
	sys := h.Fake.Requests()[0].Body.Messages[0].Content
	if !strings.Contains(sys, "type image, size 1024x1024, aspect ratio 16:9") || !strings.Contains(sys, "generate_image") {
		t.Fatalf("system prompt lacks the media request:\n%s", sys)
	}
	status, body := g.Do("POST", "/chat", map[string]any{"message": "x", "session_key": strings.Repeat("k", 600)})
	if status != 400 || !strings.Contains(body["error"].(string), "session_key") {
		t.Fatalf("long key: HTTP %d %v", status, body)
	}
}

// TestAgentInteractive: the REPL answers each line and leaves on "exit".
func TestAgentInteractive(t *testing.T) {
	h := NewHome(t, nil)
	cmd := exec.Command(perchBin, "agent", "-s", "cli:repl")
	cmd.Env = h.Env()
	cmd.Stdin = strings.NewReader("hello there\n\n/new\nsecond\nexit\nnot sent\n")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v\n%s%s", err, out, stderr.String())
	}
	// From a pipe, only the replies: no banner or prompts for a script to
	// strip (the terminal's form is TestAgentOnATerminal's).
	want := "echo: hello there\nStarted a new conversation; the earlier messages of this session are forgotten.\necho: second\n"
	if string(out) != want || stderr.String() != "" {
		t.Errorf("stdout %q, stderr %q; want stdout %q", out, stderr.String(), want)
	}
	if n := len(h.Fake.Requests()); n != 2 {
		t.Fatalf("the model was asked %d times, want 2 (a line after exit was sent?)", n)
	}
	if got := providertest.LastUser(h.Fake.Requests()[1].Body); got != "second" || len(h.Fake.Requests()[1].Body.Messages) != 2 {
		t.Errorf("after /new the model saw %+v", h.Fake.Requests()[1].Body.Messages)
	}
}

// TestCronRunCutOffByAKillIsNotRepeated: a job's command runs, the
// gateway is killed mid-run (a power cut), and the next start does not run
// the command a second time; the job lists the run as interrupted.
func TestCronRunCutOffByAKillIsNotRepeated(t *testing.T) {
	h := NewHome(t, nil)
	g := h.Start()
	marks := filepath.Join(h.Workspace(), "runs.txt")
	status, body := g.Do("POST", "/admin/cron", map[string]any{"message": "pump", "command": "echo ran >> runs.txt; sleep 5", "schedule": map[string]any{"at_seconds": 0}})
	if status != 200 && status != 201 {
		t.Fatalf("cron add = %d %v", status, body)
	}
	id, _ := body["id"].(string)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if b, _ := os.ReadFile(marks); len(b) > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the job's command never ran\n%s", g.Stderr())
		}
		time.Sleep(20 * time.Millisecond)
	}
	g.Signal(syscall.SIGKILL)
	g.Wait(10 * time.Second)
	g = h.Start()
	// A repeated run would begin right after the start.
	time.Sleep(1500 * time.Millisecond)
	if b, _ := os.ReadFile(marks); string(b) != "ran\n" {
		t.Errorf("the command ran %d times in all, want once:\n%s", strings.Count(string(b), "ran"), g.Stderr())
	}
	_, raw := g.DoRaw("GET", "/admin/cron", nil, true)
	var jobs []map[string]any
	if err := json.Unmarshal(raw, &jobs); err != nil {
		t.Fatalf("GET /admin/cron: %v: %s", err, raw)
	}
	found := false
	for _, j := range jobs {
		if j["id"] == id {
			found = true
			if j["last_failed"] != true || j["enabled"] != false || !strings.Contains(fmt.Sprint(j["last_result"]), "interrupted") || j["running_since"] != nil {
				t.Errorf("the job after the restart: %v; want it over and its run listed as interrupted", j)
			}
		}
	}
	if !found {
		t.Errorf("job %s not listed: %s", id, raw)
	}
	if !strings.Contains(g.Stderr(), "not run again") {
		t.Errorf("the start did not log the interrupted run:\n%s", g.Stderr())
	}
}
