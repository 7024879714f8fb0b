// Package attempts limits and tallies what strangers try against the
// gateway — wrong API tokens, wrong setup codes, connections beyond a
// client's share — by client address, so that guessing cannot go fast,
// one client cannot lock the others out, and the owner notices without a
// log line per attempt.
//
// # Concepts
//
// Client: an IPv4 address, or the /64 an IPv6 address belongs to (a host
// is given a whole /64 and may use any address in it).
//
// Limiter: a token bucket per client. A client may fail Burst times at
// once, then once more per Every; while its bucket is empty its attempts
// are refused before they are checked (Wait says for how long), so a
// correct guess made then would not even be noticed. Memory is bounded:
// past MaxClients, clients whose buckets are full again are forgotten
// first, then those closest to it.
//
// Tally: counts events by client and reports them in aggregate: the first
// event of a client in a window at once (for at most FirstLimit clients a
// window), and one summary when a window that had events ends.
package attempts

import (
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Client identifies a client for limits and logs.
type Client struct {
	addr  netip.Addr // IPv4, or the first address of the IPv6 /64
	other string     // a peer that is not an IP address (unix socket)
}

// ClientOf returns the client of a remote address (host:port or host).
func ClientOf(remote string) Client {
	host, _, err := net.SplitHostPort(remote)
	if err != nil {
		host = remote
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return Client{other: remote}
	}
	a = a.WithZone("").Unmap()
	if a.Is6() {
		p, _ := a.Prefix(64)
		a = p.Addr()
	}
	return Client{addr: a}
}

// String is the address, or the /64 for IPv6.
func (c Client) String() string {
	switch {
	case !c.addr.IsValid():
		return c.other
	case c.addr.Is6():
		return netip.PrefixFrom(c.addr, 64).String()
	}
	return c.addr.String()
}

// Options configure a Limiter.
type Options struct {
	// Burst failures are allowed at once, then one per Every.
	Burst int
	Every time.Duration
	// MaxClients bounds the clients remembered (default 4096).
	MaxClients int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Limiter limits failed attempts per client.
type Limiter struct {
	opts Options

	mu     sync.Mutex
	bucket map[Client]*bucket
	swept  time.Time    // when rested clients were last dropped
	known  atomic.Int64 // len(bucket), read without the lock
}

type bucket struct {
	tokens float64 // at time at
	at     time.Time
}

// NewLimiter returns a limiter with no client known.
func NewLimiter(o Options) *Limiter {
	if o.Burst < 1 {
		o.Burst = 1
	}
	if o.Every <= 0 {
		o.Every = time.Minute
	}
	if o.MaxClients < 1 {
		o.MaxClients = 4096
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Limiter{opts: o, bucket: map[Client]*bucket{}}
}

// level is b's token count at now.
func (l *Limiter) level(b *bucket, now time.Time) float64 {
	t := b.tokens + float64(now.Sub(b.at))/float64(l.opts.Every)
	return min(t, float64(l.opts.Burst))
}

// Empty reports whether no client has failed recently enough to be
// remembered: then every client may try, and a caller on a hot path can
// skip working out which client it serves.
func (l *Limiter) Empty() bool { return l.known.Load() == 0 }

// Wait returns how long c must wait before its next attempt may be
// checked; 0 when it may try now.
func (l *Limiter) Wait(c Client) time.Duration {
	if l.Empty() {
		return 0
	}
	now := l.opts.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.swept) >= time.Duration(l.opts.Burst)*l.opts.Every {
		l.sweep(now) // so that Empty holds again once everyone has rested
	}
	b, ok := l.bucket[c]
	if !ok {
		return 0
	}
	t := l.level(b, now)
	if t >= 1 {
		return 0
	}
	return time.Duration((1 - t) * float64(l.opts.Every)).Round(time.Millisecond)
}

// Fail records a failed attempt of c and returns how many more it may make
// at once.
func (l *Limiter) Fail(c Client) (left int) {
	now := l.opts.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
	b, ok := l.bucket[c]
	if !ok {
		if len(l.bucket) >= l.opts.MaxClients {
			l.forget(now)
		}
		b = &bucket{tokens: float64(l.opts.Burst), at: now}
		l.bucket[c] = b
		l.known.Store(int64(len(l.bucket)))
	}
	b.tokens, b.at = max(l.level(b, now)-1, 0), now
	return int(b.tokens)
}

// forget drops the clients whose buckets are full again, or else the one
// closest to full: the one most in debt is the last to go.
func (l *Limiter) forget(now time.Time) {
	best := l.sweep(now)
	if len(l.bucket) >= l.opts.MaxClients {
		delete(l.bucket, best)
		l.known.Store(int64(len(l.bucket)))
	}
}

// sweep drops the clients whose buckets are full again and returns the
// fullest of the others.
func (l *Limiter) sweep(now time.Time) (best Client) {
	bestLevel := -1.0
	for c, b := range l.bucket {
		t := l.level(b, now)
		if t >= float64(l.opts.Burst) {
			delete(l.bucket, c)
			continue
		}
		if t > bestLevel {
			best, bestLevel = c, t
		}
	}
	l.swept = now
	l.known.Store(int64(len(l.bucket)))
	return best
}

// clients is how many clients are remembered (for tests).
func (l *Limiter) clients() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.bucket)
}
