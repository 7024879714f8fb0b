package provider

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/provider/providertest"
)

// connCounter counts the connections a test server accepted and closed.
type connCounter struct {
	opened, closed atomic.Int32
}

func (c *connCounter) track(_ net.Conn, s http.ConnState) {
	switch s {
	case http.StateNew:
		c.opened.Add(1)
	case http.StateClosed, http.StateHijacked:
		c.closed.Add(1)
	}
}

// newH1Server starts h with a connection counter.
func newH1Server(t *testing.T, h http.HandlerFunc) (*httptest.Server, *connCounter) {
	t.Helper()
	cc := &connCounter{}
	srv := httptest.NewUnstartedServer(h)
	srv.Config.ConnState = cc.track
	srv.Start()
	t.Cleanup(srv.Close)
	return srv, cc
}

// h1For is the h1 transport over the settings newHTTPClient gives the
// provider's client.
func h1For(t *testing.T) *h1Transport {
	t.Helper()
	hc, err := newHTTPClient("")
	if err != nil {
		t.Fatal(err)
	}
	tr := newH1Transport(hc.Transport.(*http.Transport))
	t.Cleanup(tr.CloseIdleConnections)
	return tr
}

// post sends body to u through tr and returns the response's body.
func post(ctx context.Context, tr http.RoundTripper, u, body string) (string, *http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u, strings.NewReader(body))
	if err != nil {
		return "", nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := tr.RoundTrip(req)
	if err != nil {
		return "", nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), resp, err
}

func echo(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	w.Write(append([]byte(r.Proto+" "), b...))
}

func TestH1ReusesOneConnection(t *testing.T) {
	srv, cc := newH1Server(t, echo)
	tr := h1For(t)
	for i := range 20 {
		body := strings.Repeat("x", i*1000)
		got, _, err := post(context.Background(), tr, srv.URL+"/chat/completions", body)
		if err != nil {
			t.Fatal(err)
		}
		if got != "HTTP/1.1 "+body {
			t.Fatalf("call %d: the server answered %.40q", i, got)
		}
	}
	if n := cc.opened.Load(); n != 1 {
		t.Fatalf("20 calls one after the other opened %d connections, want 1", n)
	}
}

// TestH1RetriesWhenTheServerClosedTheIdleConnection: a server may close a
// keep-alive connection while it is idle; the next call finds out when it
// reads, and is sent again on a new connection, body and all.
func TestH1RetriesWhenTheServerClosedTheIdleConnection(t *testing.T) {
	srv, cc := newH1Server(t, echo)
	tr := h1For(t)
	if _, _, err := post(context.Background(), tr, srv.URL, "first"); err != nil {
		t.Fatal(err)
	}
	srv.CloseClientConnections()
	for cc.closed.Load() < 1 {
		time.Sleep(time.Millisecond)
	}
	got, _, err := post(context.Background(), tr, srv.URL, "second, sent twice")
	if err != nil {
		t.Fatalf("the call after the server closed the idle connection failed: %v", err)
	}
	if got != "HTTP/1.1 second, sent twice" {
		t.Fatalf("the server answered %q", got)
	}
	if n := cc.opened.Load(); n != 2 {
		t.Fatalf("%d connections opened, want 2", n)
	}
}

// TestH1NoRetryOnANewConnection: a connection just dialled that fails is
// an answer, not a stale connection: it is not sent again.
func TestH1NoRetryOnANewConnection(t *testing.T) {
	var calls atomic.Int32
	srv, _ := newH1Server(t, func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		c, _, _ := w.(http.Hijacker).Hijack()
		c.Close()
	})
	tr := h1For(t)
	if _, _, err := post(context.Background(), tr, srv.URL, "x"); err == nil {
		t.Fatal("a connection closed without an answer was not an error")
	}
	if n := calls.Load(); n != 1 {
		t.Fatalf("the request reached the server %d times, want 1", n)
	}
}

func TestH1ChunkedResponse(t *testing.T) {
	srv, cc := newH1Server(t, func(w http.ResponseWriter, r *http.Request) {
		for i := range 5 {
			w.Write([]byte(strings.Repeat(string(rune('a'+i)), 3000)))
			w.(http.Flusher).Flush()
		}
	})
	tr := h1For(t)
	for range 3 {
		got, resp, err := post(context.Background(), tr, srv.URL, "x")
		if err != nil {
			t.Fatal(err)
		}
		if len(resp.TransferEncoding) != 1 || resp.TransferEncoding[0] != "chunked" {
			t.Fatalf("the response was not chunked: %v", resp.TransferEncoding)
		}
		if len(got) != 15000 || got[14999] != 'e' || got[0] != 'a' {
			t.Fatalf("read %d bytes of the chunked body", len(got))
		}
	}
	if n := cc.opened.Load(); n != 1 {
		t.Fatalf("%d connections for three chunked answers, want 1", n)
	}
}

