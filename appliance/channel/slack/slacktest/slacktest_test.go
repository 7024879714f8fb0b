package slacktest

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
)

func call(t *testing.T, s *Server, method, token string, args url.Values) (*http.Response, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest("POST", s.APIBase()+method, strings.NewReader(args.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var m map[string]any
	raw, _ := io.ReadAll(resp.Body)
	json.Unmarshal(raw, &m)
	return resp, m
}

func TestTokensChecked(t *testing.T) {
	s := New()
	defer s.Close()
	if _, m := call(t, s, "auth.test", s.BotToken, nil); m["ok"] != true || m["user_id"] != s.BotUserID {
		t.Errorf("auth.test with the bot token: %v", m)
	}
	if _, m := call(t, s, "auth.test", "xoxb-wrong", nil); m["ok"] != false || m["error"] != "invalid_auth" {
		t.Errorf("auth.test with a wrong token: %v", m)
	}
	if _, m := call(t, s, "apps.connections.open", s.BotToken, nil); m["error"] != "invalid_auth" {
		t.Errorf("apps.connections.open with the bot token: %v", m)
	}
}

func TestRateLimitAnswersLikeSlack(t *testing.T) {
	s := New()
	defer s.Close()
	s.RateLimit(2)
	resp, m := call(t, s, "chat.postMessage", s.BotToken, url.Values{"channel": {"C1"}, "text": {"hi"}})
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "2" || m["error"] != "ratelimited" {
		t.Errorf("429 answer: %d %q %v", resp.StatusCode, resp.Header.Get("Retry-After"), m)
	}
	if _, m := call(t, s, "chat.postMessage", s.BotToken, url.Values{"channel": {"C1"}, "text": {"hi"}}); m["ok"] != true {
		t.Errorf("after the limit: %v", m)
	}
	if got := s.Posted(); len(got) != 1 || got[0].Text != "hi" || !got[0].Mrkdwn {
		t.Errorf("posted %v", got)
	}
}

// TestUnackedEnvelopeRedelivered: an envelope not acknowledged in time is
// delivered again with retry_attempt 1 and the same event_id; an ack ends it.
func TestUnackedEnvelopeRedelivered(t *testing.T) {
	s := New()
	defer s.Close()
	s.SetAckTimeout(100 * time.Millisecond)
	_, m := call(t, s, "apps.connections.open", s.AppToken, nil)
	ws, _, err := websocket.DefaultDialer.DialContext(context.Background(), m["url"].(string), http.Header{"Origin": {"https://api.slack.com"}})
	if err != nil {
		t.Fatal(err)
	}
	defer ws.Close()
	var hello map[string]any
	if ws.ReadJSON(&hello); hello["type"] != "hello" {
		t.Fatalf("first frame %v, want hello", hello)
	}
	id := s.PostMessage(Message{Channel: "D1", ChannelType: "im", User: "U1", Text: "hi"})
	type env struct {
		EnvelopeID   string `json:"envelope_id"`
		Type         string `json:"type"`
		RetryAttempt int    `json:"retry_attempt"`
		Payload      struct {
			EventID string `json:"event_id"`
			Event   struct{ TS string }
		} `json:"payload"`
	}
	var first, second env
	ws.ReadJSON(&first)
	ws.ReadJSON(&second)
	if first.Type != "events_api" || first.Payload.Event.TS != id || second.RetryAttempt != 1 || second.Payload.EventID != first.Payload.EventID || second.EnvelopeID == first.EnvelopeID {
		t.Fatalf("first %+v, second %+v", first, second)
	}
	ws.WriteJSON(map[string]string{"envelope_id": second.EnvelopeID})
	deadline := time.Now().Add(2 * time.Second)
	for s.Unacked() != 0 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if s.Unacked() != 0 || s.Stats().Origins[0] != "https://api.slack.com" {
		t.Errorf("unacked %d, origins %v", s.Unacked(), s.Stats().Origins)
	}
}
