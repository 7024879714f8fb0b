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

// TestSweepReadsDatesAcrossAClockSetForward: a board that starts on the
// clock it saved at its last shutdown and learns the time months later
// must not take the sessions used in between for months idle.
func TestSweepReadsDatesAcrossAClockSetForward(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "perch.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	const day = 24 * time.Hour
	opened := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC) // the saved clock at start
	// An hour after the start the time server answers: it is 120 days later.
	elapsed := time.Hour
	now := opened.Add(120*day + elapsed)
	for key, updated := range map[string]time.Time{
		"idle before the start": opened.Add(-100 * day),       // idle 220 days in truth
		"used before the clock": opened.Add(30 * time.Minute), // half an hour ago in truth
		"used after the clock":  now.Add(-10 * time.Minute),
	} {
		db.Append(key, []chat.Message{{Role: "user", Content: "x"}}, chat.Usage{}, 100)
		setUpdated(t, db, key, updated)
	}
	if err := db.settle(); err != nil {
		t.Fatal(err)
	}
	cutoff := now.Add(-90 * day)
	shift := clockShift(opened, elapsed, now)
	if shift == nil {
		t.Fatal("a clock set 120 days forward was not noticed")
	}
	n, err := db.deleteIdle(cutoff, shift)
	if err != nil || n != 1 {
		t.Fatalf("deleted %d sessions (%v), want 1", n, err)
	}
	for key, kept := range map[string]bool{"idle before the start": false, "used before the clock": true, "used after the clock": true} {
		if s, _ := db.Session(key); (s.Count != 0) != kept {
			t.Errorf("%s: kept = %v, want %v", key, s.Count != 0, kept)
		}
	}
}

func TestClockShift(t *testing.T) {
	opened := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		name    string
		elapsed time.Duration
		now     time.Time
		at      time.Time
		want    time.Time
	}{
		{"no jump", time.Hour, opened.Add(time.Hour + time.Second), opened.Add(time.Minute), opened.Add(time.Minute)},
		{"drift within the tolerance", time.Hour, opened.Add(time.Hour + 5*time.Minute), opened.Add(time.Minute), opened.Add(time.Minute)},
		{"set forward: a date of this run moves", time.Hour, opened.Add(49 * time.Hour), opened.Add(time.Minute), opened.Add(48*time.Hour + time.Minute)},
		{"set forward: a date before the open stays", time.Hour, opened.Add(49 * time.Hour), opened.Add(-time.Minute), opened.Add(-time.Minute)},
		{"set forward: a date on the new clock stays", time.Hour, opened.Add(49 * time.Hour), opened.Add(48*time.Hour + 30*time.Minute), opened.Add(48*time.Hour + 30*time.Minute)},
		{"set back", time.Hour, opened.Add(-47 * time.Hour), opened.Add(time.Minute), opened.Add(time.Minute)},
	} {
		got := c.at
		if shift := clockShift(opened, c.elapsed, c.now); shift != nil {
			got = shift(c.at)
		}
		if !got.Equal(c.want) {
			t.Errorf("%s: %v read as %v, want %v", c.name, c.at, got, c.want)
		}
	}
}

// setUpdated dates key's last update at when.
func setUpdated(t *testing.T, db *DB, key string, when time.Time) {
	t.Helper()
	if err := db.settle(); err != nil {
		t.Fatal(err)
	}
	err := db.bolt.Update(func(tx *bolt.Tx) error {
		sess := tx.Bucket([]byte(BucketSessions)).Bucket([]byte(key))
		var info infoRecord
		if err := info.unmarshal(sess.Get(keyInfo)); err != nil {
			return err
		}
		info.Updated = when
		return sess.Put(keyInfo, info.marshal())
	})
	if err != nil {
		t.Fatal(err)
	}
}
