package store

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	bolt "go.etcd.io/bbolt"
)

// bbolt never gives pages back to the file system: a file that once held
// many sessions keeps its size after they are deleted (the TTL sweep, /new),
// and the free pages are only reused by later writes. When most of the file
// is free, Open copies the live records into a new file and swaps it in.
//
// When: at open only, when the pages below the high water mark are more than
// half free and the free part is at least compactMinFree. Start is the one
// moment no transaction is open, so no reader has to be paused, and the walk
// Open does anyway has just counted the reachable pages, so deciding costs
// nothing. The threshold keeps compaction rare (an SD card's writes are
// precious): a small file is never worth it, and a file grows back into its
// free pages before it grows at all.
//
// Crash safety: the copy is written to perch.db.compact, synced, and renamed
// over perch.db (then the directory is synced). A power cut before the
// rename leaves the original untouched (the next open deletes the partial
// copy); after it, the name points to a complete, synced file. The lock on
// the original is held throughout, so no other process writes to it.

// compactMinFree is the least free space worth a compaction.
const compactMinFree = 4 << 20

// Compaction reports what Open's compaction did.
type Compaction struct {
	Before   int64         `json:"before_bytes"`
	After    int64         `json:"after_bytes"`
	Duration time.Duration `json:"duration_ns"`
	// Error is set when the compaction failed; the original was kept.
	Error string `json:"error,omitempty"`
}

// Compaction returns what Open's compaction did, or nil when the file was
// not compacted.
func (db *DB) Compaction() *Compaction {
	if db.compaction == nil {
		return nil
	}
	c := *db.compaction
	return &c
}

func worthCompacting(chk *fileCheck) bool {
	if chk.reached > chk.pages {
		return false
	}
	return worthCompactingPages(chk.pages, chk.pages-chk.reached, chk.meta.pageSize)
}

// worthCompactingPages decides for a file of pages pages (its high water
// mark), free of them free.
func worthCompactingPages(pages, free uint64, pageSize uint32) bool {
	return free <= pages && free*uint64(pageSize) >= compactMinFree && free*2 > pages
}

// compactFile copies the database open (and locked) through f into a new
// file and renames it over path. It closes f.
func compactFile(path string, f *os.File, timeout time.Duration) *Compaction {
	start := time.Now()
	info := &Compaction{}
	if st, err := f.Stat(); err == nil {
		info.Before = st.Size()
	}
	err := compactInto(path, f, timeout)
	info.Duration = time.Since(start)
	if err != nil {
		info.Error = err.Error()
		os.Remove(compactPath(path))
		return info
	}
	if st, err := os.Stat(path); err == nil {
		info.After = st.Size()
	}
	return info
}

func compactInto(path string, f *os.File, timeout time.Duration) (err error) {
	// Read through bbolt, read-only, on the locked descriptor: no freelist
	// walk (the file was just checked), and the lock (shared from here on)
	// still keeps every writer out.
	src, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, OpenFile: reuseFile(f), Timeout: timeout})
	if err != nil {
		// bbolt closed f.
		return fmt.Errorf("store: compact %s: %w", path, err)
	}
	defer src.Close()
	tmp := compactPath(path)
	tf, err := lockFile(tmp, true, timeout, nil)
	if err != nil {
		return err
	}
	if err := tf.Truncate(0); err != nil {
		tf.Close()
		return err
	}
	dst, err := bolt.Open(tmp, 0o600, &bolt.Options{
		// Synced once at the end: nothing points to this file yet.
		NoSync:         true,
		NoFreelistSync: true,
		FreelistType:   bolt.FreelistMapType,
		OpenFile:       reuseFile(tf),
	})
	if err != nil {
		return fmt.Errorf("store: compact %s: %w", path, err)
	}
	// Commit every 4 MiB of records: memory stays bounded.
	if err := bolt.Compact(dst, src, 4<<20); err != nil {
		dst.Close()
		return fmt.Errorf("store: compact %s: %w", path, err)
	}
	if err := tf.Sync(); err != nil {
		dst.Close()
		return fmt.Errorf("store: compact %s: sync: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		dst.Close()
		return fmt.Errorf("store: compact %s: %w", path, err)
	}
	dst.Close()
	return syncDir(filepath.Dir(path))
}
