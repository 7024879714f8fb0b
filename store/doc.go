// Package store keeps Perch's durable state in one bbolt file: conversation
// history per session, cron jobs, device state, sensor history and metadata.
//
// # Concepts
//
// Buckets: "meta" (schema version, token totals, the note of the last
// recovery), "sessions" (one nested bucket per session key holding its
// messages by sequence number and an "info" record), "cron" and "devices"
// (JSON records by id), "sensors" (per sensor and quantity: raw samples for
// 48 hours and hourly rollups for a year; sensors.go). The schema carries a
// version and migrates forward at open (migrate.go); a file from a newer
// perch is refused untouched.
//
// Writes are group-committed: the writer that finds the store idle commits
// at once in its own goroutine, and every write that arrives while that
// commit is on its way to disk goes into the next transaction together, so N
// concurrent turns cost one pair of fsyncs instead of N, and a lone write
// waits for no timer and no other goroutine. Each write is acknowledged only
// after its transaction is on disk. A write whose function fails is retried
// alone so it cannot fail its neighbours (the same contract as bbolt's
// DB.Batch, without Batch's fixed delay).
//
// A session append, the write of every turn, goes through a journal first
// (journal.go): one synced write to a small preallocated file beside the
// database instead of bbolt's two, and bbolt takes the appends a moment
// later, many per commit. Every bbolt commit applies the journal's pending
// records first, and Open replays what a crash left only in the journal,
// so nothing acknowledged is lost or applied twice.
//
// History reads are served from a small cache of recently used sessions,
// updated after each commit; the store is the only writer of the file, so the
// cache cannot go stale. A session with appends still only in the journal
// stays in the cache until bbolt has them.
//
// # Damage
//
// bbolt trusts its file, and a damaged page or a truncated file makes it
// panic or fault inside a goroutine of its own, where nothing can recover.
// So Open reads the file itself first, page by page with every bound checked
// (pagewalk.go): at every open the structure, after an unclean shutdown
// every record. A damaged file is kept beside the database as
// perch.db.damaged-<UTC time>, a fresh file takes its place with whatever
// could be read from the damaged one (salvage.go), and Recovered reports it.
// CheckFile and Salvage serve `perch db check` and `perch db salvage`.
// Every file the store keeps beside the database has a name starting with
// the database's: .open (the unclean-shutdown marker), .journal (appends
// ahead of bbolt, 2 MiB), .compact (a compaction in progress), .damaged-…
// (damaged copies, three at most).
//
// # Growth
//
// Sessions idle longer than Options.SessionTTL are deleted by a background
// sweep (retention.go); a file that became mostly free pages is compacted at
// open (compact.go). SessionCount is kept in memory, so readiness checks
// need not walk the sessions.
package store
