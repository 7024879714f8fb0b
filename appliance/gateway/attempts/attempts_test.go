package attempts

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

func TestClientOf(t *testing.T) {
	tests := []struct{ remote, want string }{
		{"192.0.2.7:5000", "192.0.2.7"},
		{"192.0.2.7", "192.0.2.7"},
		{"[::ffff:192.0.2.7]:5000", "192.0.2.7"},
		{"[2001:db8:1:2:aaaa::1]:5000", "2001:db8:1:2::/64"},
		{"[2001:db8:1:2:bbbb::9]:6000", "2001:db8:1:2::/64"},
		{"[fe80::1%eth0]:5000", "fe80::/64"},
		{"@", "@"}, // a unix socket peer: one client
	}
	for _, tt := range tests {
		if got := ClientOf(tt.remote).String(); got != tt.want {
			t.Errorf("ClientOf(%q) = %q, want %q", tt.remote, got, tt.want)
		}
	}
	if ClientOf("[2001:db8:1:2::1]:1") != ClientOf("[2001:db8:1:2:ffff::2]:2") {
		t.Error("two addresses of one /64 are different clients")
	}
	if ClientOf("192.0.2.7:1") == ClientOf("192.0.2.8:1") {
		t.Error("two IPv4 addresses are one client")
	}
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

// A client may fail Burst times at once, then once per Every; others are
// not affected.
func TestLimiterPerClient(t *testing.T) {
	c := &clock{time.Unix(1_000_000, 0)}
	l := NewLimiter(Options{Burst: 3, Every: 10 * time.Second, Now: c.now})
	a, b := ClientOf("192.0.2.1:1"), ClientOf("192.0.2.2:1")
	for i := 3; i > 0; i-- {
		if w := l.Wait(a); w != 0 {
			t.Fatalf("attempt %d refused (wait %v)", 4-i, w)
		}
		if left := l.Fail(a); left != i-1 {
			t.Fatalf("left after failure %d = %d, want %d", 4-i, left, i-1)
		}
	}
	if w := l.Wait(a); w != 10*time.Second {
		t.Fatalf("wait after the burst = %v, want 10s", w)
	}
	if w := l.Wait(b); w != 0 {
		t.Fatalf("another client must wait %v", w)
	}
	c.t = c.t.Add(4 * time.Second)
	if w := l.Wait(a); w != 6*time.Second {
		t.Fatalf("wait 4 s later = %v, want 6s", w)
	}
	c.t = c.t.Add(6 * time.Second)
	if w := l.Wait(a); w != 0 {
		t.Fatalf("wait after one refill = %v, want 0", w)
	}
	l.Fail(a)
	if w := l.Wait(a); w == 0 {
		t.Fatal("a refill gives one attempt, not a new burst")
	}
	c.t = c.t.Add(time.Hour)
	for i := 0; i < 3; i++ {
		if l.Wait(a) != 0 {
			t.Fatal("a rested client gets its whole burst back")
		}
		l.Fail(a)
	}
}

// Memory is bounded whatever the number of clients.
func TestLimiterForgetsClients(t *testing.T) {
	c := &clock{time.Unix(1_000_000, 0)}
	l := NewLimiter(Options{Burst: 2, Every: time.Minute, MaxClients: 100, Now: c.now})
	for i := 0; i < 10_000; i++ {
		l.Fail(ClientOf(fmt.Sprintf("10.%d.%d.%d:1", i>>16&255, i>>8&255, i&255)))
		if n := l.clients(); n > 100 {
			t.Fatalf("%d clients remembered, want at most 100", n)
		}
	}
}

// Clients whose buckets are full again are forgotten first: a client still
// being refused is kept while there are others to drop.
func TestLimiterForgetsRestedClientsFirst(t *testing.T) {
	c := &clock{time.Unix(1_000_000, 0)}
	l := NewLimiter(Options{Burst: 2, Every: time.Minute, MaxClients: 10, Now: c.now})
	for i := 0; i < 9; i++ {
		l.Fail(ClientOf(fmt.Sprintf("10.0.0.%d:1", i)))
	}
	c.t = c.t.Add(time.Hour) // all of them rested
	blocked := ClientOf("198.51.100.1:1")
	l.Fail(blocked)
	l.Fail(blocked)
	for i := 0; i < 50; i++ {
		l.Fail(ClientOf(fmt.Sprintf("10.0.1.%d:1", i)))
	}
	if l.Wait(blocked) == 0 {
		t.Error("the blocked client was forgotten while rested clients were kept")
	}
}

// Once every client has rested, the limiter is empty again, so callers on
// a hot path skip it.
func TestLimiterEmptiesWhenRested(t *testing.T) {
	c := &clock{time.Unix(1_000_000, 0)}
	l := NewLimiter(Options{Burst: 2, Every: time.Second, Now: c.now})
	if !l.Empty() {
		t.Fatal("a new limiter is not empty")
	}
	l.Fail(ClientOf("192.0.2.1:1"))
	if l.Empty() {
		t.Fatal("empty after a failure")
	}
	c.t = c.t.Add(3 * time.Second)
	l.Wait(ClientOf("192.0.2.2:1"))
	if !l.Empty() {
		t.Errorf("%d clients remembered after all rested", l.clients())
	}
}

func TestLimiterConcurrent(t *testing.T) {
	l := NewLimiter(Options{Burst: 5, Every: time.Minute})
	var wg sync.WaitGroup
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 1000; j++ {
				c := ClientOf(fmt.Sprintf("192.0.2.%d:1", j%20))
				if l.Wait(c) == 0 {
					l.Fail(c)
				}
			}
		}()
	}
	wg.Wait()
}

