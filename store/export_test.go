package store

// NoSyncForTest skips fsync on commits, for tests that build files whose
// durability is not what they test (the commit path is otherwise the same).
func NoSyncForTest(db *DB) { db.bolt.NoSync = true }
