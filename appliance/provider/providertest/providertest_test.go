package providertest

import (
	"bytes"
	"encoding/json"
	"net/http"
	"testing"
)

// TestScriptThenEcho: scripted replies come first, in order, then the echo
// default; every request is recorded.
func TestScriptThenEcho(t *testing.T) {
	s := New()
	defer s.Close()
	s.Enqueue(Reply{ToolCalls: []ToolCall{{Name: "read_file", Args: `{"path":"a"}`}}}, Reply{Status: 429, RetryAfter: "1"})
	post := func() (*http.Response, map[string]any) {
		body, _ := json.Marshal(map[string]any{"model": "m", "messages": []any{map[string]any{"role": "user", "content": "hi"}}})
		resp, err := http.Post(s.Base()+"/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var m map[string]any
		json.NewDecoder(resp.Body).Decode(&m)
		return resp, m
	}
	_, m := post()
	msg := m["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	if msg["tool_calls"] == nil {
		t.Fatalf("first reply %v", m)
	}
	resp, _ := post()
	if resp.StatusCode != 429 || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("second reply %d", resp.StatusCode)
	}
	_, m = post()
	msg = m["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
	if msg["content"] != "echo: hi" || s.Calls() != 3 || len(s.Requests()) != 3 || s.Pending() != 0 {
		t.Fatalf("third reply %v calls %d", m, s.Calls())
	}
}
