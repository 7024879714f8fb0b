package gateway

import (
	"sync"
	"time"

	"github.com/perchhq/perch/appliance/agent"
	"github.com/perchhq/perch/store"
)

// sessionListMaxAge bounds how long a listing is reused; see sessionList.
const sessionListMaxAge = 5 * time.Second

// sessionList is the store's session listing behind /ready's
// agent.sessions and /admin/status's count. Listing walks every session
// (a few microseconds each: 10 ms at 3,000), and health probes call /ready
// often, so the last listing is reused while the agent has begun no turn
// since it was taken (sessions change only in turns). A listing taken while
// turns ran is not reused: one may commit after the walk. A turn that had
// begun but not yet been admitted at the walk can still be missed; the
// listing is then at most sessionListMaxAge old. Concurrent callers share
// one walk.
type sessionList struct {
	db   *store.DB
	loop *agent.Loop

	mu       sync.Mutex
	valid    bool
	activity uint64
	at       time.Time
	top      []readySession // most recently updated first, at most maxReadySessions
	total    int
}

// get returns the most recently updated sessions and how many there are.
// The slice is shared: callers only read it.
func (c *sessionList) get() ([]readySession, int, error) {
	if c.db == nil {
		return []readySession{}, 0, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	act := c.loop.Activity()
	if c.valid && act == c.activity && time.Since(c.at) < sessionListMaxAge {
		return c.top, c.total, nil
	}
	st := c.loop.Stats()
	ss, err := c.db.Sessions()
	if err != nil {
		c.valid = false
		return nil, 0, err
	}
	top := make([]readySession, 0, min(len(ss), maxReadySessions))
	for _, s := range ss[:min(len(ss), maxReadySessions)] {
		top = append(top, readySession{Key: s.Key, MessageCount: s.Count})
	}
	c.valid = st.Running == 0 && st.QueueDepth == 0 && c.loop.Activity() == act
	c.activity, c.at, c.top, c.total = act, time.Now(), top, len(ss)
	return top, len(ss), nil
}
