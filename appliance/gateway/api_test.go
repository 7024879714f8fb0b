package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/agent"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/provider"
	"github.com/perchhq/perch/appliance/provider/providertest"
	"github.com/perchhq/perch/store"
	"github.com/perchhq/perch/store/storetest"
)

// rig is a gateway with the core routes over a real agent loop and store,
// talking to the fake provider on loopback.
type rig struct {
	srv    *Server
	fake   *providertest.Server
	loop   *agent.Loop
	db     *store.DB
	checks *Checks
	ws     string
}

type rigOptions struct {
	noProvider bool
	server     Options // Host defaults to 127.0.0.1
	agent      func(*agent.Options)
	deps       func(*Deps)
}

func newRig(t testing.TB, o rigOptions) *rig {
	t.Helper()
	log := slog.New(slog.DiscardHandler)
	r := &rig{fake: providertest.New(), db: storetest.Open(t), checks: NewChecks(), ws: t.TempDir()}
	t.Cleanup(r.fake.Close)
	opts := agent.Options{Store: r.db, Log: log, Workspace: r.ws}
	if o.noProvider {
		opts.NoProvider = fmt.Errorf("%w: set providers.openrouter.api_key", provider.ErrNoProvider)
	} else {
		cfg := config.Default()
		cfg.Providers.OpenRouter.APIKey = "k"
		cfg.Providers.OpenRouter.APIBase = r.fake.Base()
		cfg.Providers.OpenRouter.MaxRetries = 0
		cfg.Agents.Defaults.Model = "openai/gpt-4o-mini"
		p, err := provider.FromConfig(context.Background(), cfg, log)
		if err != nil {
			t.Fatal(err)
		}
		opts.Provider = p
	}
	if o.agent != nil {
		o.agent(&opts)
	}
	r.loop = agent.New(opts)
	t.Cleanup(func() { r.loop.Stop(context.Background()) })
	so := o.server
	if so.Host == "" {
		so.Host = "127.0.0.1"
	}
	so.Log = log
	r.srv = New(so)
	d := Deps{Agent: r.loop, Store: r.db, Checks: r.checks, Workspace: r.ws}
	if o.deps != nil {
		o.deps(&d)
	}
	r.srv.RegisterCore(d)
	return r
}

func (r *rig) do(t testing.TB, method, path, body string) (*http.Response, map[string]any) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	return do(t, r.srv, method, path, "127.0.0.1:40000", rd, "Content-Type", "application/json")
}

var uptimeRE = regexp.MustCompile(`^\d+h\d+m\d+s$`)

func TestHealth(t *testing.T) {
	r := newRig(t, rigOptions{})
	// Liveness does not wait for readiness.
	resp, body := r.do(t, "GET", "/health", "")
	if resp.StatusCode != 200 || body["status"] != "ok" {
		t.Fatalf("/health = %d %v, want 200 status ok", resp.StatusCode, body)
	}
	if up, _ := body["uptime"].(string); !uptimeRE.MatchString(up) {
		t.Errorf("uptime %q is not <h>h<m>m<s>s", body["uptime"])
	}
}

func TestReadyBeforeStartup(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.checks.Register("store", func(context.Context) (bool, string) { return true, "bbolt" })
	resp, body := r.do(t, "GET", "/ready", "")
	if resp.StatusCode != 503 || body["status"] != "not ready" {
		t.Fatalf("/ready before SetReady = %d %v, want 503 not ready", resp.StatusCode, body)
	}
	checks := body["checks"].(map[string]any)
	st := checks["startup"].(map[string]any)
	if st["status"] != "fail" || st["name"] != "startup" {
		t.Errorf("startup check = %v, want a fail entry named startup", st)
	}
	if checks["store"].(map[string]any)["status"] != "ok" {
		t.Errorf("the passing store check is missing or not ok: %v", checks["store"])
	}
	if _, ok := body["uptime"]; ok {
		t.Error("not ready answer carries uptime")
	}
	if _, ok := body["agent"]; ok {
		t.Error("not ready answer carries the agent object")
	}
}

