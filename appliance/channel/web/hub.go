package web

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
)

// Bounds of the event stream. A page that falls further behind than its
// queue is disconnected and reconnects from the ring; a page that was away
// longer than the ring reaches back is told to reload its panels.
const (
	ringEvents   = 256       // events kept for reconnecting pages
	ringBytes    = 256 << 10 // and at most this much data
	subQueue     = 64        // events queued per page before it is dropped
	maxEventData = 64 << 10  // an event's JSON; larger ones are not sent
	// MaxStreams is how many pages may hold a stream at once; each costs a
	// connection, a goroutine and its queue.
	MaxStreams = 16
)

// Event is one message of the stream.
type Event struct {
	ID   uint64
	Kind string
	Data []byte // JSON
}

// ErrTooMany is returned when MaxStreams pages are connected.
var ErrTooMany = errors.New("web: too many pages are connected")

// hub fans events out to the connected pages and keeps the latest ones for
// pages that reconnect.
type hub struct {
	log *slog.Logger

	// epoch names this process's numbering: a page that reconnects to a
	// restarted gateway must not take the new ids for the old ones.
	epoch string

	mu       sync.Mutex
	next     uint64
	ring     []Event
	ringSize int
	subs     map[*sub]struct{}
	closed   bool
	onChange func(n int) // called (without mu) when pages connect or leave
}

// sub is one connected page.
type sub struct {
	ch chan Event
	// gone is closed when the hub drops the page (queue full, or Stop).
	gone chan struct{}
	once sync.Once
}

func (s *sub) drop() { s.once.Do(func() { close(s.gone) }) }

func newHub(log *slog.Logger) *hub {
	var b [4]byte
	rand.Read(b[:])
	return &hub{log: log, epoch: hex.EncodeToString(b[:]), next: 1, subs: map[*sub]struct{}{}}
}

// publish sends v as an event of kind to every page and keeps it for
// reconnecting ones. It never blocks: a page whose queue is full is
// dropped (it reconnects and catches up from the ring).
func (h *hub) publish(kind string, v any) {
	data, err := json.Marshal(v)
	if err != nil {
		h.log.Error("web: event not encoded", "kind", kind, "err", err)
		return
	}
	if len(data) > maxEventData {
		h.log.Warn("web: event too large for the page's stream; not sent", "kind", kind, "bytes", len(data))
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return
	}
	ev := Event{ID: h.next, Kind: kind, Data: data}
	h.next++
	h.ring = append(h.ring, ev)
	h.ringSize += len(data)
	drop := 0
	for len(h.ring)-drop > ringEvents || (h.ringSize > ringBytes && len(h.ring)-drop > 1) {
		h.ringSize -= len(h.ring[drop].Data)
		drop++
	}
	if drop > 0 {
		// Copy rather than reslice, so the dropped events' data is freed.
		h.ring = append(make([]Event, 0, len(h.ring)-drop+8), h.ring[drop:]...)
	}
	for s := range h.subs {
		select {
		case s.ch <- ev:
		default:
			delete(h.subs, s)
			s.drop()
		}
	}
}

// subscribe connects a page. When have is set, the page has seen the
// events up to since, and subscribe returns those it missed; resync is
// true when some were already dropped from the ring (or since is from the
// future), so the page must reload its panels.
func (h *hub) subscribe(since uint64, have bool) (s *sub, missed []Event, resync bool, err error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, nil, false, ErrTooMany
	}
	if len(h.subs) >= MaxStreams {
		h.mu.Unlock()
		return nil, nil, false, ErrTooMany
	}
	s = &sub{ch: make(chan Event, subQueue), gone: make(chan struct{})}
	h.subs[s] = struct{}{}
	n := len(h.subs)
	if have {
		first := h.next // the oldest event kept
		if len(h.ring) > 0 {
			first = h.ring[0].ID
		}
		resync = since+1 < first || since >= h.next
		for _, ev := range h.ring {
			if ev.ID > since {
				missed = append(missed, ev)
			}
		}
		if resync {
			missed = nil
		}
	}
	change := h.onChange
	h.mu.Unlock()
	if change != nil {
		change(n)
	}
	return s, missed, resync, nil
}

func (h *hub) unsubscribe(s *sub) {
	h.mu.Lock()
	_, ok := h.subs[s]
	delete(h.subs, s)
	n := len(h.subs)
	change := h.onChange
	h.mu.Unlock()
	s.drop()
	if ok && change != nil {
		change(n)
	}
}

// count is the number of connected pages.
func (h *hub) count() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.subs)
}

// lastID is the newest event's id (0 when none).
func (h *hub) lastID() uint64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.next - 1
}

// close drops every page and refuses new ones.
func (h *hub) close() {
	h.mu.Lock()
	h.closed = true
	subs := h.subs
	h.subs = map[*sub]struct{}{}
	h.mu.Unlock()
	for s := range subs {
		s.drop()
	}
}
