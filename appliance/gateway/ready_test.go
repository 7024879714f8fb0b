package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/perchhq/perch/appliance/bus"
)

func chatInbound(key, text string) bus.Inbound {
	return bus.Inbound{Channel: "telegram", ChatID: "424242", SessionKey: key, Text: text}
}

// readyAs asks /ready as a client at remote with the given Authorization
// header ("" for none) and returns the status and the raw body.
func readyAs(t testing.TB, s *Server, remote, auth string) (int, string) {
	t.Helper()
	req := httptest.NewRequest("GET", "/ready", nil)
	req.Host, req.RemoteAddr = "127.0.0.1:8080", remote
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	rec := httptest.NewRecorder()
	s.ServeHTTP(rec, req)
	return rec.Code, rec.Body.String()
}

// A stranger's /ready says whether the board is ready and which checks
// pass, with messages that name nothing private; the agent's details
// (model, workspace path, session keys with chat ids, subagent tasks) and
// the checks' full messages need the token, or loopback without one.
func TestReadyHidesDetailsFromStrangers(t *testing.T) {
	const (
		secretPath = "/var/lib/perch-secret-path/perch.db"
		chatID     = "telegram:424242"
		task       = "summarise the owner's medical letters"
	)
	tests := []struct {
		name   string
		server Options
		remote string
		auth   string
		full   bool
	}{
		{"token set, no token sent", Options{Token: "tok-0123456789abcdef01234567"}, "192.0.2.9:5000", "", false},
		{"token set, loopback without it", Options{Token: "tok-0123456789abcdef01234567"}, "127.0.0.1:5000", "", false},
		{"token set and sent", Options{Token: "tok-0123456789abcdef01234567"}, "192.0.2.9:5000", "Bearer tok-0123456789abcdef01234567", true},
		{"no token, LAN listener, LAN client", Options{Host: "0.0.0.0"}, "192.0.2.9:5000", "", false},
		{"no token, LAN listener, loopback client", Options{Host: "0.0.0.0"}, "127.0.0.1:5000", "", true},
		{"no token, loopback listener", Options{Host: "127.0.0.1"}, "127.0.0.1:5000", "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := newRig(t, rigOptions{server: tt.server})
			r.srv.SetReady(true)
			r.checks.Register("store", func(context.Context) (bool, string) { return true, "bbolt " + secretPath + " (12 KiB)" },
				PublicMessage(func(ok bool) string { return "the database answers" }))
			r.checks.Register("sandbox", func(context.Context) (bool, string) { return true, "landlock over " + r.ws })
			if _, err := r.loop.Process(context.Background(), chatInbound(chatID, "hi")); err != nil {
				t.Fatal(err)
			}
			if _, err := r.loop.Subagents().Run(context.Background(), task, "letters"); err != nil {
				t.Fatal(err)
			}

			status, body := readyAs(t, r.srv, tt.remote, tt.auth)
			if status != 200 {
				t.Fatalf("/ready = %d %s", status, body)
			}
			var m struct {
				Status string                 `json:"status"`
				Checks map[string]CheckResult `json:"checks"`
				Agent  *readyAgent            `json:"agent"`
			}
			if err := json.Unmarshal([]byte(body), &m); err != nil {
				t.Fatal(err)
			}
			if m.Status != "ready" || m.Checks["store"].Status != "ok" || m.Checks["sandbox"].Name != "sandbox" {
				t.Errorf("status and checks are for everyone: %s", body)
			}
			private := []string{secretPath, r.ws, chatID, "424242", task, "openai/gpt-4o-mini"}
			if tt.full {
				if m.Agent == nil || len(m.Agent.Sessions) != 1 || len(m.Agent.Subagents) != 1 || m.Agent.Workspace != r.ws {
					t.Errorf("the owner's /ready lacks the agent's details: %s", body)
				}
				if !strings.Contains(m.Checks["store"].Message, secretPath) {
					t.Errorf("the owner's store check lost its message: %q", m.Checks["store"].Message)
				}
				return
			}
			for _, p := range private {
				if strings.Contains(body, p) {
					t.Errorf("a stranger's /ready shows %q: %s", p, body)
				}
			}
			if m.Agent != nil {
				t.Errorf("a stranger's /ready has the agent object")
			}
			if got := m.Checks["store"].Message; got != "the database answers" {
				t.Errorf("store check shows %q to a stranger, want its public message", got)
			}
			if got := m.Checks["sandbox"].Message; got != "ok" {
				t.Errorf("a check without a public message shows %q to a stranger, want ok", got)
			}
		})
	}
}

