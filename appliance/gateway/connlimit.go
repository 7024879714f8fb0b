package gateway

import (
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/perchhq/perch/appliance/gateway/attempts"
)

// limitListener caps the connections the server holds. Each costs a
// goroutine and buffers (about 11 KiB: 4,000 half-open connections took a
// board from 12.5 to 58 MB), so a client may hold perClient at most — its
// connections beyond that are closed as soon as they are accepted — and
// all clients together max: beyond that, Accept waits for a slot and new
// connections queue in the kernel's backlog, which costs the process
// nothing. With the header timeout, a slot held by a connection that sends
// nothing is back within seconds.
type limitListener struct {
	net.Listener
	slots     chan struct{}
	perClient int
	refused   *attempts.Tally
	log       *slog.Logger
	lastFull  atomic.Int64 // unix seconds of the last "all slots taken" line

	mu   sync.Mutex
	held map[attempts.Client]int

	done      chan struct{}
	closeOnce sync.Once
}

func newLimitListener(ln net.Listener, max, perClient int, log *slog.Logger) *limitListener {
	return &limitListener{
		Listener: ln, slots: make(chan struct{}, max), perClient: perClient, log: log,
		held: map[attempts.Client]int{}, done: make(chan struct{}),
		refused: attempts.NewTally(attempts.TallyOptions{
			First: func(c attempts.Client) {
				log.Warn("gateway: refusing connections from a client that holds its share already", "client", c.String(), "share", perClient)
			},
			Report: func(s attempts.Summary) {
				log.Warn("gateway: connections refused over a client's share", s.LogAttrs()...)
			},
		}),
	}
}

// Accept returns the next connection within the caps.
func (l *limitListener) Accept() (net.Conn, error) {
	for {
		select {
		case l.slots <- struct{}{}:
		default:
			l.noteFull()
			select {
			case l.slots <- struct{}{}:
			case <-l.done:
				return nil, net.ErrClosed
			}
		}
		c, err := l.Listener.Accept()
		if err != nil {
			<-l.slots
			return nil, err
		}
		client := attempts.ClientOf(c.RemoteAddr().String())
		l.mu.Lock()
		n := l.held[client]
		if n >= l.perClient {
			l.mu.Unlock()
			<-l.slots
			c.Close()
			l.refused.Add(client)
			continue
		}
		l.held[client] = n + 1
		l.mu.Unlock()
		return &limitConn{Conn: c, l: l, client: client}, nil
	}
}

// noteFull logs, at most once a minute, that every slot is taken.
func (l *limitListener) noteFull() {
	now := time.Now().Unix()
	if last := l.lastFull.Load(); now-last >= 60 && l.lastFull.CompareAndSwap(last, now) {
		l.log.Warn("gateway: every connection slot is taken; new connections wait for one", "slots", cap(l.slots))
	}
}

// Close stops accepting, also when Accept waits for a slot.
func (l *limitListener) Close() error {
	l.closeOnce.Do(func() {
		close(l.done)
		l.refused.Close()
	})
	return l.Listener.Close()
}

func (l *limitListener) release(client attempts.Client) {
	l.mu.Lock()
	if n := l.held[client]; n <= 1 {
		delete(l.held, client)
	} else {
		l.held[client] = n - 1
	}
	l.mu.Unlock()
	<-l.slots
}

// limitConn gives its slot back when closed.
type limitConn struct {
	net.Conn
	l      *limitListener
	client attempts.Client
	once   sync.Once
}

func (c *limitConn) Close() error {
	err := c.Conn.Close()
	c.once.Do(func() { c.l.release(c.client) })
	return err
}

// CloseWrite keeps net/http's lingering close (it half-closes TCP
// connections before closing them after an error).
func (c *limitConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// inUse is how many slots connections hold now.
func (l *limitListener) inUse() int { return len(l.slots) }

// heldBy is how many connections the client at host holds now.
func (l *limitListener) heldBy(host string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.held[attempts.ClientOf(net.JoinHostPort(host, "1"))]
}
