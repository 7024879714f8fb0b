// Package store keeps Perch's durable state in one bbolt file: conversation
// history per session, cron jobs, device state and metadata.
//
// # Concepts
//
// Buckets: "meta" (schema version, token totals), "sessions" (one nested
// bucket per session key holding its messages by sequence number and an
// "info" record), "cron" and "devices" (JSON records by id).
//
// Writes go through a group committer: a single goroutine takes every write
// waiting at that moment and commits them in one bbolt transaction, so N
// concurrent turns cost one pair of fsyncs instead of N, with no added delay
// when only one write is waiting. Each write is acknowledged only after its
// transaction is on disk. A write whose function fails is retried alone so it
// cannot fail its neighbours (the same contract as bbolt's DB.Batch, without
// Batch's fixed delay).
//
// History reads are served from a small cache of recently used sessions,
// updated after each commit; the store is the only writer of the file, so the
// cache cannot go stale.
package store