// A failing check tells a stranger that it fails and where the reason is
// shown, not the reason.
func TestReadyFailingCheckForStrangers(t *testing.T) {
	r := newRig(t, rigOptions{server: Options{Token: "tok-0123456789abcdef01234567"}})
	r.srv.SetReady(true)
	r.checks.Register("channel:telegram", func(context.Context) (bool, string) {
		return false, "telegram rejected bot 123456:ABC; check channels.telegram.token"
	})
	status, body := readyAs(t, r.srv, "192.0.2.9:5000", "")
	if status != 503 || strings.Contains(body, "123456") {
		t.Fatalf("/ready = %d %s", status, body)
	}
	var m struct{ Checks map[string]CheckResult }
	json.Unmarshal([]byte(body), &m)
	c := m.Checks["channel:telegram"]
	if c.Status != "fail" || !strings.Contains(c.Message, "gateway.api_token") {
		t.Errorf("failing check for a stranger = %+v, want fail saying the token shows why", c)
	}
	status, body = readyAs(t, r.srv, "192.0.2.9:5000", "Bearer tok-0123456789abcdef01234567")
	if status != 503 || !strings.Contains(body, "channels.telegram.token") {
		t.Errorf("the owner's /ready = %d %s, want the reason", status, body)
	}
}

// A wrong token on /ready is refused like anywhere else: /ready must not
// become a way to test tokens that the other routes rate-limit.
func TestReadyWrongTokenIs401(t *testing.T) {
	r := newRig(t, rigOptions{server: Options{Token: "tok-0123456789abcdef01234567"}})
	r.srv.SetReady(true)
	if status, body := readyAs(t, r.srv, "192.0.2.9:5000", "Bearer nope"); status != http.StatusUnauthorized {
		t.Errorf("/ready with a wrong token = %d %s, want 401", status, body)
	}
}

// /ready stays cheap however many sessions the store holds: a stranger's
// never lists them, and the owner's reuses the last listing while no turn
// ran, but sees a new session at once.
func TestReadyCostIsBounded(t *testing.T) {
	r := newRig(t, rigOptions{server: Options{Token: "tok-0123456789abcdef01234567"}})
	r.srv.SetReady(true)
	r.checks.Register("store", func(context.Context) (bool, string) { return true, "bbolt" })
	fillSessions(t, r.db, 1000)
	const owner = "Bearer tok-0123456789abcdef01234567"
	stranger := testing.AllocsPerRun(20, func() { readyAs(t, r.srv, "192.0.2.9:5000", "") })
	readyAs(t, r.srv, "192.0.2.9:5000", owner)
	again := testing.AllocsPerRun(20, func() { readyAs(t, r.srv, "192.0.2.9:5000", owner) })
	t.Logf("allocations per /ready at 1,000 sessions: stranger %.0f, owner (unchanged) %.0f", stranger, again)
	if stranger > 300 || again > 1500 {
		t.Errorf("/ready at 1,000 sessions allocates %.0f (stranger) and %.0f (owner, nothing changed); the session walk makes ~6,000", stranger, again)
	}
	if _, err := r.loop.Process(context.Background(), chatInbound("web:new-one", "hi")); err != nil {
		t.Fatal(err)
	}
	_, body := readyAs(t, r.srv, "192.0.2.9:5000", owner)
	if !strings.Contains(body, `"web:new-one"`) {
		t.Errorf("a session created after the last /ready is missing: %.300s", body)
	}
}
