package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"
)

// SchemaVersion is the layout this code reads and writes.
const SchemaVersion = 1

// Bucket names.
const (
	BucketMeta     = "meta"
	BucketSessions = "sessions"
	BucketCron     = "cron"
	BucketDevices  = "devices"
)

var (
	keySchema = []byte("schema")
	keyUsage  = []byte("usage")
	keyInfo   = []byte("info")
	keyMsgs   = []byte("msgs")
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
}

// DB is an open store.
type DB struct {
	bolt *bolt.DB
	path string

	// Group commit state: the writer that finds the store idle commits
	// (the leader); writers arriving meanwhile queue in pending and go
	// into the next transaction together.
	mu      sync.Mutex
	pending []*op
	busy    bool
	closed  bool
	idle    *sync.Cond // signalled when busy turns false

	cache *historyCache
}

type op struct {
	fn   func(*bolt.Tx) error
	done chan error
}

// maxBatch bounds one group commit; beyond it the next commit takes the rest.
const maxBatch = 256

// Open opens (creating when absent) the database at path.
func Open(path string, opts Options) (*DB, error) {
	if opts.Timeout == 0 {
		opts.Timeout = time.Second
	}
	if opts.CacheSessions == 0 {
		opts.CacheSessions = 32
	}
	b, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout: opts.Timeout,
		// The freelist is rebuilt on open instead of written on every
		// commit: fewer pages per commit on an SD card.
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
	})
	if errors.Is(err, berrors.ErrTimeout) {
		who := "another perch process"
		if opts.LockHolder != nil {
			if h := opts.LockHolder(); h != "" {
				who += " (" + h + ")"
			}
		}
		return nil, fmt.Errorf("%w by %s: %s; stop it first, or use the CLI while it runs (it talks to the gateway's API)", ErrLocked, who, path)
	}
	if err != nil {
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	if err := initialise(b); err != nil {
		b.Close()
		if errors.Is(err, ErrNewerSchema) {
			return nil, err
		}
		return nil, fmt.Errorf("store: initialise %s: %w", path, err)
	}
	db := &DB{
		bolt:  b,
		path:  path,
		cache: newHistoryCache(opts.CacheSessions),
	}
	db.idle = sync.NewCond(&db.mu)
	return db, nil
}

// initialise checks the schema and creates missing buckets. A file that is
// already set up costs only a read transaction: a write would cost two
// fsyncs on every start.
func initialise(b *bolt.DB) error {
	ready := false
	err := b.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket([]byte(BucketMeta))
		if meta == nil {
			return nil
		}
		if v := meta.Get(keySchema); v != nil {
			if n := binary.BigEndian.Uint64(v); n > SchemaVersion {
				return fmt.Errorf("%w: file has schema %d, this perch knows %d; upgrade perch", ErrNewerSchema, n, SchemaVersion)
			}
		} else {
			return nil
		}
		for _, name := range []string{BucketSessions, BucketCron, BucketDevices} {
			if tx.Bucket([]byte(name)) == nil {
				return nil
			}
		}
		ready = true
		return nil
	})
	if err != nil || ready {
		return err
	}
	return b.Update(func(tx *bolt.Tx) error {
		meta, err := tx.CreateBucketIfNotExists([]byte(BucketMeta))
		if err != nil {
			return err
		}
		if meta.Get(keySchema) == nil {
			if err := meta.Put(keySchema, u64(SchemaVersion)); err != nil {
				return err
			}
		}
		for _, name := range []string{BucketSessions, BucketCron, BucketDevices} {
			if _, err := tx.CreateBucketIfNotExists([]byte(name)); err != nil {
				return err
			}
		}
		return nil
	})
}

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

// Close waits for queued writes to commit, then closes the file.
func (db *DB) Close() error {
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
	return db.bolt.Close()
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
	err := db.bolt.Update(func(tx *bolt.Tx) error {
		for _, o := range batch {
			if err := o.fn(tx); err != nil {
				return &opError{o, err}
			}
		}
		return nil
	})
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
