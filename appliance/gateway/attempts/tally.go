package attempts

import (
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// TallyOptions configure a Tally.
type TallyOptions struct {
	// Window is how long events are summed before a summary (default 1 min).
	Window time.Duration
	// First is called at the first event of a client in a window, for at
	// most FirstLimit clients a window (default 5); nil for none.
	First      func(Client)
	FirstLimit int
	// Report is called with the summary of a window that had events, when
	// it ends or at Close.
	Report func(Summary)
	// MaxClients bounds the clients counted one by one (default 1024).
	MaxClients int
}

// Summary is one window's events.
type Summary struct {
	Window  time.Duration
	Total   int
	Clients int           // clients counted one by one
	More    bool          // more clients than MaxClients had events
	Top     []ClientCount // up to 3, most events first
}

// LogAttrs renders s as slog key-value pairs: count, window, clients (with
// a "+" when there were more), top ("addr (n), ...").
func (s Summary) LogAttrs() []any {
	top := make([]string, len(s.Top))
	for i, c := range s.Top {
		top[i] = fmt.Sprintf("%s (%d)", c.Client, c.Count)
	}
	clients := strconv.Itoa(s.Clients)
	if s.More {
		clients += "+"
	}
	return []any{"count", s.Total, "window", s.Window, "clients", clients, "top", strings.Join(top, ", ")}
}

// ClientCount is one client's events in a window.
type ClientCount struct {
	Client string
	Count  int
}

// Tally counts events by client and reports them in aggregate. Its timer
// runs only while a window has events; Close stops it.
type Tally struct {
	opts TallyOptions

	mu     sync.Mutex
	counts map[Client]int
	total  int
	firsts int
	more   bool
	timer  *time.Timer
	closed bool
}

// NewTally returns a tally with no events.
func NewTally(o TallyOptions) *Tally {
	if o.Window <= 0 {
		o.Window = time.Minute
	}
	if o.FirstLimit <= 0 {
		o.FirstLimit = 5
	}
	if o.MaxClients <= 0 {
		o.MaxClients = 1024
	}
	return &Tally{opts: o, counts: map[Client]int{}}
}

// Add counts one event of c.
func (t *Tally) Add(c Client) {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	if t.total == 0 {
		t.timer = time.AfterFunc(t.opts.Window, t.flush)
	}
	t.total++
	n, known := t.counts[c]
	switch {
	case known:
		t.counts[c] = n + 1
	case len(t.counts) < t.opts.MaxClients:
		t.counts[c] = 1
	default:
		t.more = true
	}
	first := !known && t.firsts < t.opts.FirstLimit
	if first {
		t.firsts++
	}
	t.mu.Unlock()
	if first && t.opts.First != nil {
		t.opts.First(c)
	}
}

// flush ends the window.
func (t *Tally) flush() {
	t.mu.Lock()
	s, ok := t.take()
	t.mu.Unlock()
	if ok && t.opts.Report != nil {
		t.opts.Report(s)
	}
}

// take empties the window and returns its summary; t.mu is held.
func (t *Tally) take() (Summary, bool) {
	if t.total == 0 {
		return Summary{}, false
	}
	s := Summary{Window: t.opts.Window, Total: t.total, Clients: len(t.counts), More: t.more}
	for c, n := range t.counts {
		s.Top = append(s.Top, ClientCount{Client: c.String(), Count: n})
	}
	sort.Slice(s.Top, func(i, j int) bool {
		if s.Top[i].Count != s.Top[j].Count {
			return s.Top[i].Count > s.Top[j].Count
		}
		return s.Top[i].Client < s.Top[j].Client
	})
	if len(s.Top) > 3 {
		s.Top = s.Top[:3]
	}
	clear(t.counts)
	t.total, t.firsts, t.more = 0, 0, false
	return s, true
}

// Close reports the current window, if it had events, and stops counting.
func (t *Tally) Close() {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return
	}
	t.closed = true
	if t.timer != nil {
		t.timer.Stop()
	}
	s, ok := t.take()
	t.mu.Unlock()
	if ok && t.opts.Report != nil {
		t.opts.Report(s)
	}
}
