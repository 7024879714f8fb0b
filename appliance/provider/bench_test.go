package provider

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/perchhq/perch/appliance/chat"
)

// BenchmarkChatCall is one provider call with a full 200-message history
// and 20 tool definitions against an instant loopback server: the
// provider's share of a turn.
func BenchmarkChatCall(b *testing.B) {
	reply := []byte(`{"id":"x","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		w.Write(reply)
	}))
	defer srv.Close()
	cl := clientAt(b, srv.URL, nil)
	hist := history(200, "hello, how are you today? fine thanks")
	tools := make([]chat.ToolDef, 20)
	for i := range tools {
		tools[i] = chat.ToolDef{Name: "tool" + string(rune('a'+i)),
			Description: strings.Repeat("does things. ", 15),
			Parameters:  json.RawMessage(`{"type":"object","properties":{"path":{"type":"string","description":"a path in the workspace"},"content":{"type":"string"}},"required":["path"]}`)}
	}
	toolsJSON, _ := json.Marshal(tools)
	req := Request{System: strings.Repeat("You are Perch. ", 100), History: hist, Messages: hist[:1], Tools: tools, ToolsJSON: toolsJSON}
	// encoded: every call encodes the whole history; kept: the history's
	// encoding is kept between calls, as for a stored session.
	for _, key := range []string{"", "bench:1"} {
		name := "encoded"
		if key != "" {
			name = "kept"
		}
		b.Run(name, func(b *testing.B) {
			req.HistoryKey = key
			for b.Loop() {
				if _, err := cl.Chat(context.Background(), req); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkEncodeHistory is the encoding of a 200-message history, whole
// and with its encoding kept from the last call (one message changed).
func BenchmarkEncodeHistory(b *testing.B) {
	hist := make([]chat.Message, 1200)
	for i := range hist {
		hist[i] = chat.Message{Role: []string{"user", "assistant"}[i%2], Content: "hello, how are you today? fine thanks"}
	}
	wc := newWireCache()
	buf := make([]byte, 0, 64<<10)
	for _, key := range []string{"", "k"} {
		name := "encoded"
		if key != "" {
			name = "kept"
		}
		b.Run(name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				// The window slides by one message a call, as a session's
				// does at its history limit.
				r := Request{History: hist[i%1000 : i%1000+200], HistoryKey: key}
				buf = encodeChatWith(buf[:0], chatBody{model: "m"}, r, wc)
				i++
			}
		})
	}
}
