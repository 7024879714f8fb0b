package store

import (
	"github.com/perchhq/perch/appliance/chat"

	"container/list"
	"sync"
)

// historyCache keeps the decoded histories of the most recently used
// sessions. Readers get slices clipped to their length (cap == len), so
// neither their appends nor the cache's later appends can touch what they
// see.
type historyCache struct {
	mu    sync.Mutex
	max   int
	ll    *list.List
	items map[string]*list.Element
	// loads are the sessions being read from disk right now; a write to
	// one of them meanwhile makes that read stale, so it is not cached.
	loads map[string]*load
}

type load struct {
	readers int
	stale   bool
}

type cacheEntry struct {
	key  string
	msgs []chat.Message
	// pins counts appends in the journal that bbolt has not taken: until
	// then this entry is the only up-to-date copy, so it is not evicted.
	pins int
}

func newHistoryCache(max int) *historyCache {
	return &historyCache{max: max, ll: list.New(), items: map[string]*list.Element{}, loads: map[string]*load{}}
}

func (c *historyCache) get(key string) ([]chat.Message, bool) {
	if c.max <= 0 {
		return nil, false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[key]
	if !ok {
		return nil, false
	}
	c.ll.MoveToFront(e)
	msgs := e.Value.(*cacheEntry).msgs
	return msgs[:len(msgs):len(msgs)], true
}

// beginLoad marks key as being read from disk.
func (c *historyCache) beginLoad(key string) {
	if c.max <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.loads[key]
	if l == nil {
		l = &load{}
		c.loads[key] = l
	}
	l.readers++
}

// finishLoad caches what was read (when ok) unless a write to key happened
// meanwhile.
func (c *historyCache) finishLoad(key string, msgs []chat.Message, ok bool) {
	if c.max <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	l := c.loads[key]
	if l == nil {
		return
	}
	l.readers--
	if l.readers == 0 {
		delete(c.loads, key)
	}
	if l.stale || !ok {
		return
	}
	c.putLocked(key, msgs)
}

func (c *historyCache) putLocked(key string, msgs []chat.Message) {
	if e, ok := c.items[key]; ok {
		e.Value.(*cacheEntry).msgs = msgs
		c.ll.MoveToFront(e)
		return
	}
	c.items[key] = c.ll.PushFront(&cacheEntry{key: key, msgs: msgs})
	// Evict from the back, passing over pinned entries; with many pinned
	// the cache holds more than max until the journal is applied.
	for e := c.ll.Back(); e != nil && c.ll.Len() > c.max; {
		prev := e.Prev()
		if ent := e.Value.(*cacheEntry); ent.pins == 0 {
			c.ll.Remove(e)
			delete(c.items, ent.key)
		}
		e = prev
	}
}

// dropUnpinned empties the cache but for the entries the journal still
// needs, and returns how many it dropped.
func (c *historyCache) dropUnpinned() int {
	if c.max <= 0 {
		return 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for e := c.ll.Back(); e != nil; {
		prev := e.Prev()
		if ent := e.Value.(*cacheEntry); ent.pins == 0 {
			c.ll.Remove(e)
			delete(c.items, ent.key)
			n++
		}
		e = prev
	}
	return n
}

// pin keeps key's entry in the cache until unpin, and reports whether
// there is one to keep.
func (c *historyCache) pin(key string) bool {
	if c.max <= 0 {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.items[key]
	if ok {
		e.Value.(*cacheEntry).pins++
	}
	return ok
}

func (c *historyCache) unpin(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.items[key]; ok {
		if ent := e.Value.(*cacheEntry); ent.pins > 0 {
			ent.pins--
		}
	}
}

// appendedPinned mirrors a journaled append on a pinned entry, trimming
// the way appendTx will once bbolt takes it.
func (c *historyCache) appendedPinned(key string, msgs []chat.Message, limit int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mirror(key, msgs, func(all []chat.Message) int {
		if len(all) <= limit {
			return 0
		}
		n := len(all) - limit + trimSlackFor(limit)
		for n < len(all) && all[n].Role != "user" {
			n++
		}
		return n
	})
}

// appended mirrors a committed Append: new messages at the end, trimmed
// ones gone from the front. A session not in the cache stays out; its next
// read loads it from disk.
func (c *historyCache) appended(key string, msgs []chat.Message, trimmed int) {
	if c.max <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.mirror(key, msgs, func([]chat.Message) int { return trimmed })
}

// mirror appends msgs to key's entry and drops the first trim(all) of the
// result; the caller holds mu.
func (c *historyCache) mirror(key string, msgs []chat.Message, trim func(all []chat.Message) int) {
	// A read from disk that began before this write would cache the
	// history without it.
	if l := c.loads[key]; l != nil {
		l.stale = true
	}
	e, ok := c.items[key]
	if !ok {
		return // not cached, or dropped by a reset meanwhile
	}
	ent := e.Value.(*cacheEntry)
	// Appending in place is safe: readers hold slices clipped to their
	// length, so they never see the slots written here, and trimming only
	// moves the start forward.
	all := append(ent.msgs, msgs...)
	ent.msgs = all[min(trim(all), len(all)):]
	c.ll.MoveToFront(e)
}

func (c *historyCache) drop(key string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if l := c.loads[key]; l != nil {
		l.stale = true
	}
	if e, ok := c.items[key]; ok {
		c.ll.Remove(e)
		delete(c.items, key)
	}
}
