package store

import (
	"fmt"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// SessionCount is the number of stored sessions, kept in memory (counted by
// the walk at open, then updated by every write that adds or removes one),
// so readiness and status checks need not walk the sessions bucket.
func (db *DB) SessionCount() int { return int(db.sessions.Load()) }

func (db *DB) countSessions() int {
	n := 0
	_ = db.bolt.View(func(tx *bolt.Tx) error {
		c := tx.Bucket([]byte(BucketSessions)).Cursor()
		for k, v := c.First(); k != nil; k, v = c.Next() {
			if v == nil {
				n++
			}
		}
		return nil
	})
	return n
}

// sweepBatch is how many sessions one sweep transaction deletes: each frees
// its pages, and a smaller transaction keeps turns' commits from waiting.
const sweepBatch = 64

// maxSweep bounds the sessions one call examines for deletion, so a first
// sweep over years of sessions stays short; the next sweep takes the rest.
const maxSweep = 4096

// DeleteIdleSessions deletes the sessions last updated before cutoff and
// returns how many it deleted. It reads the sessions' info records (not
// their messages) in one read transaction, then deletes in transactions of
// sweepBatch, checking each session again inside the deleting transaction
// so one that a turn updated meanwhile stays. A session without a readable
// info record cannot be dated and is kept.
func (db *DB) DeleteIdleSessions(cutoff time.Time) (int, error) {
	return db.deleteIdle(cutoff, nil)
}

// deleteIdle is DeleteIdleSessions with each session's last update read
// through shift (nil: as stored).
func (db *DB) deleteIdle(cutoff time.Time, shift func(time.Time) time.Time) (int, error) {
	var idle [][]byte
	err := db.sessionsView(func(tx *bolt.Tx) error {
		sb := tx.Bucket([]byte(BucketSessions))
		c := sb.Cursor()
		for k, v := c.First(); k != nil && len(idle) < maxSweep; k, v = c.Next() {
			if v != nil {
				continue
			}
			if isIdle(sb.Bucket(k), cutoff, shift) {
				idle = append(idle, append([]byte(nil), k...))
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("store: sweep idle sessions: %w", err)
	}
	deleted := 0
	for len(idle) > 0 {
		batch := idle[:min(sweepBatch, len(idle))]
		idle = idle[len(batch):]
		var gone []string
		err := db.update(func(tx *bolt.Tx) error {
			gone = gone[:0]
			sb := tx.Bucket([]byte(BucketSessions))
			for _, k := range batch {
				if !isIdle(sb.Bucket(k), cutoff, shift) {
					continue
				}
				if err := sb.DeleteBucket(k); err != nil {
					return err
				}
				gone = append(gone, string(k))
			}
			return nil
		})
		if err != nil {
			return deleted, fmt.Errorf("store: sweep idle sessions: %w", err)
		}
		for _, k := range gone {
			db.cache.drop(k)
		}
		db.sessions.Add(-int64(len(gone)))
		deleted += len(gone)
	}
	return deleted, nil
}

func isIdle(sess *bolt.Bucket, cutoff time.Time, shift func(time.Time) time.Time) bool {
	if sess == nil {
		return false
	}
	v := sess.Get(keyInfo)
	if v == nil {
		return false
	}
	var info infoRecord
	if info.unmarshal(v) != nil {
		return false
	}
	updated := info.Updated
	if shift != nil {
		updated = shift(updated)
	}
	return updated.Before(cutoff)
}

// clockJump is how far the wall clock may move against the monotonic one
// before the sweep reads the sessions written meanwhile as dated by the
// clock before the move.
const clockJump = 10 * time.Minute

// clockShift corrects the dates written by a clock that was set forward
// after the store opened: a board without a real-time clock can start
// before its time server answers, on the time it saved at its last
// shutdown, and learn months later that it is months later. A session a
// person used in between is dated months ago, and the sweep would delete
// it within the hour. openedWall is the wall clock at open, elapsed the
// monotonic time since, now the wall clock now: a date between the open
// and openedWall+elapsed is moved forward by the jump, so it is read as
// recent whether it was written before the clock was set (when it is then
// right) or after (when it only reads newer, which keeps it). A clock set
// back needs nothing: the dates it leaves ahead read as recent. Dates
// written by an earlier run on a wrong clock are beyond its reach.
func clockShift(openedWall time.Time, elapsed time.Duration, now time.Time) func(time.Time) time.Time {
	jump := now.Sub(openedWall) - elapsed
	if jump <= clockJump {
		return nil
	}
	end := openedWall.Add(elapsed)
	return func(t time.Time) time.Time {
		if t.Before(openedWall) || t.After(end) {
			return t
		}
		return t.Add(jump)
	}
}

// sweeper deletes idle sessions in the background: first a minute after
// open (never on the start-up path), then every sweepEvery.
type sweeper struct {
	stopOnce sync.Once
	quit     chan struct{}
	done     chan struct{}
	// Last is the outcome of the last sweep, for tests and status.
	mu      sync.Mutex
	last    time.Time
	deleted int
	err     error
}

var (
	sweepFirst = time.Minute
	sweepEvery = time.Hour
)

func startSweeper(db *DB, ttl time.Duration) *sweeper {
	s := &sweeper{quit: make(chan struct{}), done: make(chan struct{})}
	opened := time.Now()
	go func() {
		defer close(s.done)
		t := time.NewTimer(sweepFirst)
		defer t.Stop()
		for {
			select {
			case <-s.quit:
				return
			case <-t.C:
			}
			now := time.Now()
			n, err := db.deleteIdle(now.Add(-ttl), clockShift(opened.Round(0), now.Sub(opened), now.Round(0)))
			s.mu.Lock()
			s.last, s.deleted, s.err = time.Now(), s.deleted+n, err
			s.mu.Unlock()
			t.Reset(sweepEvery)
		}
	}()
	return s
}

func (s *sweeper) stop() {
	if s == nil {
		return
	}
	s.stopOnce.Do(func() { close(s.quit) })
	<-s.done
}

// SweepStats says when the idle-session sweep last ran, how many sessions
// it has deleted since open, and its last error (zero values without a
// sweep: Options.SessionTTL unset).
func (db *DB) SweepStats() (last time.Time, deleted int, err error) {
	s := db.sweep
	if s == nil {
		return time.Time{}, 0, nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, s.deleted, s.err
}