func TestReadyWithFailingCheck(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.srv.SetReady(true)
	r.checks.Register("store", func(context.Context) (bool, string) { return true, "bbolt" })
	r.checks.Register("channel:telegram", func(context.Context) (bool, string) {
		return false, "telegram rejected the token; check channels.telegram.token"
	})
	resp, body := r.do(t, "GET", "/ready", "")
	if resp.StatusCode != 503 || body["status"] != "not ready" {
		t.Fatalf("/ready = %d %v, want 503 not ready", resp.StatusCode, body)
	}
	checks := body["checks"].(map[string]any)
	if _, ok := checks["startup"]; ok {
		t.Error("a startup check appears after SetReady(true)")
	}
	tg := checks["channel:telegram"].(map[string]any)
	if tg["status"] != "fail" || tg["name"] != "channel:telegram" || !strings.Contains(tg["message"].(string), "channels.telegram.token") {
		t.Errorf("failing check = %v", tg)
	}
	for name, c := range checks {
		ts, _ := c.(map[string]any)["timestamp"].(string)
		if _, err := time.Parse(time.RFC3339, ts); err != nil {
			t.Errorf("check %s timestamp %q is not RFC 3339: %v", name, ts, err)
		}
	}
}

func TestReadyWhenReady(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.srv.SetReady(true)
	r.checks.Register("store", func(context.Context) (bool, string) { return true, "bbolt" })
	r.checks.Register("provider", func(context.Context) (bool, string) { return true, "openrouter" })

	// One finished turn leaves a session with two messages.
	if resp, body := r.do(t, "POST", "/chat", `{"message":"hi","session_key":"telegram:42"}`); resp.StatusCode != 200 {
		t.Fatalf("/chat = %d %v", resp.StatusCode, body)
	}
	resp, body := r.do(t, "GET", "/ready", "")
	if resp.StatusCode != 200 || body["status"] != "ready" {
		t.Fatalf("/ready = %d %v, want 200 ready", resp.StatusCode, body)
	}
	if up, _ := body["uptime"].(string); !uptimeRE.MatchString(up) {
		t.Errorf("uptime %q is not <h>h<m>m<s>s", body["uptime"])
	}
	checks := body["checks"].(map[string]any)
	if len(checks) != 2 || checks["store"].(map[string]any)["status"] != "ok" || checks["provider"].(map[string]any)["status"] != "ok" {
		t.Errorf("checks = %v, want store and provider ok", checks)
	}
	ag := body["agent"].(map[string]any)
	if ag["model"] != "openai/gpt-4o-mini" || ag["workspace"] != r.ws {
		t.Errorf("agent = %v, want the model and workspace", ag)
	}
	sessions := ag["sessions"].([]any)
	if len(sessions) != 1 {
		t.Fatalf("sessions = %v, want one", sessions)
	}
	s := sessions[0].(map[string]any)
	if s["key"] != "telegram:42" || s["message_count"] != float64(2) {
		t.Errorf("session = %v, want telegram:42 with 2 messages", s)
	}
	if subs, ok := ag["subagents"].([]any); !ok || len(subs) != 0 {
		t.Errorf("subagents = %v, want an empty array", ag["subagents"])
	}
}

// With no registered checks and nothing run yet, the lists are empty arrays
// (not null) and the model is empty when there is no provider.
func TestReadyDegradedShape(t *testing.T) {
	r := newRig(t, rigOptions{noProvider: true})
	r.srv.SetReady(true)
	resp, body := r.do(t, "GET", "/ready", "")
	if resp.StatusCode != 200 {
		t.Fatalf("/ready = %d %v", resp.StatusCode, body)
	}
	ag := body["agent"].(map[string]any)
	if ag["model"] != "" {
		t.Errorf("model = %v, want empty without a provider", ag["model"])
	}
	if s, ok := ag["sessions"].([]any); !ok || len(s) != 0 {
		t.Errorf("sessions = %#v, want []", ag["sessions"])
	}
	if c, ok := body["checks"].(map[string]any); !ok || len(c) != 0 {
		t.Errorf("checks = %#v, want {}", body["checks"])
	}
}

