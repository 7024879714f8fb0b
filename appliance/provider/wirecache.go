package provider

import (
	"bytes"
	"sync"
	"sync/atomic"
	"unsafe"

	"github.com/perchhq/perch/appliance/chat"
)

// wireCache keeps the encoded history of recent conversations between
// calls. A conversation's history is the same from one turn to the next
// but for a message or two at its end and, now and then, a few dropped at
// its start, and escaping all of it again was most of the encoder's time.
//
// A kept message is reused only when every field the encoding reads is the
// very same string (same bytes at the same address) as in the new call: the
// entry holds the messages it was made from, so their memory cannot be
// reused for other text meanwhile, and equal strings encode equally.
// History read afresh from the database (new strings) is encoded again.
type wireCache struct {
	// head is the last system prompt head escaped: the same string
	// every turn until a workspace file or the tools change.
	head atomic.Pointer[wireHead]

	mu      sync.Mutex
	entries map[string]*wireEntry
	size    int    // bytes held, over all entries
	tick    uint64 // LRU clock
}

// wireHead is a system prompt head and its escaped text.
type wireHead struct {
	s   string
	enc []byte
}

// appendHead appends head escaped, from the last call's encoding when
// head is the same string.
func (wc *wireCache) appendHead(out []byte, head string) []byte {
	if wc == nil || head == "" {
		return appendEscaped(out, head)
	}
	if h := wc.head.Load(); h != nil && sameString(h.s, head) {
		return append(out, h.enc...)
	}
	start := len(out)
	out = appendEscaped(out, head)
	if len(out)-start <= wireMaxEntry {
		wc.head.Store(&wireHead{s: head, enc: bytes.Clone(out[start:])})
	}
	return out
}

// wireEntry is one conversation's history as last sent.
type wireEntry struct {
	msgs []chat.Message // the history last sent (the caller's, never changed in place)
	offs []int          // msgs[i] is enc[offs[i]:offs[i+1]], comma included
	enc  []byte
	used uint64
}

// Bounds of the cache: a board has little memory, and a conversation with
// huge tool outputs is better encoded again than kept.
const (
	wireMaxEntries = 32
	wireMaxBytes   = 1 << 20
	wireMaxEntry   = 256 << 10
)

var messageSize = int(unsafe.Sizeof(chat.Message{}))

// bytes is what the entry holds beside the history it was given.
func (e *wireEntry) bytes() int { return cap(e.enc) + cap(e.offs)*8 + messageSize }

func newWireCache() *wireCache { return &wireCache{entries: map[string]*wireEntry{}} }

// drop forgets every conversation's encoding (the prompt head, one string,
// stays).
func (wc *wireCache) drop() {
	if wc == nil {
		return
	}
	wc.mu.Lock()
	defer wc.mu.Unlock()
	wc.entries = map[string]*wireEntry{} // a cleared map keeps its buckets
	wc.size = 0
}

// sameString reports whether a and b are one string, not merely equal.
func sameString(a, b string) bool {
	return len(a) == len(b) && unsafe.StringData(a) == unsafe.StringData(b)
}

// sameMessage reports whether a and b encode to the same bytes because
// every field the encoder reads is the same string or slice.
func sameMessage(a, b *chat.Message) bool {
	return sameString(a.Role, b.Role) && sameString(a.Content, b.Content) && sameString(a.Name, b.Name) &&
		sameString(a.ToolCallID, b.ToolCallID) && len(a.ToolCalls) == len(b.ToolCalls) &&
		(len(a.ToolCalls) == 0 || &a.ToolCalls[0] == &b.ToolCalls[0])
}

// appendHistory appends hist's messages to out, each followed by a comma,
// reusing what key's last call encoded, and keeps the result for key's
// next call. A nil cache or an empty key encodes without keeping.
func (wc *wireCache) appendHistory(out []byte, key string, hist []chat.Message) []byte {
	if wc == nil || key == "" || len(hist) == 0 {
		for i := range hist {
			out = appendMessage(out, &hist[i])
			out = append(out, ',')
		}
		return out
	}
	// The entry is taken out while it is used: a second call for the same
	// conversation meanwhile encodes on its own instead of waiting.
	wc.mu.Lock()
	e := wc.entries[key]
	if e != nil {
		delete(wc.entries, key)
		wc.size -= e.bytes()
	}
	wc.tick++
	tick := wc.tick
	wc.mu.Unlock()
	if e == nil {
		e = &wireEntry{}
	}

	// Where the kept history's first message still sent now starts, and
	// how many follow it unchanged.
	start, n := 0, 0
	for start < len(e.msgs) && !sameMessage(&e.msgs[start], &hist[0]) {
		start++
	}
	for start+n < len(e.msgs) && n < len(hist) && sameMessage(&e.msgs[start+n], &hist[n]) {
		n++
	}
	base := len(out)
	if n > 0 {
		out = append(out, e.enc[e.offs[start]:e.offs[start+n]]...)
		// The kept offsets of those messages, moved to the front.
		first := e.offs[start]
		for i := 0; i <= n; i++ {
			e.offs[i] = e.offs[start+i] - first
		}
		e.offs = e.offs[:n+1]
	} else {
		e.offs = append(e.offs[:0], 0)
	}
	for i := n; i < len(hist); i++ {
		out = appendMessage(out, &hist[i])
		out = append(out, ',')
		e.offs = append(e.offs, len(out)-base)
	}
	enc := out[base:]
	if len(enc) > wireMaxEntry {
		return out // too large to keep; e is dropped
	}
	e.enc = append(e.enc[:0], enc...)
	// hist itself is kept, not a copy: the caller never changes its
	// messages in place (see Request.HistoryKey), and holding them holds
	// their strings. A stored session's history is the store cache's
	// memory, so this costs nothing beside the encoding.
	e.msgs = hist
	e.used = tick
	wc.put(key, e)
	return out
}

// put keeps e under key, evicting the least recently used entries over the
// bounds.
func (wc *wireCache) put(key string, e *wireEntry) {
	wc.mu.Lock()
	defer wc.mu.Unlock()
	if old := wc.entries[key]; old != nil {
		// Another call of this conversation finished first; keep the
		// later one.
		if old.used > e.used {
			return
		}
		wc.size -= old.bytes()
	}
	wc.entries[key] = e
	wc.size += e.bytes()
	for len(wc.entries) > wireMaxEntries || wc.size > wireMaxBytes {
		var lru string
		var at uint64
		for k, v := range wc.entries {
			if lru == "" || v.used < at {
				lru, at = k, v.used
			}
		}
		wc.size -= wc.entries[lru].bytes()
		delete(wc.entries, lru)
	}
}
