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

// Wait returns how long c must wait before its next attempt may be
// checked; 0 when it may try now.
func (l *Limiter) Wait(c Client) time.Duration {
	now := l.opts.Now()
	l.mu.Lock()
	defer l.mu.Unlock()
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
	}
	b.tokens, b.at = max(l.level(b, now)-1, 0), now
	return int(b.tokens)
}

// forget drops the clients whose buckets are full again, or else the one
// closest to full: the one most in debt is the last to go.
func (l *Limiter) forget(now time.Time) {
	var best Client
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
	if len(l.bucket) >= l.opts.MaxClients {
		delete(l.bucket, best)
	}
}

// clients is how many clients are remembered (for tests).
func (l *Limiter) clients() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.bucket)
}
