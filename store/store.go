package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Bucket names.
const (
	BucketMeta     = "meta"
	BucketSessions = "sessions"
	BucketCron     = "cron"
	BucketDevices  = "devices"
	BucketSensors  = "sensors"
)

var (
	keySchema = []byte("schema")
	keyUsage  = []byte("usage")
	keyInfo   = []byte("info")
	keyMsgs   = []byte("msgs")
	// keyCleanClose holds when the store was last closed cleanly (Unix
	// seconds, big-endian); see writeFreelist.
	keyCleanClose = []byte("clean_close")
)

// Options tune Open.
type Options struct {
	// Timeout bounds the wait for the file lock (default 1s).
	Timeout time.Duration
	// LockHolder, when set, names who holds the lock (e.g. "pid 1234") for
	// the ErrLocked message.
	LockHolder func() string
	// CacheSessions is how many sessions' histories stay decoded in memory
	// (default 32; negative disables the cache).
	CacheSessions int
	// NoRecover makes Open return an ErrDamaged error for a damaged file
	// instead of setting it aside and starting on a fresh one.
	NoRecover bool
	// SessionTTL, when positive, deletes sessions idle longer than this in
	// a background sweep (see DeleteIdleSessions); Close stops it.
	SessionTTL time.Duration
	// SensorFlush is how long sensor readings may wait in memory before
	// they are written (default 5 minutes; see AppendReadings).
	SensorFlush time.Duration
	// OnWriteError, when set, is told when the database starts failing to
	// take what the journal holds (a full disk: err) and when it takes it
	// again (nil), from the goroutine that applies the journal.
	OnWriteError func(err error)
}

// DB is an open store.
type DB struct {
	// bolt recovers panics and memory faults of damaged pages into errors
	// (guard.go).
	bolt *guardedBolt
	path string
	// file is the database file bbolt reads and writes (it closes it).
	file *os.File
	// walked says whether Open walked the file, or found it as its last
	// clean close left it (marker.go).
	walked bool
	// marker says while the database is open that it is (marker.go).
	marker *os.File

	// Group commit state: the writer that finds the store idle commits
	// (the leader); writers arriving meanwhile queue in pending and go
	// into the next transaction together.
	mu      sync.Mutex
	pending []*op
	busy    bool
	closed  bool
	idle    *sync.Cond // signalled when busy turns false

	cache *historyCache

	// sessions counts the sessions bucket's entries, so readiness and
	// status need not walk it.
	sessions     atomic.Int64
	recovered    *Recovered
	recoveredNow bool
	compaction   *Compaction
	damage       atomic.Pointer[damageNote]
	sweep        *sweeper
	// openTx is bbolt's transaction id when Open returned; freelistAtOpen
	// says the file had its freelist written then (writeFreelist).
	openTx         int
	freelistAtOpen bool
	sensors        *sensorBuffer

	// journal makes appends durable ahead of bbolt (journal.go); nil
	// without a history cache.
	journal     *journal
	replayed    int
	applierStop chan struct{}
	applierDone chan struct{}
	// writeErr is why bbolt last failed to take the journal's records (a
	// full disk), until it takes them.
	writeErr     atomic.Pointer[error]
	onWriteError func(error)
}

type op struct {
	fn   func(*bolt.Tx) error
	done chan error
}

// maxBatch bounds one group commit; beyond it the next commit takes the rest.
const maxBatch = 256

// Path is the database file.
func (db *DB) Path() string { return db.path }

// Size is the file's size in bytes.
func (db *DB) Size() int64 {
	st, err := os.Stat(db.path)
	if err != nil {
		return 0
	}
	return st.Size()
}

// Close writes buffered sensor readings, stops the session sweep, waits for
// queued writes to commit, then closes the file. A clean close removes the
// marker that makes the next Open check every record.
func (db *DB) Close() error {
	db.sweep.stop()
	flushErr := db.FlushSensors()
	if db.applierStop != nil {
		close(db.applierStop)
		<-db.applierDone
		db.applierStop = nil
	}
	// A record the journal still holds is applied at the next open
	// otherwise.
	if err := db.settle(); err != nil && flushErr == nil && !errors.Is(err, ErrClosed) {
		flushErr = err
	}
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		return nil
	}
	db.closed = true
	for db.busy {
		db.idle.Wait()
	}
	db.mu.Unlock()
	var closed *closeRecord
	if db.damage.Load() == nil {
		db.writeFreelist()
		closed = db.closeRecord()
	}
	if err := db.bolt.Close(); err != nil {
		return err
	}
	if db.journal != nil {
		db.journal.retire()
		db.journal.close()
	}
	if db.marker != nil {
		// A store that met damage while running leaves the marker saying
		// open: the next start checks every record.
		if db.damage.Load() == nil {
			if closed != nil && !settleChangeTime(closed.ctime) {
				closed = nil
			}
			writeClean(db.marker, closed)
		}
		db.marker.Close()
	}
	return flushErr
}

