package provider

import (
	"context"
	"net"
	"net/http"
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
