package linetest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

func post(t *testing.T, s *Server, path, retryKey string, body any) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest(http.MethodPost, s.Base()+path, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+s.Token)
	req.Header.Set("Content-Type", "application/json")
	if retryKey != "" {
		req.Header.Set("X-Line-Retry-Key", retryKey)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	json.NewDecoder(resp.Body).Decode(&out)
	return resp.StatusCode, out
}

func text(s string) []map[string]string { return []map[string]string{{"type": "text", "text": s}} }

func TestReplyTokensAreSingleUseAndExpire(t *testing.T) {
	s := New("tok", "sec")
	defer s.Close()
	d := s.NewEvent(Event{UserID: "U1", Text: "hi"})
	if code, out := post(t, s, "/v2/bot/message/reply", "", map[string]any{"replyToken": d.ReplyToken, "messages": text("a")}); code != 200 {
		t.Fatalf("reply: %d %v", code, out)
	}
	if code, out := post(t, s, "/v2/bot/message/reply", "", map[string]any{"replyToken": d.ReplyToken, "messages": text("b")}); code != 400 || out["message"] != "Invalid reply token" {
		t.Errorf("second use: %d %v", code, out)
	}
	s.SetReplyTTL(time.Millisecond)
	d2 := s.NewEvent(Event{UserID: "U1", Text: "hi"})
	time.Sleep(5 * time.Millisecond)
	if code, _ := post(t, s, "/v2/bot/message/reply", "", map[string]any{"replyToken": d2.ReplyToken, "messages": text("c")}); code != 400 {
		t.Errorf("expired token accepted: %d", code)
	}
}

func TestPushRetryKeyAndLimits(t *testing.T) {
	s := New("tok", "sec")
	defer s.Close()
	body := map[string]any{"to": "U1", "messages": text("a")}
	if code, _ := post(t, s, "/v2/bot/message/push", "k1", body); code != 200 {
		t.Fatal(code)
	}
	if code, _ := post(t, s, "/v2/bot/message/push", "k1", body); code != 409 {
		t.Errorf("repeated retry key: %d, want 409", code)
	}
	if s.Pushes() != 1 {
		t.Errorf("pushes %d", s.Pushes())
	}
	six := append(text("1"), text("2")[0], text("3")[0], text("4")[0], text("5")[0], text("6")[0])
	if code, _ := post(t, s, "/v2/bot/message/push", "", map[string]any{"to": "U1", "messages": six}); code != 400 {
		t.Errorf("six messages accepted: %d", code)
	}
	if code, out := post(t, s, "/v2/bot/message/push", "", map[string]any{"to": "U1", "messages": text(strings.Repeat("x", TextLimit+1))}); code != 400 || !strings.Contains(toJSON(out), "messages[0].text") {
		t.Errorf("overlong text: %d %v", code, out)
	}
}

func TestDeliverSigns(t *testing.T) {
	s := New("tok", "sec")
	defer s.Close()
	var got string
	var gotBody []byte
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Header.Get("X-Line-Signature")
		gotBody = make([]byte, r.ContentLength)
		r.Body.Read(gotBody)
	})
	ts := httptest.NewServer(h)
	defer ts.Close()
	if code, err := s.Deliver(ts.URL, s.NewEvent(Event{UserID: "U1", Text: "x"})); err != nil || code != 200 {
		t.Fatal(code, err)
	}
	if got != Signature("sec", gotBody) {
		t.Errorf("signature %q does not match the body", got)
	}
}

func toJSON(v any) string { b, _ := json.Marshal(v); return string(b) }

func TestStalledReplyIsDeliveredAndItsTokenUsed(t *testing.T) {
	s := New("tok", "sec")
	defer s.Close()
	s.StallNext("reply", time.Minute)
	d := s.NewEvent(Event{UserID: "U1", Text: "hi"})
	b, _ := json.Marshal(map[string]any{"replyToken": d.ReplyToken, "messages": text("a")})
	req, _ := http.NewRequest(http.MethodPost, s.Base()+"/v2/bot/message/reply", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+s.Token)
	if _, err := (&http.Client{Timeout: 200 * time.Millisecond}).Do(req); err == nil {
		t.Fatal("a stalled reply was answered")
	}
	if sent := s.Sent(); len(sent) != 1 || sent[0].Text != "a" {
		t.Errorf("sent %+v; the stalled reply should be delivered", sent)
	}
	if code, out := post(t, s, "/v2/bot/message/reply", "", map[string]any{"replyToken": d.ReplyToken, "messages": text("a")}); code != 400 || out["message"] != "Invalid reply token" {
		t.Errorf("the retry: %d %v; want the token refused", code, out)
	}
}
