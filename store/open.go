package store

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	bolt "go.etcd.io/bbolt"
)

// Open opens (creating when absent) the database at path.
//
// Before bbolt reads the file, the store walks it itself (pagewalk.go):
// bbolt walks every page at open and trusts what it finds, so a damaged page
// or a truncated file would end the process in a panic or a fault that
// nothing can recover, again at every restart. The walk at every open is
// structural (each page in range, of the right type, reached once, keys in
// order); after an unclean shutdown (the marker file beside the database
// was left behind) every record is decoded too. A damaged file is renamed
// to perch.db.damaged-<UTC time> beside the original, a fresh file takes its
// place, and whatever is still readable is copied into it (Salvage);
// Recovered says what happened. With Options.NoRecover, Open returns an
// ErrDamaged error instead.
//
// A file from a newer perch (a higher schema) is refused before anything is
// written; an older schema is migrated forward in one transaction. A file
// that is mostly free pages is compacted first (compact.go).
func Open(path string, opts Options) (*DB, error) {
	if opts.Timeout == 0 {
		opts.Timeout = time.Second
	}
	if opts.CacheSessions == 0 {
		opts.CacheSessions = 32
	}
	if opts.SensorFlush <= 0 {
		opts.SensorFlush = 5 * time.Minute
	}
	return open(path, opts, true)
}

func open(path string, opts Options, mayCompact bool) (*DB, error) {
	f, err := lockFile(path, true, opts.Timeout, opts.LockHolder)
	if err != nil {
		return nil, err
	}
	// Leftovers of an interrupted compaction; the lock says no one else is
	// compacting.
	os.Remove(compactPath(path))
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	mk, unclean, closed := readMarker(path)
	closeMarker := func() {
		if mk != nil {
			mk.Close()
		}
	}
	var rec *Recovered
	sessions := 0
	freelist, walked := false, false
	if skip, compact := asClosed(f, st, closed, unclean); skip && !(mayCompact && compact) {
		sessions, freelist = int(closed.sessions), true
	} else if st.Size() > 0 {
		walked = true
		r, unmap := loadFile(f, inUse(f, st.Size()))
		chk := verifyFile(r, st.Size(), unclean, !unclean)
		unmap()
		switch {
		case !chk.sound() && opts.NoRecover:
			f.Close()
			closeMarker()
			return nil, &DamagedError{Path: path, Problems: chk.problems, Count: chk.nProblems}
		case !chk.sound():
			f, rec, err = setAside(path, f, chk, unclean, opts)
			if err != nil {
				closeMarker()
				return nil, err
			}
		case chk.schema > SchemaVersion:
			f.Close()
			closeMarker()
			return nil, &newerSchemaError{path: path, have: chk.schema}
		case mayCompact && worthCompacting(chk):
			// compactFile closes f; on failure the original is untouched
			// and opens as it is.
			info := compactFile(path, f, opts.Timeout)
			closeMarker()
			db, err := open(path, opts, false)
			if db != nil {
				db.compaction = info
			}
			return db, err
		default:
			sessions = chk.counts.sessions
			freelist = chk.meta.freelist != noFreelist
		}
	}
	if mk, err = writeOpen(path, mk); err != nil {
		f.Close()
		return nil, fmt.Errorf("store: open %s: marker file: %w", path, err)
	}
	b, err := bolt.Open(path, 0o600, &bolt.Options{
		Timeout: opts.Timeout,
		// The freelist is rebuilt on open instead of written on every
		// commit: fewer pages per commit on an SD card.
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
		OpenFile:       reuseFile(f),
	})
	if err != nil {
		// bbolt closed f.
		restoreMarker(mk, unclean)
		return nil, fmt.Errorf("store: open %s: %w", path, err)
	}
	db := &DB{
		path:    path,
		file:    f,
		walked:  walked,
		marker:  mk,
		cache:   newHistoryCache(opts.CacheSessions),
		sensors: newSensorBuffer(opts.SensorFlush),

		onWriteError: opts.OnWriteError,
	}
	db.bolt = &guardedBolt{DB: b, owner: db}
	db.idle = sync.NewCond(&db.mu)
	if err := initialise(b); err != nil {
		b.Close()
		restoreMarker(mk, unclean)
		var newer *newerSchemaError
		if errors.As(err, &newer) {
			newer.path = path
			return nil, err
		}
		return nil, fmt.Errorf("store: initialise %s: %w", path, err)
	}
	if rec != nil {
		db.finishRecovery(rec)
		sessions = db.countSessions()
	} else if note, err := loadRecovered(b); err == nil {
		db.recovered = note
		if note != nil {
			dropOrphanJournal(note.DamagedPath)
		}
	}
	db.sessions.Store(int64(sessions))
	if opts.CacheSessions > 0 {
		// Without a cache there is nowhere to keep a history that bbolt
		// has not taken yet, so every append goes to bbolt directly.
		if err := db.openJournal(); err != nil {
			b.Close()
			restoreMarker(mk, unclean)
			return nil, err
		}
	}
	db.openTx, db.freelistAtOpen = db.txID(), freelist
	if opts.SessionTTL > 0 {
		db.sweep = startSweeper(db, opts.SessionTTL)
	}
	return db, nil
}