func TestChat(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.srv.SetReady(true)
	resp, body := r.do(t, "POST", "/chat", `{"message":"hello there","unknown_field":1}`)
	if resp.StatusCode != 200 {
		t.Fatalf("/chat = %d %v", resp.StatusCode, body)
	}
	if body["response"] != "echo: hello there" {
		t.Errorf("response = %v, want the fake's echo", body["response"])
	}
	if ui, ok := body["ui_commands"].([]any); !ok || len(ui) != 0 {
		t.Errorf("ui_commands = %#v, want []", body["ui_commands"])
	}
	// The answer's time is the board's, as stored: at or after the reply
	// in the history.
	h, _ := r.db.History("rest:default")
	if tm, ok := body["t"].(float64); !ok || len(h) != 2 || int64(tm) < h[1].Time || int64(tm) > time.Now().UnixMilli() {
		t.Errorf("t = %v, want the board's time of the answer", body["t"])
	}
	// No session_key means rest:default.
	if h, err := r.db.History("rest:default"); err != nil || len(h) != 2 {
		t.Errorf("rest:default history = %d messages (%v), want 2", len(h), err)
	}
}

func TestChatRefusals(t *testing.T) {
	tests := []struct {
		name    string
		ready   bool
		noProv  bool
		body    string
		status  int
		substr  string
		upCalls int
	}{
		{"malformed JSON", true, false, `{"message":`, 400, "malformed JSON", 0},
		{"empty message", true, false, `{"message":"  "}`, 400, `"message" is empty`, 0},
		{"missing message", true, false, `{}`, 400, `"message" is empty`, 0},
		{"over 1 MiB", true, false, `{"message":"` + strings.Repeat("a", MaxBody) + `"}`, 413, "over", 0},
		{"not ready", false, false, `{"message":"hi"}`, 503, "starting", 0},
		{"no provider", true, true, `{"message":"hi"}`, 503, "providers.openrouter.api_key", 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, rigOptions{noProvider: tt.noProv})
			r.srv.SetReady(tt.ready)
			resp, body := r.do(t, "POST", "/chat", tt.body)
			if resp.StatusCode != tt.status {
				t.Fatalf("status %d, want %d (%.200v)", resp.StatusCode, tt.status, body)
			}
			if msg := errorOf(t, body); !strings.Contains(msg, tt.substr) {
				t.Errorf("error %q does not mention %q", msg, tt.substr)
			}
			if r.fake.Calls() != tt.upCalls {
				t.Errorf("provider called %d times, want %d", r.fake.Calls(), tt.upCalls)
			}
		})
	}
}

// An offline command is answered without a provider.
func TestChatCommandWithoutProvider(t *testing.T) {
	r := newRig(t, rigOptions{noProvider: true})
	r.srv.SetReady(true)
	resp, body := r.do(t, "POST", "/chat", `{"message":"/help"}`)
	if resp.StatusCode != 200 || !strings.Contains(fmt.Sprint(body["response"]), "/new") {
		t.Errorf("/help = %d %v, want 200 listing the commands", resp.StatusCode, body)
	}
}

// The upstream's failure is 502 naming the cause.
func TestChatUpstreamFailure(t *testing.T) {
	r := newRig(t, rigOptions{})
	r.srv.SetReady(true)
	r.fake.Enqueue(providertest.Reply{Status: 401, ErrorMessage: "invalid api key"})
	resp, body := r.do(t, "POST", "/chat", `{"message":"hi"}`)
	if resp.StatusCode != 502 {
		t.Fatalf("status %d, want 502 (%v)", resp.StatusCode, body)
	}
	if msg := errorOf(t, body); !strings.Contains(msg, "authentication failed") || !strings.Contains(msg, "providers.openrouter.api_key") {
		t.Errorf("502 message %q should say authentication failed and name the key", msg)
	}
}

