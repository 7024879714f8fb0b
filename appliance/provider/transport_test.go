package provider

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/provider/providertest"
)

// writeCounter counts the writes made on a connection.
type writeCounter struct {
	net.Conn
	writes *atomic.Int32
}

func (c writeCounter) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

// TestChatRequestIsOneWrite: a chat request of a typical size (the system
// prompt and the tool definitions, a short history) leaves in one write, not
// headers and the first 4 KiB first and the rest after, which woke the
// server twice per call.
func TestChatRequestIsOneWrite(t *testing.T) {
	fake := providertest.New()
	defer fake.Close()
	cl := newTestClient(t, fake, nil)
	tr := cl.tr.client.Transport.(*http.Transport)
	var writes atomic.Int32
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return writeCounter{c, &writes}, nil
	}
	system := strings.Repeat("You are Perch, an agent on a small board. ", 500) // 21 KB
	for i := range 3 {
		writes.Store(0)
		if _, err := cl.Chat(context.Background(), Request{System: system, Messages: userMsg("hello")}); err != nil {
			t.Fatal(err)
		}
		if n := writes.Load(); n != 1 {
			t.Fatalf("call %d: the request took %d writes, want 1", i, n)
		}
	}
	if got := len(fake.Requests()[2].Body.Messages); got != 2 {
		t.Fatalf("the fake read %d messages, want 2", got)
	}
}

// TestPooledBuffersDoNotLeak: request and response buffers are reused
// between calls; what a call returned (its content, tool calls, its error
// text) must not change when later calls reuse them.
func TestPooledBuffersDoNotLeak(t *testing.T) {
	fake := providertest.New()
	defer fake.Close()
	cl := newTestClient(t, fake, func(c *config.Config) { c.Providers.OpenRouter.MaxRetries = 0 })
	fake.Enqueue(providertest.Reply{Content: "first answer", ToolCalls: []providertest.ToolCall{{ID: "c1", Name: "read_file", Args: `{"path":"a.txt"}`}}},
		providertest.Reply{Status: 502, ErrorBody: "<html>first bad gateway</html>"})
	first, err := cl.Chat(context.Background(), Request{System: "s", Messages: userMsg("one")})
	if err != nil {
		t.Fatal(err)
	}
	_, firstErr := cl.Chat(context.Background(), Request{Messages: userMsg("two")})
	if firstErr == nil {
		t.Fatal("the 502 was not an error")
	}
	errText := firstErr.Error()
	for i := range 20 {
		fake.Enqueue(providertest.Reply{Content: strings.Repeat("later answer overwriting the buffer ", 50+i),
			ToolCalls: []providertest.ToolCall{{ID: "zz", Name: "write_file", Args: `{"path":"zzzzzzzz"}`}}},
			providertest.Reply{Status: 502, ErrorBody: strings.Repeat("<html>later error</html>", 20)})
		cl.Chat(context.Background(), Request{System: strings.Repeat("x", 5000), Messages: userMsg("later")})
		cl.Chat(context.Background(), Request{Messages: userMsg("later")})
	}
	if first.Content != "first answer" || len(first.ToolCalls) != 1 || first.ToolCalls[0].ID != "c1" ||
		first.ToolCalls[0].Name != "read_file" || first.ToolCalls[0].Arguments != `{"path":"a.txt"}` {
		t.Fatalf("the first reply changed: %+v", first)
	}
	if firstErr.Error() != errText || !strings.Contains(errText, "first bad gateway") {
		t.Fatalf("the first error changed: %q, was %q", firstErr, errText)
	}
	if got := providertest.LastUser(fake.Requests()[0].Body); got != "one" {
		t.Fatalf("the fake read %q", got)
	}
}

// TestLongRequestCopiesThroughPool: a request larger than the write buffer
// (a long history) arrives whole, and its tail is copied through the pooled
// buffer, not a fresh 32 KiB one per call.
func TestLongRequestCopiesThroughPool(t *testing.T) {
	reply := []byte(`{"choices":[{"message":{"role":"assistant","content":"ok"},"finish_reason":"stop"}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	var got atomic.Int64
	var last atomic.Value
	copyBuf := make([]byte, 8<<10) // calls are one at a time; the server must not allocate per call either
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := sha256.New()
		n, _ := io.CopyBuffer(h, r.Body, copyBuf)
		got.Store(n)
		last.Store(hex.EncodeToString(h.Sum(nil)))
		w.Header().Set("Content-Type", "application/json")
		w.Write(reply)
	}))
	defer srv.Close()
	cl := clientAt(t, srv.URL, nil)
	hist := history(200, strings.Repeat("a longer message of a real conversation. ", 12))
	req := Request{System: "s", History: hist, Messages: userMsg("now")}
	temp := 0.7
	want := encodeChat(nil, chatBody{model: "openai/gpt-4o-mini", maxTokens: config.Default().Agents.Defaults.MaxTokens, temperature: &temp}, req)
	if len(want) < 3*requestBuffer {
		t.Fatalf("body of %d bytes does not test the tail", len(want))
	}
	cl.temperature = temp
	call := func() {
		if _, err := cl.Chat(context.Background(), req); err != nil {
			t.Fatal(err)
		}
	}
	call()
	sum := sha256.Sum256(want)
	if got.Load() != int64(len(want)) || last.Load() != hex.EncodeToString(sum[:]) {
		t.Fatalf("the server read %d bytes (want %d) or other bytes", got.Load(), len(want))
	}
	const calls = 50
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range calls {
		call()
	}
	runtime.ReadMemStats(&after)
	// A call allocates about 11 KiB (request, headers, response); a fresh
	// copy buffer alone was 32 KiB. The race detector makes sync.Pool drop
	// items at random, so the bound holds only without it.
	if per := (after.TotalAlloc - before.TotalAlloc) / calls; per > 24<<10 && !raceEnabled {
		t.Fatalf("%d bytes allocated per call", per)
	}
}
