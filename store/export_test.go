package store

import "os"

// NoSyncForTest skips fsync on commits, for tests that build files whose
// durability is not what they test (the commit path is otherwise the same).
func NoSyncForTest(db *DB) { db.bolt.NoSync = true }

// HoldJournalForTest stops the background apply, so journal records stay
// out of bbolt until a read settles them, a write commits or Close.
func HoldJournalForTest(db *DB) {
	if db.applierStop != nil {
		close(db.applierStop)
		<-db.applierDone
		db.applierStop = nil
	}
}

// CrashForTest drops db the way a power cut would once the journal's
// writes are on disk: nothing more reaches bbolt, the files are closed and
// the unclean-shutdown marker stays.
func CrashForTest(db *DB) {
	HoldJournalForTest(db)
	db.mu.Lock()
	db.closed = true
	for db.busy {
		db.idle.Wait()
	}
	db.mu.Unlock()
	db.journal.close()
	db.bolt.Close()
	if db.marker != nil {
		db.marker.Close()
	}
}

// MarkerUnclean reports whether the marker beside the database at path
// records an unclean stop.
func MarkerUnclean(path string) bool { return markerUnclean(path) }

// JournalPendingForTest is how many journal records bbolt has not taken.
func JournalPendingForTest(db *DB) int { return len(db.journal.unapplied()) }

// BreakJournalForTest closes the journal's file under it, so its next
// write fails the way a failing card would.
func BreakJournalForTest(db *DB) { db.journal.f.Close() }

// WalkedAtOpen reports whether Open walked the file (rather than finding it
// as its last clean close left it).
func WalkedAtOpen(db *DB) bool { return db.walked }

// SettleChangeTime is settleChangeTime.
func SettleChangeTime(ctime int64) bool { return settleChangeTime(ctime) }

// FreelistPageForTest is the freelist page the newest meta names, or 0.
func FreelistPageForTest(db *DB) uint64 {
	st, err := db.file.Stat()
	if err != nil {
		return 0
	}
	metas, _ := readMetas(db.file, st.Size())
	if len(metas) == 0 || metas[0].freelist == noFreelist {
		return 0
	}
	return metas[0].freelist
}

// RecordFileForTest rewrites the marker text's record so it describes the
// file at path as it is now.
func RecordFileForTest(t interface{ Fatal(...any) }, marker, path string) string {
	rec := parseCloseRecord(marker)
	if rec == nil {
		t.Fatal("the marker holds no record: " + marker)
	}
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	now, _ := fileState(st)
	now.txid, now.sessions, now.pages, now.free = rec.txid, rec.sessions, rec.pages, rec.free
	return now.encode()
}
