package web

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"sync"
	"time"
)

// Ticket limits: a page redeems its ticket within a second of getting it;
// 30 s leaves room for a slow phone. At most maxTickets wait at once (the
// oldest is forgotten beyond), so a client asking in a loop cannot grow
// the table.
const (
	ticketTTL  = 30 * time.Second
	maxTickets = 32
)

// tickets are one-time credentials for opening an event stream.
type tickets struct {
	now func() time.Time

	mu     sync.Mutex
	issued []ticket // oldest first
}

type ticket struct {
	value   string
	expires time.Time
}

func newTickets(now func() time.Time) *tickets { return &tickets{now: now} }

// issue returns a new ticket (128 random bits, URL-safe).
func (t *tickets) issue() string {
	var b [16]byte
	rand.Read(b[:])
	v := base64.RawURLEncoding.EncodeToString(b[:])
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pruneLocked()
	if len(t.issued) >= maxTickets {
		t.issued = t.issued[1:]
	}
	t.issued = append(t.issued, ticket{v, t.now().Add(ticketTTL)})
	return v
}

// redeem spends v: true once, for a ticket issued and not expired.
func (t *tickets) redeem(v string) bool {
	if v == "" {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.pruneLocked()
	for i, tk := range t.issued {
		if subtle.ConstantTimeCompare([]byte(tk.value), []byte(v)) == 1 {
			t.issued = append(t.issued[:i], t.issued[i+1:]...)
			return true
		}
	}
	return false
}

func (t *tickets) pruneLocked() {
	now := t.now()
	i := 0
	for i < len(t.issued) && !now.Before(t.issued[i].expires) {
		i++
	}
	t.issued = t.issued[i:]
}