// writeFreelist commits once more with the freelist written, as the last
// thing before a clean close. While running, commits leave it out (fewer
// pages per commit on an SD card), so an open would have bbolt walk every
// page to rebuild it: a millisecond or more at every start, growing with the
// file. Written here, the next open reads it from its page instead; the walk
// at open (pagewalk.go) checks that no page it lists is in use, and the first
// commit after that open drops it again. A close that fails to write it
// leaves the meta saying there is none, and the next open rebuilds it.
//
// The commit records the time of the close rather than nothing: a change
// makes it write a new root page, so the older meta page keeps a tree of its
// own (the same data) for salvage to fall back on if the newest root page is
// ever damaged; an empty commit would point both metas at one root.
func (db *DB) writeFreelist() {
	if db.bolt.IsReadOnly() {
		return
	}
	if db.freelistAtOpen && db.txID() == db.openTx {
		return // nothing was written since: the file is as Open found it
	}
	db.bolt.NoFreelistSync = false
	_ = db.bolt.Update(func(tx *bolt.Tx) error {
		meta := tx.Bucket([]byte(BucketMeta))
		if meta == nil {
			return nil
		}
		return meta.Put(keyCleanClose, binary.BigEndian.AppendUint64(nil, uint64(time.Now().Unix())))
	})
	db.bolt.NoFreelistSync = true
}

// closeRecord describes the file as the close leaves it, after its last
// commit; nil when a part of it cannot be had (the next open then walks the
// file, as after a close of an earlier version).
func (db *DB) closeRecord() *closeRecord {
	if db.file == nil || db.bolt.IsReadOnly() {
		return nil
	}
	st, err := db.file.Stat()
	if err != nil {
		return nil
	}
	rec, ok := fileState(st)
	if !ok {
		return nil
	}
	// Free as bbolt's freelist counts them, which is what the walk at open
	// would count, give or take the freelist's own pages.
	err = db.bolt.View(func(tx *bolt.Tx) error {
		rec.txid = uint64(tx.ID())
		rec.pages = uint64(tx.Size()) / uint64(db.bolt.Info().PageSize)
		return nil
	})
	if err != nil {
		return nil
	}
	stats := db.bolt.Stats()
	rec.free = uint64(stats.FreePageN + stats.PendingPageN)
	rec.sessions = db.sessions.Load()
	return &rec
}

// txID is the id of bbolt's last committed transaction.
func (db *DB) txID() int {
	id := -1
	_ = db.bolt.View(func(tx *bolt.Tx) error { id = tx.ID(); return nil })
	return id
}

// Check verifies the file's internal consistency (bbolt's tx.Check). It
// runs in a write transaction that is rolled back: in a read transaction
// Check reads the freelist while a concurrent commit changes it.
func (db *DB) Check() error {
	var errs []error
	err := db.bolt.Update(func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			errs = append(errs, err)
		}
		return errRollback
	})
	if err != nil && !errors.Is(err, errRollback) {
		return err
	}
	return errors.Join(errs...)
}

var errRollback = errors.New("store: rollback")

// Ping reports whether the database answers a read, for the readiness check.
func (db *DB) Ping() error {
	db.mu.Lock()
	closed := db.closed
	db.mu.Unlock()
	if closed {
		return ErrClosed
	}
	if err := db.Damaged(); err != nil {
		return err
	}
	return db.bolt.View(func(tx *bolt.Tx) error {
		if tx.Bucket([]byte(BucketMeta)) == nil {
			return errors.New("store: meta bucket missing")
		}
		return nil
	})
}

// update runs fn in a group-committed write transaction and returns once it
// is durable. fn may run more than once (after a neighbour's failure), so it
// must only touch the transaction.
//
// The caller that finds the store idle commits in its own goroutine: at low
// load a write costs no goroutine hand-off at all. Writers that arrive while
// a commit is on its way to disk wait in pending; when the leader's commit
// returns, it hands the next batch to a fresh goroutine and goes back to
// its caller, so no one commits on behalf of others for long.
func (db *DB) update(fn func(*bolt.Tx) error) error {
	o := &op{fn: fn, done: make(chan error, 1)}
	db.mu.Lock()
	if db.closed {
		db.mu.Unlock()
		return ErrClosed
	}
	db.pending = append(db.pending, o)
	if db.busy {
		db.mu.Unlock()
		return <-o.done
	}
	db.busy = true
	batch := db.take()
	db.mu.Unlock()
	db.commit(batch)
	db.next()
	return <-o.done
}

