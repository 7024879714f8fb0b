package provider

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// h1Transport sends HTTP/1.1 requests on keep-alive connections in the
// caller's goroutine: it writes the request and reads the response itself.
//
// net/http's Transport gives every connection a write goroutine and a read
// goroutine and hands each request to them and the response back over
// channels, four goroutine hand-offs per call. On a small board, and on the
// VMs it is measured on, each hand-off that wakes a sleeping thread is a
// context switch, and under load those were a large part of a turn's CPU.
// Here a call is one write, then reads until the response is whole; the
// caller is parked only while the provider thinks.
//
// It takes its dialer, TLS settings, proxy choice and idle limits from std,
// the net/http transport it stands in front of, and hands std every request
// it does not do itself: through a proxy (std speaks CONNECT and proxy
// authentication), and schemes other than http and https.
type h1Transport struct {
	std *http.Transport

	mu    sync.Mutex
	idle  map[string][]*h1Conn // per scheme://host:port, most recently used last
	nIdle int
	// sweep closes connections idle longer than std.IdleConnTimeout; it
	// is armed while there are idle connections, so nothing runs when
	// there are none.
	sweep *time.Timer
}

// h1Conn is one connection and its buffers.
type h1Conn struct {
	key    string
	conn   net.Conn
	lr     headerLimit
	br     *bufio.Reader
	bw     *bufio.Writer
	idleAt time.Time
	reused bool
}

// maxResponseHeader bounds a response's status line and headers: a broken
// or hostile upstream must not grow them without end.
const maxResponseHeader = 1 << 20

// headerLimit is the connection's reader; while limit is positive it
// counts down what is read and fails once it runs out.
type headerLimit struct {
	r     io.Reader
	limit int64
}

var errHeaderTooLarge = errors.New("the response's headers are larger than 1 MiB")

func (l *headerLimit) Read(p []byte) (int, error) {
	if l.limit < 0 {
		return l.r.Read(p)
	}
	if l.limit == 0 {
		return 0, errHeaderTooLarge
	}
	if int64(len(p)) > l.limit {
		p = p[:l.limit]
	}
	n, err := l.r.Read(p)
	l.limit -= int64(n)
	return n, err
}

func newH1Transport(std *http.Transport) *h1Transport {
	return &h1Transport{std: std, idle: map[string][]*h1Conn{}}
}

// handles reports whether h1 sends req itself rather than std.
func (t *h1Transport) handles(req *http.Request) bool {
	if req.URL.Scheme != "http" && req.URL.Scheme != "https" {
		return false
	}
	if t.std.Proxy != nil {
		if u, err := t.std.Proxy(req); err != nil || u != nil {
			return false
		}
	}
	return true
}

// RoundTrip sends req: on an idle connection when there is one, and once
// more on a new connection when the idle one turns out closed by the
// server before any byte of the response (servers close idle keep-alive
// connections when they like, and a request body that can be replayed is
// safe to send again then).
func (t *h1Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !t.handles(req) {
		return t.std.RoundTrip(req)
	}
	ctx := req.Context()
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			// send's deadline would come from another goroutine, too late
			// to stop a request written at once on an idle connection: a
			// provider may bill a call whose answer nobody reads.
			closeBody(req)
			return nil, err
		}
		c, err := t.conn(ctx, req, attempt > 0)
		if err != nil {
			closeBody(req)
			return nil, err
		}
		resp, err := t.send(ctx, c, req)
		if err == nil {
			return resp, nil
		}
		closeBody(req)
		var stale *staleConnError
		if attempt > 0 || !errors.As(err, &stale) || ctx.Err() != nil {
			return nil, err
		}
		if req.Body != nil && req.Body != http.NoBody {
			if req.GetBody == nil {
				return nil, stale.err
			}
			body, gerr := req.GetBody()
			if gerr != nil {
				return nil, gerr
			}
			// The caller's request is not changed: the retry sends a
			// copy with the body from its start.
			r := *req
			r.Body = body
			req = &r
		}
	}
}

// staleConnError is a reused connection that failed before any byte of the
// response came back.
type staleConnError struct{ err error }

func (e *staleConnError) Error() string { return e.err.Error() }
func (e *staleConnError) Unwrap() error { return e.err }

func closeBody(req *http.Request) {
	if req.Body != nil {
		req.Body.Close()
	}
}

// aLongTimeAgo is a deadline in the past: setting it makes the
// connection's blocked reads and writes return at once.
var aLongTimeAgo = time.Unix(1, 0)

