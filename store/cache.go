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
	c.items[key] = c.ll.PushFront(&cacheEntry{key, msgs})
	for c.ll.Len() > c.max {
		last := c.ll.Back()
		c.ll.Remove(last)
		delete(c.items, last.Value.(*cacheEntry).key)
	}
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
	e, ok := c.items[key]
	if !ok {
		if l := c.loads[key]; l != nil {
			l.stale = true
		}
		return
	}
	ent := e.Value.(*cacheEntry)
	// Appending in place is safe: readers hold slices clipped to their
	// length, so they never see the slots written here, and trimming only
	// moves the start forward.
	all := append(ent.msgs, msgs...)
	if trimmed > len(all) {
		trimmed = len(all)
	}
	ent.msgs = all[trimmed:]
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