// take removes up to maxBatch pending writes; the caller holds mu.
func (db *DB) take() []*op {
	n := min(len(db.pending), maxBatch)
	batch := db.pending[:n:n]
	db.pending = db.pending[n:]
	if len(db.pending) == 0 {
		db.pending = nil
	}
	return batch
}

// next commits what queued during the last commit, in the background, or
// marks the store idle.
func (db *DB) next() {
	db.mu.Lock()
	if len(db.pending) == 0 {
		db.busy = false
		db.idle.Broadcast()
		db.mu.Unlock()
		return
	}
	batch := db.take()
	db.mu.Unlock()
	go func() {
		db.commit(batch)
		db.next()
	}()
}

type opError struct {
	op  *op
	err error
}

func (e *opError) Error() string { return e.err.Error() }

func (db *DB) commit(batch []*op) {
	var recs []*appendRec
	if db.journal != nil {
		recs = db.journal.unapplied()
	}
	var applied journalApply
	err := db.bolt.Update(func(tx *bolt.Tx) error {
		var err error
		if applied, err = db.applyJournal(tx, recs); err != nil {
			return err
		}
		for _, o := range batch {
			if err := o.fn(tx); err != nil {
				return &opError{o, err}
			}
		}
		return nil
	})
	if err == nil {
		db.journalTaken(recs, applied)
	}
	var oe *opError
	if errors.As(err, &oe) && len(batch) > 1 {
		// One write failed and rolled back the whole transaction: run each
		// alone so only the failing one reports an error.
		for _, o := range batch {
			o.done <- db.bolt.Update(o.fn)
		}
		return
	}
	if oe != nil {
		err = oe.err
	}
	for _, o := range batch {
		o.done <- err
	}
}

func u64(n uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, n)
	return b
}

// Put stores v as JSON under key in bucket (BucketCron, BucketDevices).
func (db *DB) Put(bucket, key string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("store: encode %s/%s: %w", bucket, key, err)
	}
	return db.update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucketIfNotExists([]byte(bucket))
		if err != nil {
			return err
		}
		return b.Put([]byte(key), data)
	})
}

// Get decodes the record key of bucket into v, or returns ErrNotFound.
func (db *DB) Get(bucket, key string, v any) error {
	return db.bolt.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bucket))
		if b == nil {
			return ErrNotFound
		}
		data := b.Get([]byte(key))
		if data == nil {
			return ErrNotFound
		}
		if err := json.Unmarshal(data, v); err != nil {
			return fmt.Errorf("store: decode %s/%s: %w", bucket, key, err)
		}
		return nil
	})
}

// Delete removes key from bucket; absent keys are not an error.
func (db *DB) Delete(bucket, key string) error {
	return db.update(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bucket))
		if b == nil {
			return nil
		}
		return b.Delete([]byte(key))
	})
}

// List calls fn for every record of bucket in key order. The data is valid
// only during the call.
func (db *DB) List(bucket string, fn func(key string, data []byte) error) error {
	return db.bolt.View(func(tx *bolt.Tx) error {
		b := tx.Bucket([]byte(bucket))
		if b == nil {
			return nil
		}
		return b.ForEach(func(k, v []byte) error {
			if v == nil {
				return nil // nested bucket
			}
			return fn(string(k), v)
		})
	})
}

var keyUSB = []byte("usb")

// LoadDevices returns the device service's saved state, or nil when none.
func (db *DB) LoadDevices() ([]byte, error) {
	var out []byte
	err := db.bolt.View(func(tx *bolt.Tx) error {
		if v := tx.Bucket([]byte(BucketDevices)).Get(keyUSB); v != nil {
			out = append([]byte(nil), v...)
		}
		return nil
	})
	return out, err
}

// SaveDevices replaces the device service's saved state.
func (db *DB) SaveDevices(data []byte) error {
	data = append([]byte(nil), data...)
	return db.update(func(tx *bolt.Tx) error {
		return tx.Bucket([]byte(BucketDevices)).Put(keyUSB, data)
	})
}