// send writes req on c and reads the response head; the body is read by the
// caller, and c goes back to the idle list once it is read to its end.
func (t *h1Transport) send(ctx context.Context, c *h1Conn, req *http.Request) (*http.Response, error) {
	// A cancelled context interrupts whatever the connection is doing, in
	// the caller's goroutine: no goroutine waits on the context meanwhile.
	stop := context.AfterFunc(ctx, func() { c.conn.SetDeadline(aLongTimeAgo) })
	fail := func(err error) (*http.Response, error) {
		stop()
		c.conn.Close()
		if ctxErr := ctx.Err(); ctxErr != nil {
			return nil, ctxErr
		}
		return nil, err
	}
	err := req.Write(c.bw)
	if err == nil {
		err = c.bw.Flush()
	}
	if err != nil {
		if c.reused {
			err = &staleConnError{err}
		}
		return fail(err)
	}
	c.lr.limit = maxResponseHeader
	if _, err := c.br.Peek(1); err != nil {
		if c.reused {
			err = &staleConnError{err}
		}
		return fail(err)
	}
	var resp *http.Response
	for {
		resp, err = http.ReadResponse(c.br, req)
		if err != nil {
			return fail(err)
		}
		// 1xx answers (103 Early Hints) come before the real one.
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			break
		}
	}
	c.lr.limit = -1
	reuse := !resp.Close && !req.Close && resp.ProtoAtLeast(1, 1) && resp.StatusCode != http.StatusSwitchingProtocols
	b := &h1Body{t: t, c: c, body: resp.Body, stop: stop, reuse: reuse}
	if resp.Body == http.NoBody {
		b.release(true)
		return resp, nil
	}
	resp.Body = b
	return resp, nil
}

// h1Body is a response body that gives its connection back at its end.
type h1Body struct {
	t     *h1Transport
	c     *h1Conn
	body  io.ReadCloser
	stop  func() bool
	reuse bool

	mu   sync.Mutex
	done bool
	err  error // what reads return once the connection is released
}

func (b *h1Body) Read(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		return 0, b.err
	}
	n, err := b.body.Read(p)
	if err == io.EOF {
		b.release(true)
		b.err = io.EOF
	} else if err != nil {
		b.release(false)
		b.err = err
	}
	return n, err
}

// Close before the end drops the connection: what is left of the body
// would have to be read before the next response.
func (b *h1Body) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.done {
		b.release(false)
		b.err = errors.New("provider: read on a closed response body")
	}
	return nil
}

// release ends the body's hold on the connection: back to the idle list
// when the whole response was read and both sides keep the connection,
// closed otherwise.
func (b *h1Body) release(complete bool) {
	b.done = true
	// stop reports false when the context's cancellation already set a
	// past deadline on the connection.
	if !b.stop() || !complete || !b.reuse {
		b.c.conn.Close()
		return
	}
	b.t.putIdle(b.c)
}

// conn returns an idle connection for req's host, or dials one. fresh
// skips the idle ones.
func (t *h1Transport) conn(ctx context.Context, req *http.Request, fresh bool) (*h1Conn, error) {
	key := req.URL.Scheme + "://" + canonicalAddr(req.URL.Scheme, req.URL.Host)
	if !fresh {
		if c := t.getIdle(key); c != nil {
			return c, nil
		}
	}
	return t.dial(ctx, req, key)
}

func canonicalAddr(scheme, host string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	h := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if scheme == "https" {
		return net.JoinHostPort(h, "443")
	}
	return net.JoinHostPort(h, "80")
}

func (t *h1Transport) dial(ctx context.Context, req *http.Request, key string) (*h1Conn, error) {
	addr := key[len(req.URL.Scheme)+3:]
	dial := t.std.DialContext
	if dial == nil {
		dial = (&net.Dialer{}).DialContext
	}
	conn, err := dial(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if req.URL.Scheme == "https" {
		conn, err = t.handshake(ctx, conn, req.URL.Hostname())
		if err != nil {
			return nil, err
		}
	}
	c := &h1Conn{key: key, conn: conn, lr: headerLimit{r: conn, limit: -1}}
	c.br = bufio.NewReaderSize(&c.lr, 4<<10)
	wb := t.std.WriteBufferSize
	if wb <= 0 {
		wb = 4 << 10
	}
	c.bw = bufio.NewWriterSize(conn, wb)
	return c, nil
}

// handshake runs TLS on conn for host: std's TLS settings (the system's
// roots unless they name others), HTTP/1.1 offered alone by ALPN.
func (t *h1Transport) handshake(ctx context.Context, conn net.Conn, host string) (net.Conn, error) {
	var cfg *tls.Config
	if t.std.TLSClientConfig != nil {
		cfg = t.std.TLSClientConfig.Clone()
	} else {
		cfg = &tls.Config{}
	}
	if cfg.ServerName == "" {
		cfg.ServerName = host
	}
	cfg.NextProtos = []string{"http/1.1"}
	tc := tls.Client(conn, cfg)
	if d := t.std.TLSHandshakeTimeout; d > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, d)
		defer cancel()
	}
	if err := tc.HandshakeContext(ctx); err != nil {
		conn.Close()
		return nil, fmt.Errorf("tls handshake with %s: %w", host, err)
	}
	return tc, nil
}

