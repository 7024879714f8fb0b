package provider

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/perchhq/perch/appliance/config"
)

// retryPolicy bounds retries of one upstream call.
type retryPolicy struct {
	MaxRetries int           // extra attempts after the first
	BaseDelay  time.Duration // first backoff; doubles each retry
	MaxDelay   time.Duration // cap of one wait, Retry-After included
	MaxElapsed time.Duration // give up when the next wait would pass this
}

func defaultPolicy(maxRetries int) retryPolicy {
	return retryPolicy{MaxRetries: maxRetries, BaseDelay: 500 * time.Millisecond, MaxDelay: 20 * time.Second, MaxElapsed: 60 * time.Second}
}

// transport is the HTTPDoer under go-openai.
type transport struct {
	client *http.Client
	// h1 sends what it can in the caller's goroutine (h1.go); client,
	// whose transport h1 takes its settings from, sends the rest.
	h1     *h1Transport
	policy retryPolicy
	tokens tokenSource // ADC; nil for key auth
	log    *slog.Logger
}

// callState travels in the request context and counts retries, for error
// messages.
type callState struct {
	retries atomic.Int32
}

type stateKey struct{}

func withState(ctx context.Context, s *callState) context.Context {
	return context.WithValue(ctx, stateKey{}, s)
}

// requestBuffer is the HTTP/1 write buffer of a provider connection.
const requestBuffer = 32 << 10

var dialer = &net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}

func dial(ctx context.Context, network, addr string) (net.Conn, error) {
	c, err := dialer.DialContext(ctx, network, addr)
	if err != nil {
		return nil, err
	}
	return copyConn{c}, nil
}

// copyConn is a provider connection that copies through a pooled buffer.
// net/http writes the part of a request body beyond its write buffer (a
// long history) with io.Copy to the connection, and *net.TCPConn's
// ReadFrom allocated a buffer of up to 32 KiB for every such request (it
// saves copies only for files and sockets, and request bodies here are
// memory).
type copyConn struct{ net.Conn }

var copyPool = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

func (c copyConn) ReadFrom(r io.Reader) (int64, error) {
	bp := copyPool.Get().(*[]byte)
	defer copyPool.Put(bp)
	return io.CopyBuffer(writerOnly{c.Conn}, r, *bp)
}

// writerOnly hides the connection's own ReadFrom from io.CopyBuffer.
type writerOnly struct{ io.Writer }

func newHTTPClient(proxy string) (*http.Client, error) {
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dial,
		TLSHandshakeTimeout:   10 * time.Second,
		ExpectContinueTimeout: time.Second,
		IdleConnTimeout:       90 * time.Second,
		MaxIdleConns:          64,
		// Turns run in parallel (max_concurrent_turns); with the default
		// of 2 idle connections per host every extra turn would redial.
		MaxIdleConnsPerHost: 32,
		ForceAttemptHTTP2:   true,
		// Every chat request carries the system prompt and the tool
		// definitions (about 16 KiB before any history). With the default
		// 4 KiB buffer an HTTP/1 request went out as two writes, headers
		// and the first 4 KiB, then the rest through a copy that allocated
		// a buffer of the rest's size each call; the receiver woke twice.
		// At 32 KiB a request with a short history is one write and no
		// allocation, for 28 KiB more per open connection.
		WriteBufferSize: requestBuffer,
	}
	if proxy != "" {
		u, err := url.Parse(proxy)
		if err != nil {
			return nil, fmt.Errorf("malformed proxy URL %q", config.ShowURL(proxy))
		}
		tr.Proxy = http.ProxyURL(u)
	}
	// No client timeout: a long completion may take minutes; the turn's
	// context bounds every call.
	return &http.Client{Transport: tr}, nil
}