// blockingRig returns a rig whose provider holds every call until release
// is closed (at cleanup at the latest).
func blockingRig(t *testing.T, o rigOptions) (*rig, chan struct{}) {
	t.Helper()
	r := newRig(t, o)
	release := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	}) // runs before the fake's Close, which waits for handlers
	r.fake.Default = func(req providertest.ChatRequest) providertest.Reply {
		<-release
		return providertest.Reply{Content: "late: " + providertest.LastUser(req)}
	}
	r.srv.SetReady(true)
	return r, release
}

func TestChatTurnDeadlineIs504(t *testing.T) {
	r, _ := blockingRig(t, rigOptions{agent: func(o *agent.Options) { o.TurnTimeout = 100 * time.Millisecond }})
	resp, body := r.do(t, "POST", "/chat", `{"message":"hi"}`)
	if resp.StatusCode != 504 {
		t.Fatalf("status %d, want 504 (%v)", resp.StatusCode, body)
	}
	if msg := errorOf(t, body); !strings.Contains(msg, "turn_timeout_seconds") {
		t.Errorf("504 message %q does not name turn_timeout_seconds", msg)
	}
}

func TestChatOverCapacityIs503(t *testing.T) {
	r, release := blockingRig(t, rigOptions{agent: func(o *agent.Options) {
		o.MaxConcurrentTurns, o.MaxQueuedTurns = 1, 0
	}})
	first := make(chan int, 1)
	go func() { // no t.Fatal off the test goroutine: report the status only
		req := httptest.NewRequest("POST", "/chat", strings.NewReader(`{"message":"one","session_key":"a"}`))
		req.RemoteAddr, req.Host = "127.0.0.1:40001", "127.0.0.1:8080"
		req.Header.Set("Content-Type", "application/json")
		rec := httptest.NewRecorder()
		r.srv.ServeHTTP(rec, req)
		first <- rec.Code
	}()
	deadline := time.Now().Add(5 * time.Second)
	for r.loop.Stats().Running == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the first turn never started")
		}
		time.Sleep(time.Millisecond)
	}
	resp, body := r.do(t, "POST", "/chat", `{"message":"two","session_key":"b"}`)
	if resp.StatusCode != 503 || !strings.Contains(errorOf(t, body), "too many turns") {
		t.Errorf("second turn = %d %v, want 503 too many turns", resp.StatusCode, body)
	}
	close(release)
	if code := <-first; code != 200 {
		t.Errorf("first turn = %d, want 200", code)
	}
}

func TestChatError(t *testing.T) {
	tests := []struct {
		name   string
		err    error
		status int
		substr string
	}{
		{"empty", fmt.Errorf("wrapped: %w", agent.ErrEmpty), 400, `"message" is empty`},
		{"no provider", fmt.Errorf("%w: set providers.openrouter.api_key", provider.ErrNoProvider), 503, "set providers.openrouter.api_key; or connect one with the web page's setup form"},
		{"busy", agent.ErrBusy, 503, "too many turns"},
		{"stopped", agent.ErrStopped, 503, "shutting down"},
		{"timeout", agent.ErrTimeout, 504, "deadline"},
		{"upstream", fmt.Errorf("turn: %w", &provider.Error{Kind: provider.KindRateLimit, Provider: "openrouter", Status: 429, Retries: 3}), 502, "rate limited"},
		{"unknown model", &provider.Error{Kind: provider.KindModel, Provider: "openrouter", Model: "gpt-4o", Status: 400}, 502, "vendor prefix"},
		{"client went away", context.Canceled, 499, "canceled"},
		{"anything else", errors.New("store: disk full"), 500, "disk full"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			status, msg := chatError(tt.err)
			if status != tt.status || !strings.Contains(msg, tt.substr) {
				t.Errorf("chatError = %d %q, want %d with %q", status, msg, tt.status, tt.substr)
			}
		})
	}
}

