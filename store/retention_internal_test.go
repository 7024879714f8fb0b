package store

import (
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"

	"github.com/perchhq/perch/appliance/chat"
)

// TestSweeperDeletesIdleSessions: with Options.SessionTTL the store itself
// deletes sessions idle longer than the TTL, in the background, and Close
// stops it.
func TestSweeperDeletesIdleSessions(t *testing.T) {
	oldFirst, oldEvery := sweepFirst, sweepEvery
	sweepFirst, sweepEvery = 10*time.Millisecond, 20*time.Millisecond
	defer func() { sweepFirst, sweepEvery = oldFirst, oldEvery }()

	path := filepath.Join(t.TempDir(), "perch.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	db.Append("stale", []chat.Message{{Role: "user", Content: "x"}}, chat.Usage{}, 100)
	db.Append("fresh", []chat.Message{{Role: "user", Content: "x"}}, chat.Usage{}, 100)
	// Age "stale" by 91 days, as if it had been idle that long.
	err = db.bolt.Update(func(tx *bolt.Tx) error {
		sess := tx.Bucket([]byte(BucketSessions)).Bucket([]byte("stale"))
		var info infoRecord
		if err := info.unmarshal(sess.Get(keyInfo)); err != nil {
			return err
		}
		info.Updated = info.Updated.Add(-91 * 24 * time.Hour)
		return sess.Put(keyInfo, info.marshal())
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()

	db, err = Open(path, Options{SessionTTL: 90 * 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for db.SessionCount() != 1 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if s, _ := db.Session("stale"); s.Count != 0 {
		t.Fatal("idle session kept")
	}
	if s, _ := db.Session("fresh"); s.Count != 1 {
		t.Fatal("active session deleted")
	}
	last, deleted, err := db.SweepStats()
	if last.IsZero() || deleted != 1 || err != nil {
		t.Fatalf("sweep stats %v %d %v", last, deleted, err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestCompactionThreshold: only a file that is mostly free, by at least
// compactMinFree, is worth copying.
func TestCompactionThreshold(t *testing.T) {
	c := func(pages, reached uint64) *fileCheck {
		return &fileCheck{meta: boltMeta{pageSize: 4096}, pages: pages, reached: reached}
	}
	cases := []struct {
		pages, reached uint64
		want           bool
	}{
		{pages: 100, reached: 10, want: false},    // 90% free but only 360 KB
		{pages: 4000, reached: 2500, want: false}, // 6 MB free but under half
		{pages: 4000, reached: 1000, want: true},  // 12 MB free, 75%
		{pages: 2048, reached: 1023, want: true},  // 4 MiB free, just over half
		{pages: 10, reached: 12, want: false},     // nonsense counts
	}
	for _, tc := range cases {
		if got := worthCompacting(c(tc.pages, tc.reached)); got != tc.want {
			t.Errorf("pages %d reached %d: %v, want %v", tc.pages, tc.reached, got, tc.want)
		}
	}
}
