package discordtest

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

func dial(t *testing.T, url string) *websocket.Conn {
	t.Helper()
	ws, _, err := websocket.DefaultDialer.Dial(url+"/?v=10&encoding=json", nil)
	if err != nil {
		t.Fatal(err)
	}
	var f frame
	if ws.ReadJSON(&f); f.Op != opHello {
		t.Fatalf("first frame op %d, want Hello", f.Op)
	}
	return ws
}

func send(t *testing.T, ws *websocket.Conn, op int, d any) {
	t.Helper()
	raw, _ := json.Marshal(d)
	if err := ws.WriteJSON(frame{Op: op, D: raw}); err != nil {
		t.Fatal(err)
	}
}

func read(t *testing.T, ws *websocket.Conn) frame {
	t.Helper()
	var f frame
	if err := ws.ReadJSON(&f); err != nil {
		t.Fatal(err)
	}
	return f
}

// TestResumeReplaysMissedEvents: identify, an event, a drop, an event
// while away, then a resume at resume_gateway_url: the missed event is
// replayed, then RESUMED.
func TestResumeReplaysMissedEvents(t *testing.T) {
	s := New()
	defer s.Close()
	ws := dial(t, s.GatewayURL())
	send(t, ws, opIdentify, map[string]any{"token": s.Token, "intents": IntentMessageContent})
	ready := read(t, ws)
	var r struct {
		SessionID string `json:"session_id"`
		ResumeURL string `json:"resume_gateway_url"`
	}
	json.Unmarshal(ready.D, &r)
	if *ready.T != "READY" || r.SessionID == "" || r.ResumeURL != s.ResumeURL() {
		t.Fatalf("READY %s", ready.D)
	}
	s.Post(Message{ChannelID: "1", Content: "one"})
	one := read(t, ws)
	ws.UnderlyingConn().Close()
	s.Post(Message{ChannelID: "1", Content: "two"})

	ws2 := dial(t, r.ResumeURL)
	defer ws2.Close()
	send(t, ws2, opResume, map[string]any{"token": s.Token, "session_id": r.SessionID, "seq": *one.S})
	two := read(t, ws2)
	var m Message
	json.Unmarshal(two.D, &m)
	if *two.T != "MESSAGE_CREATE" || m.Content != "two" || *two.S != *one.S+1 {
		t.Fatalf("replayed %s %s", *two.T, two.D)
	}
	if f := read(t, ws2); *f.T != "RESUMED" {
		t.Fatalf("then %s", *f.T)
	}
	if st := s.Stats(); st.Resumes != 1 || st.ResumesAtResumeURL != 1 {
		t.Errorf("stats %+v", st)
	}
}

func TestWrongTokenClosed4004(t *testing.T) {
	s := New()
	defer s.Close()
	ws := dial(t, s.GatewayURL())
	send(t, ws, opIdentify, map[string]any{"token": "nope"})
	_, _, err := ws.ReadMessage()
	if ce, ok := err.(*websocket.CloseError); !ok || ce.Code != CloseAuthenticationFailed {
		t.Fatalf("read after a wrong token: %v", err)
	}
}

func TestRateLimitAnswersLikeDiscord(t *testing.T) {
	s := New()
	defer s.Close()
	s.RateLimit("", 1500*time.Millisecond)
	req, _ := http.NewRequest("POST", s.APIBase()+"/channels/5/messages", strings.NewReader(`{"content":"hi"}`))
	req.Header.Set("Authorization", "Bot "+s.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var body struct {
		RetryAfter float64 `json:"retry_after"`
		Global     bool    `json:"global"`
	}
	json.Unmarshal(raw, &body)
	if resp.StatusCode != 429 || body.RetryAfter != 1.5 || resp.Header.Get("Retry-After") != "2" || resp.Header.Get("X-RateLimit-Scope") != "user" {
		t.Errorf("429: %d %s %v", resp.StatusCode, raw, resp.Header)
	}
}