// asClosed reports whether the file is exactly as the clean close that
// recorded closed left it (the walk at open can then be skipped), and
// whether that close found it worth compacting. Its newest valid meta page
// must be the transaction the close wrote last, with its freelist written.
func asClosed(f *os.File, st os.FileInfo, closed *closeRecord, unclean bool) (skip, compact bool) {
	if unclean || closed == nil || st.Size() == 0 || !closed.unchanged(st) {
		return false, false
	}
	metas, _ := readMetas(f, st.Size())
	if len(metas) == 0 {
		return false, false
	}
	m := metas[0]
	if m.txid != closed.txid || m.freelist == noFreelist || m.pgid != closed.pages || int64(m.pgid)*int64(m.pageSize) > st.Size() {
		return false, false
	}
	// bbolt reads the freelist page at open, and trusts it: it must be a
	// freelist whose ids lie inside the file, each once, and none a meta
	// page or the list's own.
	w := newWalker(f, st.Size(), m, &checkVisitor{c: &fileCheck{}})
	w.stopEarly = true
	w.markSeen(0, 1)
	w.checkFreelist(m.freelist)
	if !w.stopped() {
		w.checkFreeUnused(m.freelist)
	}
	if w.nProblems > 0 {
		return false, false
	}
	return true, worthCompactingPages(closed.pages, closed.free, m.pageSize)
}

// markerPath is the file that says whether the last writer closed the
// database cleanly (marker.go).
func markerPath(path string) string { return path + ".open" }

// compactPath is where a compacted copy is built before it replaces the
// database.
func compactPath(path string) string { return path + ".compact" }

// DamagedError is returned by Open with Options.NoRecover for a damaged
// file; it matches ErrDamaged.
type DamagedError struct {
	Path     string
	Problems []string
	Count    int
}

func (e *DamagedError) Error() string {
	first := "damaged"
	if len(e.Problems) > 0 {
		first = e.Problems[0]
	}
	more := ""
	if e.Count > 1 {
		more = fmt.Sprintf(" (and %d more problems)", e.Count-1)
	}
	return fmt.Sprintf("store: %s is damaged: %s%s; run `perch db check` for details, `perch db salvage` to copy out what is readable, or start the gateway to set it aside and start afresh", e.Path, first, more)
}

func (e *DamagedError) Is(target error) bool { return target == ErrDamaged }

type newerSchemaError struct {
	path string
	have uint64
}

func (e *newerSchemaError) Error() string {
	return fmt.Sprintf("store: database schema v%d is newer than this perch (v%d); upgrade perch or restore a backup (%s was not changed)", e.have, SchemaVersion, e.path)
}

func (e *newerSchemaError) Is(target error) bool { return target == ErrNewerSchema }