func (t *h1Transport) idleTimeout() time.Duration {
	if d := t.std.IdleConnTimeout; d > 0 {
		return d
	}
	return 90 * time.Second
}

// getIdle takes the most recently used idle connection to key that has
// not been idle too long.
func (t *h1Transport) getIdle(key string) *h1Conn {
	t.mu.Lock()
	defer t.mu.Unlock()
	list := t.idle[key]
	if len(list) == 0 {
		return nil
	}
	c := list[len(list)-1]
	list[len(list)-1] = nil
	t.idle[key] = list[:len(list)-1]
	t.nIdle--
	c.reused = true
	return c
}

// putIdle keeps c for the next request to its host, within std's limits
// on idle connections; over them it closes the oldest.
func (t *h1Transport) putIdle(c *h1Conn) {
	c.idleAt = time.Now()
	perHost := t.std.MaxIdleConnsPerHost
	if perHost <= 0 {
		perHost = http.DefaultMaxIdleConnsPerHost
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	list := append(t.idle[c.key], c)
	if len(list) > perHost {
		list[0].conn.Close()
		list = append(list[:0], list[1:]...)
		t.nIdle--
	}
	t.idle[c.key] = list
	t.nIdle++
	if m := t.std.MaxIdleConns; m > 0 && t.nIdle > m {
		t.closeOldestLocked()
	}
	if t.sweep == nil {
		t.sweep = time.AfterFunc(t.idleTimeout(), t.closeExpired)
	}
}

// closeOldestLocked closes the connection idle longest, of any host.
func (t *h1Transport) closeOldestLocked() {
	var oldest string
	var at time.Time
	for k, l := range t.idle {
		if len(l) > 0 && (oldest == "" || l[0].idleAt.Before(at)) {
			oldest, at = k, l[0].idleAt
		}
	}
	if oldest == "" {
		return
	}
	l := t.idle[oldest]
	l[0].conn.Close()
	t.idle[oldest] = append(l[:0], l[1:]...)
	t.nIdle--
}

// closeExpired closes connections idle longer than the idle timeout and
// arms itself again for the next to expire, while any are idle.
func (t *h1Transport) closeExpired() {
	t.mu.Lock()
	defer t.mu.Unlock()
	timeout := t.idleTimeout()
	now := time.Now()
	var next time.Time
	for k, l := range t.idle {
		kept := l[:0]
		for _, c := range l {
			if now.Sub(c.idleAt) >= timeout {
				c.conn.Close()
				t.nIdle--
				continue
			}
			if next.IsZero() || c.idleAt.Before(next) {
				next = c.idleAt
			}
			kept = append(kept, c)
		}
		clear(l[len(kept):])
		if len(kept) == 0 {
			delete(t.idle, k)
		} else {
			t.idle[k] = kept
		}
	}
	if t.nIdle == 0 {
		t.sweep = nil
		return
	}
	t.sweep = time.AfterFunc(next.Add(timeout).Sub(now), t.closeExpired)
}

// keepIdle closes all but the n most recently used idle connections of
// each host. After a burst of parallel turns a board would otherwise hold
// one per turn, each with its 32 KiB write buffer, until they time out.
func (t *h1Transport) keepIdle(n int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, l := range t.idle {
		if len(l) <= n {
			continue
		}
		drop := len(l) - n // the oldest are first
		for _, c := range l[:drop] {
			c.conn.Close()
		}
		kept := append(l[:0], l[drop:]...)
		clear(l[len(kept):])
		t.idle[k] = kept
		t.nIdle -= drop
	}
}

// CloseIdleConnections closes every idle connection, its own and std's.
func (t *h1Transport) CloseIdleConnections() {
	t.mu.Lock()
	for k, l := range t.idle {
		for _, c := range l {
			c.conn.Close()
		}
		delete(t.idle, k)
	}
	t.nIdle = 0
	if t.sweep != nil {
		t.sweep.Stop()
		t.sweep = nil
	}
	t.mu.Unlock()
	t.std.CloseIdleConnections()
}