// TestH1ConnectionCloseIsNotReused: a response that says Connection: close
// ends its connection; the next call dials.
func TestH1ConnectionCloseIsNotReused(t *testing.T) {
	srv, cc := newH1Server(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Connection", "close")
		w.Write([]byte("bye"))
	})
	tr := h1For(t)
	for range 3 {
		if got, _, err := post(context.Background(), tr, srv.URL, "x"); err != nil || got != "bye" {
			t.Fatalf("%q, %v", got, err)
		}
	}
	if n := cc.opened.Load(); n != 3 {
		t.Fatalf("%d connections, want 3", n)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.nIdle != 0 {
		t.Fatalf("%d closed connections kept idle", tr.nIdle)
	}
}

// TestH1BodyClosedEarlyDropsTheConnection: a body closed before its end
// leaves unread bytes on the connection, so it is not reused.
func TestH1BodyClosedEarlyDropsTheConnection(t *testing.T) {
	srv, cc := newH1Server(t, func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte(strings.Repeat("y", 100<<10)))
	})
	tr := h1For(t)
	for range 2 {
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		resp, err := tr.RoundTrip(req)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 10)
		if _, err := io.ReadFull(resp.Body, buf); err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if _, err := resp.Body.Read(buf); err == nil {
			t.Fatal("a read after Close succeeded")
		}
	}
	if n := cc.opened.Load(); n != 2 {
		t.Fatalf("%d connections, want 2: a half-read connection was reused", n)
	}
}

// TestH1Cancel: cancelling the context ends a call waiting for its
// response, and one reading its body, at once.
func TestH1Cancel(t *testing.T) {
	release := make(chan struct{})
	srv, _ := newH1Server(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/body" {
			w.Write([]byte("part"))
			w.(http.Flusher).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	tr := h1For(t)

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start := time.Now()
	_, _, err := post(ctx, tr, srv.URL+"/head", "x")
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled", err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("the call returned %v after the cancel", d)
	}

	ctx, cancel = context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, srv.URL+"/body", nil)
	resp, err := tr.RoundTrip(req)
	if err != nil {
		t.Fatal(err)
	}
	time.AfterFunc(50*time.Millisecond, cancel)
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Fatal("reading a body whose context was cancelled did not fail")
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.nIdle != 0 {
		t.Fatalf("a cancelled call's connection was kept (%d idle)", tr.nIdle)
	}
}

// TestH1DoneContextSendsNothing: a call whose context already ended (a
// turn whose deadline passed in a tool) is not sent on an idle connection:
// a provider may bill a request whose answer nobody reads.
func TestH1DoneContextSendsNothing(t *testing.T) {
	var got atomic.Int32
	srv, _ := newH1Server(t, func(w http.ResponseWriter, r *http.Request) {
		got.Add(1)
		echo(w, r)
	})
	tr := h1For(t)
	if _, _, err := post(context.Background(), tr, srv.URL+"/chat/completions", "warm"); err != nil {
		t.Fatal(err)
	}
	for _, end := range []func() context.Context{
		func() context.Context { ctx, cancel := context.WithCancel(context.Background()); cancel(); return ctx },
		func() context.Context {
			ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
			_ = cancel
			return ctx
		},
	} {
		ctx := end()
		if _, _, err := post(ctx, tr, srv.URL+"/chat/completions", "late"); !errors.Is(err, ctx.Err()) {
			t.Errorf("a call on an ended context: %v, want %v", err, ctx.Err())
		}
	}
	if n := got.Load(); n != 1 {
		t.Errorf("the server got %d requests, want only the first", n)
	}
}

