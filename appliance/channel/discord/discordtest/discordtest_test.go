package discordtest

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
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

// TestChannelMessagesAnswersLikeDiscord: GET /channels/{id}/messages
// gives the messages after the id asked for, at most limit of them, the
// newest first and without the server's id, as Discord's REST does; ids
// are snowflakes of their time.
func TestChannelMessagesAnswersLikeDiscord(t *testing.T) {
	s := New()
	defer s.Close()
	before := time.Now()
	first := s.Post(Message{ChannelID: "7", GuildID: "9", Content: "one"})
	s.Post(Message{ChannelID: "7", GuildID: "9", Content: "two"})
	s.Post(Message{ChannelID: "7", GuildID: "9", Content: "three"})
	s.Post(Message{ChannelID: "8", Content: "elsewhere"})
	id, _ := strconv.ParseInt(first.ID, 10, 64)
	if at := time.UnixMilli(id>>22 + 1420070400000); at.Before(before.Add(-time.Millisecond)) || at.After(time.Now()) {
		t.Errorf("id %d says %v, not the moment it was posted", id, at)
	}
	get := func(query string) (int, []Message) {
		req, _ := http.NewRequest("GET", s.APIBase()+"/channels/7/messages?"+query, nil)
		req.Header.Set("Authorization", "Bot "+s.Token)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out []Message
		json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	code, got := get("after=" + first.ID + "&limit=1")
	if code != 200 || len(got) != 1 || got[0].Content != "two" || got[0].GuildID != "" {
		t.Errorf("after the first, limit 1: %d %+v", code, got)
	}
	if _, got = get("after=" + first.ID); len(got) != 2 || got[0].Content != "three" || got[1].Content != "two" {
		t.Errorf("after the first: %+v, want three then two", got)
	}
	if code, _ = get("limit=101"); code != 400 {
		t.Errorf("limit 101: %d, want 400", code)
	}
	if s.Stats().Fetches != 2 {
		t.Errorf("fetches %d, want 2 (the refused one not counted)", s.Stats().Fetches)
	}
}
