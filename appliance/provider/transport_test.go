package provider

import (
	"context"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

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