func TestH1TLS(t *testing.T) {
	cc := &connCounter{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.TLS == nil || r.TLS.ServerName != "example.com" {
			http.Error(w, "no TLS or no SNI", 400)
			return
		}
		echo(w, r)
	}))
	srv.Config.ConnState = cc.track
	srv.EnableHTTP2 = true // offered: the client must still pick HTTP/1.1
	srv.StartTLS()
	defer srv.Close()
	tr := h1For(t)
	// The test server's certificate is for example.com; its client's
	// settings trust it. Production uses the system's roots (nil).
	tr.std.TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
	dial := tr.std.DialContext
	tr.std.DialContext = func(ctx context.Context, network, _ string) (net.Conn, error) {
		return dial(ctx, network, net.JoinHostPort("127.0.0.1", port))
	}
	for range 3 {
		got, resp, err := post(context.Background(), tr, "https://example.com:"+port+"/v1", "secret")
		if err != nil {
			t.Fatal(err)
		}
		if got != "HTTP/1.1 secret" || resp.StatusCode != 200 {
			t.Fatalf("%d %q", resp.StatusCode, got)
		}
	}
	if n := cc.opened.Load(); n != 1 {
		t.Fatalf("%d TLS connections, want 1", n)
	}

	// A certificate nobody vouches for is refused.
	tr2 := h1For(t)
	if _, _, err := post(context.Background(), tr2, srv.URL, "x"); err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("an untrusted certificate: err = %v", err)
	}
}

// TestH1ProxyGoesThroughNetHTTP: with a proxy set, calls go through
// net/http's transport, which speaks to proxies.
func TestH1ProxyGoesThroughNetHTTP(t *testing.T) {
	var proxied atomic.Int32
	proxy, _ := newH1Server(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.IsAbs() && r.URL.Host == "provider.invalid" {
			proxied.Add(1)
		}
		w.Write([]byte("via proxy"))
	})
	tr := h1For(t)
	pu, _ := url.Parse(proxy.URL)
	tr.std.Proxy = http.ProxyURL(pu)
	got, _, err := post(context.Background(), tr, "http://provider.invalid/v1/chat/completions", "x")
	if err != nil || got != "via proxy" || proxied.Load() != 1 {
		t.Fatalf("%q, %v, proxied %d", got, err, proxied.Load())
	}
	if tr.handles(httptest.NewRequest("GET", "http://provider.invalid/", nil)) {
		t.Fatal("h1 claims a request that has a proxy")
	}
}

// TestH1IdleLimitsAndTimeout: idle connections are bounded per host, and
// closed once idle longer than the idle timeout.
func TestH1IdleLimitsAndTimeout(t *testing.T) {
	hold := make(chan struct{})
	var arrived sync.WaitGroup
	srv, cc := newH1Server(t, func(w http.ResponseWriter, r *http.Request) {
		arrived.Done()
		<-hold
		w.Write([]byte("ok"))
	})
	tr := h1For(t)
	tr.std.MaxIdleConnsPerHost = 2
	tr.std.IdleConnTimeout = 100 * time.Millisecond
	const n = 5
	arrived.Add(n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if _, _, err := post(context.Background(), tr, srv.URL, "x"); err != nil {
				t.Error(err)
			}
		})
	}
	arrived.Wait() // five connections at once
	close(hold)
	wg.Wait()
	tr.mu.Lock()
	idle := tr.nIdle
	tr.mu.Unlock()
	if idle != 2 {
		t.Fatalf("%d idle connections, want the limit of 2", idle)
	}
	deadline := time.Now().Add(5 * time.Second)
	for cc.closed.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d connections closed 5 s after the idle timeout of 100 ms", cc.closed.Load(), n)
		}
		time.Sleep(10 * time.Millisecond)
	}
	tr.mu.Lock()
	defer tr.mu.Unlock()
	if tr.nIdle != 0 || len(tr.idle) != 0 || tr.sweep != nil {
		t.Fatalf("after the timeout: %d idle, %d hosts, sweep armed %v", tr.nIdle, len(tr.idle), tr.sweep != nil)
	}
}