func TestCommandOutput(t *testing.T) {
	tests := []struct {
		name    string
		fn      func(context.Context) (string, error)
		output  string
		wantErr string
	}{
		{"success", func(context.Context) (string, error) { return "● perch.service - Perch\n   Active: active", nil }, "● perch.service - Perch\n   Active: active", ""},
		{"failure drops partial output", func(context.Context) (string, error) {
			return "half", errors.New("systemd: unit perch.service not found")
		}, "", "unit perch.service not found"},
		{"not wired", nil, "", "not available"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, rigOptions{deps: func(d *Deps) { d.ServiceStatus, d.Logs = tt.fn, tt.fn }})
			for _, path := range []string{"/admin/service", "/admin/logs"} {
				resp, body := r.do(t, "GET", path, "")
				if resp.StatusCode != 200 {
					t.Fatalf("%s = %d, want 200 even on failure", path, resp.StatusCode)
				}
				out, ok := body["output"].(string)
				if !ok || out != tt.output {
					t.Errorf("%s output = %#v, want %q", path, body["output"], tt.output)
				}
				e, hasErr := body["error"].(string)
				if tt.wantErr == "" && hasErr {
					t.Errorf("%s has error %q on success", path, e)
				}
				if tt.wantErr != "" && !strings.Contains(e, tt.wantErr) {
					t.Errorf("%s error = %q, want %q", path, e, tt.wantErr)
				}
			}
		})
	}
}

// The command gets a deadline, so a hung systemctl cannot hold the request.
func TestCommandOutputHasDeadline(t *testing.T) {
	var had bool
	r := newRig(t, rigOptions{deps: func(d *Deps) {
		d.ServiceStatus = func(ctx context.Context) (string, error) { _, had = ctx.Deadline(); return "", nil }
	}})
	r.do(t, "GET", "/admin/service", "")
	if !had {
		t.Error("the service status function ran without a deadline")
	}
}

func TestAdminStatus(t *testing.T) {
	r := newRig(t, rigOptions{deps: func(d *Deps) {
		d.StatusExtra = func(_ context.Context, into map[string]any) { into["sensors"] = []string{"room"} }
	}})
	r.srv.SetReady(true)
	resp, body := r.do(t, "GET", "/admin/status", "")
	if resp.StatusCode != 200 {
		t.Fatalf("/admin/status = %d %v", resp.StatusCode, body)
	}
	for _, k := range []string{"uptime", "ready", "version", "active_sessions", "queue_depth", "memory_mb", "goroutines", "provider", "model", "sessions", "tokens", "database_bytes", "sensors"} {
		if _, ok := body[k]; !ok {
			t.Errorf("/admin/status lacks %q: %v", k, body)
		}
	}
	if body["ready"] != true || body["provider"] != "openrouter" {
		t.Errorf("ready = %v, provider = %v", body["ready"], body["provider"])
	}
	if g, _ := body["goroutines"].(float64); g < 1 {
		t.Errorf("goroutines = %v", body["goroutines"])
	}
}

func TestAdminStatusWithoutProvider(t *testing.T) {
	r := newRig(t, rigOptions{noProvider: true})
	_, body := r.do(t, "GET", "/admin/status", "")
	if e, _ := body["provider_error"].(string); !strings.Contains(e, "providers.openrouter.api_key") {
		t.Errorf("provider_error = %v, want the reason naming the key", body["provider_error"])
	}
}

func TestChecksRun(t *testing.T) {
	c := NewChecks()
	c.Register("a", func(context.Context) (bool, string) { return true, "" })
	c.Register("b", func(context.Context) (bool, string) { return false, "first" })
	c.Register("b", func(context.Context) (bool, string) { return true, "replaced" })
	res, ok := c.Run(context.Background())
	if !ok || len(res) != 2 || res["b"].Message != "replaced" {
		t.Errorf("Run = %v %v, want both ok with b replaced", res, ok)
	}
	c.Register("c", func(context.Context) (bool, string) { return false, "down" })
	res, ok = c.Run(context.Background())
	if ok || res["c"].Status != "fail" || res["a"].Status != "ok" {
		t.Errorf("Run = %v %v, want c failing and the whole not ok", res, ok)
	}
}