// Do sends req, retrying 429, 5xx and network errors.
func (t *transport) Do(req *http.Request) (*http.Response, error) {
	ctx := req.Context()
	st, _ := ctx.Value(stateKey{}).(*callState)
	if t.tokens != nil {
		tok, err := t.tokens.Token(ctx)
		if err != nil {
			return nil, &adcError{err}
		}
		req.Header.Set("Authorization", "Bearer "+tok)
	}
	start := time.Now()
	for attempt := 0; ; attempt++ {
		if attempt > 0 && req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			req.Body = body
		}
		resp, err := t.send(req)
		if ctx.Err() != nil {
			if resp != nil {
				resp.Body.Close()
			}
			return nil, ctx.Err()
		}
		wait, retry := t.shouldRetry(resp, err, attempt)
		if !retry || (attempt > 0 && req.GetBody == nil) {
			return resp, err
		}
		if time.Since(start)+wait > t.policy.MaxElapsed {
			return resp, err
		}
		if resp != nil {
			// Drain a little so the connection can be reused, then retry.
			io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
			resp.Body.Close()
		}
		if st != nil {
			st.retries.Add(1)
		}
		status := 0
		if resp != nil {
			status = resp.StatusCode
		}
		t.log.Debug("provider call retried", "status", status, "err", errText(err), "attempt", attempt+1, "wait", wait)
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return nil, ctx.Err()
		case <-timer.C:
		}
	}
}

// send makes one attempt of req.
func (t *transport) send(req *http.Request) (*http.Response, error) {
	if t.h1 == nil || !t.h1.handles(req) {
		return t.client.Do(req)
	}
	resp, err := t.h1.RoundTrip(req)
	if err != nil {
		// The shape of http.Client's errors: the call, then the cause.
		return nil, &url.Error{Op: req.Method[:1] + strings.ToLower(req.Method[1:]), URL: req.URL.Redacted(), Err: err}
	}
	if resp.StatusCode >= 300 && resp.StatusCode < 400 && resp.StatusCode != http.StatusNotModified && resp.Header.Get("Location") != "" &&
		(req.Body == nil || req.Body == http.NoBody || req.GetBody != nil) {
		// A redirect is followed as http.Client follows it; providers
		// do not redirect their API, so this is the rare path.
		resp.Body.Close()
		if req.GetBody != nil {
			body, err := req.GetBody()
			if err != nil {
				return nil, err
			}
			req.Body = body
		}
		return t.client.Do(req)
	}
	return resp, nil
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func (t *transport) shouldRetry(resp *http.Response, err error, attempt int) (time.Duration, bool) {
	if attempt >= t.policy.MaxRetries {
		return 0, false
	}
	if err != nil {
		var ae *adcError
		if errors.As(err, &ae) {
			return 0, false
		}
		return t.backoff(attempt), true
	}
	if resp.StatusCode != http.StatusTooManyRequests && resp.StatusCode < 500 {
		return 0, false
	}
	if resp.StatusCode == http.StatusNotImplemented {
		return 0, false
	}
	if ra, ok := retryAfter(resp.Header.Get("Retry-After")); ok {
		if ra > t.policy.MaxDelay {
			// Waiting that long would hold the user's turn hostage; report
			// the rate limit instead.
			return 0, false
		}
		return ra, true
	}
	return t.backoff(attempt), true
}

// backoff is BaseDelay·2^attempt with ±25% jitter, capped at MaxDelay.
func (t *transport) backoff(attempt int) time.Duration {
	d := t.policy.BaseDelay << attempt
	if d > t.policy.MaxDelay || d <= 0 {
		d = t.policy.MaxDelay
	}
	jitter := time.Duration(rand.Int64N(int64(d)/2+1)) - d/4
	return d + jitter
}

func retryAfter(v string) (time.Duration, bool) {
	if v == "" {
		return 0, false
	}
	if s, err := strconv.ParseFloat(v, 64); err == nil && s >= 0 {
		return time.Duration(s * float64(time.Second)), true
	}
	if t, err := http.ParseTime(v); err == nil {
		d := time.Until(t)
		if d < 0 {
			d = 0
		}
		return d, true
	}
	return 0, false
}

type adcError struct{ err error }

func (e *adcError) Error() string {
	return "application default credentials: " + e.err.Error()
}

func (e *adcError) Unwrap() error { return e.err }