// TestH1KeepIdleClosesTheOldest: after a burst of parallel calls, keepIdle
// leaves the most recently used idle connections open and closes the rest,
// and the calls after it reuse the kept ones.
func TestH1KeepIdleClosesTheOldest(t *testing.T) {
	hold := make(chan struct{})
	var arrived sync.WaitGroup
	srv, cc := newH1Server(t, func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("X-Burst") != "" {
			arrived.Done()
			<-hold
		}
		w.Write([]byte("ok"))
	})
	tr := h1For(t)
	const n = 5
	arrived.Add(n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("x"))
			req.Header.Set("X-Burst", "1")
			resp, err := tr.RoundTrip(req)
			if err != nil {
				t.Error(err)
				return
			}
			io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	arrived.Wait()
	close(hold)
	wg.Wait()
	tr.mu.Lock()
	var list []*h1Conn // one host: the test server
	for _, l := range tr.idle {
		list = l
	}
	newest := append([]*h1Conn(nil), list[len(list)-2:]...)
	tr.mu.Unlock()
	if len(list) != n {
		t.Fatalf("%d idle connections after the burst, want %d", len(list), n)
	}
	tr.keepIdle(2)
	tr.mu.Lock()
	var kept []*h1Conn
	for _, l := range tr.idle {
		kept = append(kept, l...)
	}
	idle := tr.nIdle
	tr.mu.Unlock()
	if idle != 2 || len(kept) != 2 || kept[0] != newest[0] || kept[1] != newest[1] {
		t.Fatalf("after keepIdle(2): %d idle (%d listed), the two most recent kept: %v", idle, len(kept), len(kept) == 2 && kept[0] == newest[0] && kept[1] == newest[1])
	}
	deadline := time.Now().Add(5 * time.Second)
	for cc.closed.Load() < n-2 {
		if time.Now().After(deadline) {
			t.Fatalf("the server saw %d of %d connections closed", cc.closed.Load(), n-2)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for range 2 {
		if _, _, err := post(context.Background(), tr, srv.URL, "x"); err != nil {
			t.Fatal(err)
		}
	}
	if got := cc.opened.Load(); got != n {
		t.Fatalf("%d connections opened, want %d: the kept ones were not reused", got, n)
	}
}

// TestH1EndlessHeaderIsCut: a server that sends headers without end makes
// the call fail, instead of growing the gateway's memory.
func TestH1EndlessHeaderIsCut(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		bufio.NewReader(c).ReadString('\n')
		c.Write([]byte("HTTP/1.1 200 OK\r\nX-Long: "))
		chunk := []byte(strings.Repeat("a", 64<<10))
		for range 64 { // 4 MiB
			if _, err := c.Write(chunk); err != nil {
				return
			}
		}
	}()
	tr := h1For(t)
	_, _, err = post(context.Background(), tr, "http://"+ln.Addr().String(), "x")
	if !errors.Is(err, errHeaderTooLarge) {
		t.Fatalf("err = %v, want %v", err, errHeaderTooLarge)
	}
}

// TestH1ConcurrentCallsShareThePool: calls at once each get a connection
// of their own, and every answer reaches the call that asked for it.
func TestH1ConcurrentCallsShareThePool(t *testing.T) {
	srv, cc := newH1Server(t, echo)
	tr := h1For(t)
	const workers, calls = 16, 25
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range calls {
				body := fmt.Sprintf("worker %d call %d %s", w, i, strings.Repeat("z", (w*calls+i)%3000))
				got, _, err := post(context.Background(), tr, srv.URL, body)
				if err != nil {
					t.Error(err)
					return
				}
				if got != "HTTP/1.1 "+body {
					t.Errorf("worker %d call %d read another call's answer: %.40q", w, i, got)
					return
				}
			}
		})
	}
	wg.Wait()
	if n := cc.opened.Load(); n > workers {
		t.Fatalf("%d connections for %d concurrent callers", n, workers)
	}
}

// TestChatGoesThroughH1: a provider call without a proxy is sent by the
// h1 transport (its connection comes back to h1's pool), and with
// providers.<name>.proxy set by net/http's.
func TestChatGoesThroughH1(t *testing.T) {
	fake := providertest.New()
	defer fake.Close()
	cl := newTestClient(t, fake, nil)
	if _, err := cl.Chat(context.Background(), Request{Messages: userMsg("hi")}); err != nil {
		t.Fatal(err)
	}
	cl.tr.h1.mu.Lock()
	idle := cl.tr.h1.nIdle
	cl.tr.h1.mu.Unlock()
	if idle != 1 {
		t.Fatalf("h1 holds %d idle connections after a call, want 1", idle)
	}

	var proxied atomic.Int32
	proxy, _ := newH1Server(t, func(w http.ResponseWriter, r *http.Request) {
		proxied.Add(1)
		http.Error(w, `{"error":{"message":"proxy says no"}}`, http.StatusBadGateway)
	})
	pcl := newTestClient(t, fake, func(c *config.Config) {
		c.Providers.OpenRouter.Proxy = proxy.URL
		c.Providers.OpenRouter.MaxRetries = 0
	})
	if _, err := pcl.Chat(context.Background(), Request{Messages: userMsg("hi")}); err == nil || proxied.Load() != 1 {
		t.Fatalf("through the proxy: err %v, proxy saw %d calls", err, proxied.Load())
	}
	pcl.tr.h1.mu.Lock()
	defer pcl.tr.h1.mu.Unlock()
	if pcl.tr.h1.nIdle != 0 {
		t.Fatal("a proxied call went through h1")
	}
}
