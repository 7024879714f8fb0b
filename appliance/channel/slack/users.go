package slack

import (
	"container/list"
	"sync"
	"time"
)

// userCache remembers users.info answers (and failures, so a missing
// scope costs one call per sender, not one per message), bounded in size
// and age.
type userCache struct {
	max int
	ttl time.Duration

	mu    sync.Mutex
	order *list.List // front: most recent
	byID  map[string]*list.Element
}

type cachedUser struct {
	id  string
	u   user
	ok  bool
	exp time.Time
}

func newUserCache(max int, ttl time.Duration) *userCache {
	return &userCache{max: max, ttl: ttl, order: list.New(), byID: map[string]*list.Element{}}
}

// get returns the cached answer for id; cached is false when there is
// none (or it expired).
func (c *userCache) get(id string) (u user, ok, cached bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, found := c.byID[id]
	if !found {
		return user{}, false, false
	}
	e := el.Value.(*cachedUser)
	if time.Now().After(e.exp) {
		c.order.Remove(el)
		delete(c.byID, id)
		return user{}, false, false
	}
	c.order.MoveToFront(el)
	return e.u, e.ok, true
}

func (c *userCache) put(id string, u user, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if el, found := c.byID[id]; found {
		c.order.Remove(el)
	}
	c.byID[id] = c.order.PushFront(&cachedUser{id: id, u: u, ok: ok, exp: time.Now().Add(c.ttl)})
	for c.order.Len() > c.max {
		last := c.order.Back()
		c.order.Remove(last)
		delete(c.byID, last.Value.(*cachedUser).id)
	}
}