// A flood of events makes a few lines: the first event of each client in a
// window at once (for a bounded number of clients), then one summary per
// window naming the busiest clients.
func TestTallyAggregates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var mu sync.Mutex
		var firsts []string
		var reports []Summary
		tl := NewTally(TallyOptions{
			Window:     time.Minute,
			FirstLimit: 2,
			First:      func(c Client) { mu.Lock(); firsts = append(firsts, c.String()); mu.Unlock() },
			Report:     func(s Summary) { mu.Lock(); reports = append(reports, s); mu.Unlock() },
		})
		defer tl.Close()
		flood := ClientOf("192.0.2.66:1")
		for i := 0; i < 30_000; i++ {
			tl.Add(flood)
		}
		tl.Add(ClientOf("192.0.2.7:1"))
		tl.Add(ClientOf("192.0.2.8:1"))
		tl.Add(ClientOf("192.0.2.9:1"))
		mu.Lock()
		if len(firsts) != 2 || firsts[0] != "192.0.2.66" || firsts[1] != "192.0.2.7" {
			t.Errorf("first lines = %v, want 192.0.2.66 and 192.0.2.7 only (limit 2)", firsts)
		}
		if len(reports) != 0 {
			t.Errorf("a report before the window ended: %v", reports)
		}
		mu.Unlock()
		time.Sleep(time.Minute + time.Second)
		synctest.Wait()
		mu.Lock()
		if len(reports) != 1 {
			t.Fatalf("%d reports after one window, want 1", len(reports))
		}
		r := reports[0]
		if r.Total != 30_003 || r.Clients != 4 || len(r.Top) == 0 || r.Top[0].Client != "192.0.2.66" || r.Top[0].Count != 30_000 || r.Window != time.Minute {
			t.Errorf("summary = %+v", r)
		}
		mu.Unlock()
		// A quiet window reports nothing; the next event opens a new window
		// and is again a first.
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		tl.Add(flood)
		mu.Lock()
		if len(reports) != 1 || len(firsts) != 3 {
			t.Errorf("after a quiet time: %d reports, %d firsts; want 1 and 3", len(reports), len(firsts))
		}
		mu.Unlock()
	})
}

// Close reports what the current window holds, so a stop loses no count,
// and no report comes after it.
func TestTallyCloseFlushes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var reports []Summary
		tl := NewTally(TallyOptions{Report: func(s Summary) { reports = append(reports, s) }})
		tl.Add(ClientOf("192.0.2.1:1"))
		tl.Close()
		if len(reports) != 1 || reports[0].Total != 1 {
			t.Fatalf("reports at Close = %+v", reports)
		}
		tl.Add(ClientOf("192.0.2.1:1"))
		time.Sleep(2 * time.Minute)
		synctest.Wait()
		if len(reports) != 1 {
			t.Errorf("a report after Close: %+v", reports)
		}
	})
}

// The clients a tally counts are bounded; the rest still add to Total.
func TestTallyBoundsClients(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var got Summary
		tl := NewTally(TallyOptions{MaxClients: 10, Report: func(s Summary) { got = s }})
		for i := 0; i < 1000; i++ {
			tl.Add(ClientOf(netip.AddrFrom4([4]byte{10, 0, byte(i >> 8), byte(i)}).String()))
		}
		tl.Close()
		if got.Total != 1000 || got.Clients != 10 || !got.More {
			t.Errorf("summary = %+v, want 1000 events, 10 clients counted and more", got)
		}
	})
}
