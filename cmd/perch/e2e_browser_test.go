package main

import (
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
)

// send makes one raw request to g: host "" keeps the URL's; header holds
// name/value pairs.
func send(t *testing.T, g *Gateway, method, path, host, body string, header ...string) (int, string) {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, g.Base+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if host != "" {
		req.Host = host
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var e struct{ Error string }
	json.Unmarshal(raw, &e)
	if resp.StatusCode >= 400 && e.Error == "" {
		t.Errorf("%s %s: %d without a JSON error: %s", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode, e.Error
}

// TestBrowsersCannotDriveTheGateway: with no token (loopback clients are
// trusted), what a page of another site can make a browser send — a
// text/plain or cross-origin POST, or any request under a host name it
// re-points at the board (DNS rebinding) — is refused before it acts, while
// clients that are not browsers, and the board's own names, still work.
func TestBrowsersCannotDriveTheGateway(t *testing.T) {
	h := NewHome(t, func(c map[string]any) {
		c["gateway"] = map[string]any{"host": "127.0.0.1", "port": 0, "allowed_hosts": []string{"perch.example.net"}}
	})
	g := h.Start()
	port := g.Base[strings.LastIndexByte(g.Base, ':')+1:]
	chat := `{"message":"run exec rm -rf ~","session_key":"web:evil"}`

	refused := []struct {
		name, method, path, host, body string
		header                         []string
		status                         int
		says                           string
	}{
		{"text/plain POST (a cross-site form)", "POST", "/chat", "", chat, []string{"Content-Type", "text/plain"}, 415, "Content-Type: application/json"},
		{"form-encoded POST", "POST", "/chat", "", "message=hi", []string{"Content-Type", "application/x-www-form-urlencoded"}, 415, "Content-Type: application/json"},
		{"cross-origin JSON POST", "POST", "/chat", "", chat, []string{"Content-Type", "application/json", "Origin", "http://evil.example"}, 403, "cross-origin"},
		{"cross-site fetch", "POST", "/chat", "", chat, []string{"Content-Type", "application/json", "Sec-Fetch-Site", "cross-site"}, 403, "cross-origin"},
		{"text/plain setup", "POST", "/setup", "", `{"provider":"openai","model":"x","api_key":"sk-evil"}`, []string{"Content-Type", "text/plain"}, 415, "Content-Type: application/json"},
		{"foreign Host on /admin", "GET", "/admin/status", "evil.example:" + port, "", nil, 403, "gateway.allowed_hosts"},
		{"foreign Host on /chat", "POST", "/chat", "evil.example:" + port, chat, []string{"Content-Type", "application/json"}, 403, "gateway.allowed_hosts"},
		{"foreign Host on the page", "GET", "/", "evil.example:" + port, "", nil, 403, "gateway.allowed_hosts"},
		{"foreign Host on /ready", "GET", "/ready", "evil.example", "", nil, 403, "gateway.allowed_hosts"},
	}
	for _, tt := range refused {
		t.Run(tt.name, func(t *testing.T) {
			status, msg := send(t, g, tt.method, tt.path, tt.host, tt.body, tt.header...)
			if status != tt.status || !strings.Contains(msg, tt.says) {
				t.Errorf("%d %q, want %d saying %q", status, msg, tt.status, tt.says)
			}
		})
	}
	if n := h.Fake.Calls(); n != 0 {
		t.Fatalf("refused requests reached the provider %d times", n)
	}

	hostname, _ := os.Hostname()
	boardIP := "127.0.0.2" // a loopback address when the machine has no other
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
				boardIP = n.IP.String()
				break
			}
		}
	}
	answered := []struct {
		name, method, path, host, body string
		header                         []string
	}{
		{"curl-style JSON POST", "POST", "/chat", "", chat, []string{"Content-Type", "application/json"}},
		{"the page's own POST", "POST", "/chat", "", chat, []string{"Content-Type", "application/json", "Origin", g.Base, "Sec-Fetch-Site", "same-origin"}},
		{"localhost", "GET", "/admin/status", "localhost:" + port, "", nil},
		{"an allowed name", "GET", "/admin/status", "perch.example.net", "", nil},
		{"the hostname", "GET", "/admin/status", hostname + ":" + port, "", nil},
		{"the mDNS name", "GET", "/admin/status", strings.ToLower(strings.Split(hostname, ".")[0]) + ".local:" + port, "", nil},
		{"the board's address", "GET", "/admin/status", boardIP + ":" + port, "", nil},
	}
	for _, tt := range answered {
		t.Run(tt.name, func(t *testing.T) {
			if status, msg := send(t, g, tt.method, tt.path, tt.host, tt.body, tt.header...); status != 200 {
				t.Errorf("%d %q, want 200", status, msg)
			}
		})
	}
	if n := h.Fake.Calls(); n != 2 {
		t.Errorf("the provider got %d calls, want 2 (the two accepted chats)", n)
	}
}

// TestReadyShowsStrangersNothingPrivate: without the token, /ready says
// whether the board is ready and which checks pass, but no session key,
// chat id, path or model; with it, the details.
func TestReadyShowsStrangersNothingPrivate(t *testing.T) {
	h := NewHome(t, nil)
	g := h.Start()
	g.MustChat("telegram:55501234", "hello")
	status, raw := g.DoRaw("GET", "/ready", nil, false)
	if status != 200 {
		t.Fatalf("/ready without the token: %d %s", status, raw)
	}
	var public struct {
		Status string
		Checks map[string]struct{ Name, Status, Message string }
		Agent  any
	}
	if err := json.Unmarshal(raw, &public); err != nil {
		t.Fatal(err)
	}
	if public.Status != "ready" || public.Checks["store"].Status != "ok" || public.Checks["provider"].Name != "provider" {
		t.Errorf("status and checks are for everyone: %s", raw)
	}
	for _, private := range []string{"55501234", h.Dir, "workspace", "gpt-4o-mini", `"agent"`} {
		if strings.Contains(string(raw), private) {
			t.Errorf("/ready without the token shows %q: %s", private, raw)
		}
	}
	_, full := g.Do("GET", "/ready", nil)
	ag, _ := full["agent"].(map[string]any)
	if ag == nil || ag["model"] != "openai/gpt-4o-mini" || !strings.Contains(string(mustJSON(t, ag)), "telegram:55501234") {
		t.Errorf("/ready with the token lacks the details: %v", full)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
