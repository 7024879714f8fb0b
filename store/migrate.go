package store

import (
	"encoding/binary"
	"fmt"

	bolt "go.etcd.io/bbolt"
)

// SchemaVersion is the layout this code reads and writes. Every change to
// what the buckets hold gets a new number and a migration below, so an
// update keeps everything a board holds.
//
//   - v1 (perch 0.1): meta (schema, usage), sessions (per session: info,
//     msgs), cron and devices.
//   - v2 (perch 0.2): adds sensors (per sensor and quantity: unit, raw hour
//     blocks, hourly rollup day blocks; sensors.go) and the meta note of a
//     recovery (recover.go).
const SchemaVersion = 2

// migrations[v] turns schema v into v+1, inside the transaction that also
// writes the new number: a migration interrupted by a power cut leaves the
// file as it was.
var migrations = map[uint64]func(tx *bolt.Tx) error{
	1: func(tx *bolt.Tx) error {
		_, err := tx.CreateBucketIfNotExists([]byte(BucketSensors))
		return err
	},
}

// topBuckets are the buckets every current file has.
var topBuckets = []string{BucketSessions, BucketCron, BucketDevices, BucketSensors}

// initialise creates the buckets of a new file and migrates an older one.
// A file that is already current costs only a read transaction: a write
// would cost two fsyncs on every start.
func initialise(b *bolt.DB) error {
	var have uint64
	ready := false
	err := b.View(func(tx *bolt.Tx) error {
		meta := tx.Bucket([]byte(BucketMeta))
		if meta == nil {
			return nil
		}
		v := meta.Get(keySchema)
		if len(v) != 8 {
			return nil
		}
		have = binary.BigEndian.Uint64(v)
		if have > SchemaVersion {
			return &newerSchemaError{have: have}
		}
		for _, name := range topBuckets {
			if tx.Bucket([]byte(name)) == nil {
				return nil
			}
		}
		ready = have == SchemaVersion
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
		if have == 0 {
			// A new file (or one whose number was lost): it gets every
			// bucket below and the current number.
			have = SchemaVersion
		}
		for v := have; v < SchemaVersion; v++ {
			m := migrations[v]
			if m == nil {
				return fmt.Errorf("no migration from schema v%d", v)
			}
			if err := m(tx); err != nil {
				return fmt.Errorf("migrate schema v%d to v%d: %w", v, v+1, err)
			}
		}
		for _, name := range topBuckets {
			if _, err := tx.CreateBucketIfNotExists([]byte(name)); err != nil {
				return err
			}
		}
		return meta.Put(keySchema, u64(SchemaVersion))
	})
}
