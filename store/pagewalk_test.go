package store

import (
	"bytes"
	"math/rand"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/chat"
)

// TestLockFollowsTheName: a process waiting for the lock while the holder
// sets the file aside (or swaps in a compacted copy) ends up holding the
// file the name points to, not the one moved away.
func TestLockFollowsTheName(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	held, err := lockFile(path, true, time.Second, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *os.File, 1)
	go func() {
		f, err := lockFile(path, true, 5*time.Second, nil)
		if err != nil {
			t.Error(err)
		}
		got <- f
	}()
	time.Sleep(100 * time.Millisecond) // the waiter polls the old file
	if err := os.Rename(path, path+".damaged-x"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	held.Close()
	f := <-got
	if f == nil {
		t.FailNow()
	}
	defer f.Close()
	if !samePath(f, path) {
		t.Fatal("the waiter locked the file that was moved away")
	}
}

// TestWalkSurvivesMutations: thousands of files, each with four random
// bytes somewhere, walk without a panic and quickly (go test -fuzz FuzzWalk
// explores further, slowly: its inputs are whole files).
func TestWalkSurvivesMutations(t *testing.T) {
	t.Parallel()
	seed := fuzzSeed(t)
	rng := rand.New(rand.NewSource(1))
	data := make([]byte, len(seed))
	n := 800
	if testing.Short() {
		n = 200
	}
	for range n {
		copy(data, seed)
		i, v := rng.Intn(len(data)), rng.Uint32()
		for k := 0; k < 4 && i+k < len(data); k++ {
			data[i+k] = byte(v >> (8 * k))
		}
		start := time.Now()
		c := verifyFile(bytes.NewReader(data), int64(len(data)), true, false)
		if d := time.Since(start); d > 2*time.Second {
			t.Errorf("mutation at %d took %s", i, d)
		}
		for _, p := range c.problems {
			if strings.HasPrefix(p, "internal error") {
				t.Fatalf("mutation at %d: walker panicked: %s", i, p)
			}
		}
	}
}

func fuzzSeed(t testing.TB) []byte {
	path := filepath.Join(t.TempDir(), "seed.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 5; i++ {
		db.Append("s"+strings.Repeat("k", i), []chat.Message{{Role: "user", Content: strings.Repeat("x", 300*i)}}, chat.Usage{}, 100)
	}
	db.Put(BucketCron, "j", map[string]string{"id": "j"})
	db.AppendReadings(Reading{Sensor: "a", Quantity: "t", Time: time.Now(), Value: 1})
	db.Close()
	seed, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return seed
}

// FuzzWalk: whatever the bytes, walking a file never panics (the walker
// would report a panic as an "internal error" problem) and never reads
// outside the file.
func FuzzWalk(f *testing.F) {
	seed := fuzzSeed(f)
	f.Add(seed, uint32(0), uint32(0))
	f.Add(seed, uint32(2*4096+10), uint32(0xffffffff))
	f.Fuzz(func(t *testing.T, data []byte, at, val uint32) {
		if len(data) > 0 {
			i := int(at) % len(data)
			for k := 0; k < 4 && i+k < len(data); k++ {
				data[i+k] = byte(val >> (8 * k))
			}
		}
		r := bytes.NewReader(data)
		c := verifyFile(r, int64(len(data)), true, false)
		for _, p := range c.problems {
			if strings.HasPrefix(p, "internal error") {
				t.Fatalf("walker panicked: %s", p)
			}
		}
		metas, _ := readMetas(r, int64(len(data)))
		for _, m := range metas {
			w := newWalker(r, int64(len(data)), m, &countVisitor{})
			w.run()
			for _, p := range w.problems {
				if strings.HasPrefix(p, "internal error") {
					t.Fatalf("walker panicked: %s", p)
				}
			}
		}
	})
}

type countVisitor struct{ n int }

func (c *countVisitor) bucket([][]byte, []byte, uint64) bool { c.n++; return true }
func (c *countVisitor) bucketEnd([][]byte, []byte, int)      {}
func (c *countVisitor) kv([][]byte, []byte, []byte)          { c.n++ }

// TestSoundMeansSafe: whenever the check at open passes a mutated file,
// bbolt must not crash on it: opening (its own walk), reading every record
// and its consistency check run without a panic (a panic in bbolt's own
// goroutines would end this test binary). Mutations the check cannot see
// (inside a record's bytes) show up as decode errors, never as crashes.
// (6,000 mutations with a random seed also passed; 400 keep the test quick.)
func TestSoundMeansSafe(t *testing.T) {
	seed := fuzzSeed(t)
	// Mutate the pages in use (most of a small file is free pages).
	metas, _ := readMetas(bytes.NewReader(seed), int64(len(seed)))
	w := newWalker(bytes.NewReader(seed), int64(len(seed)), metas[0], &countVisitor{})
	w.run()
	var used []int
	for p := 0; p < int(metas[0].pgid); p++ {
		if w.seen[p/64]&(1<<(p%64)) != 0 {
			used = append(used, p)
		}
	}
	ps := int(metas[0].pageSize)
	rng := rand.New(rand.NewSource(2))
	dir := t.TempDir()
	passed, refused := 0, 0
	for n := 0; n < 400; n++ {
		data := append([]byte(nil), seed...)
		// Half the mutations hit a page header or element table.
		within := rng.Intn(ps)
		if n%2 == 0 {
			within = rng.Intn(64)
		}
		i, v := used[rng.Intn(len(used))]*ps+within, rng.Uint32()
		for k := 0; k < 4 && i+k < len(data); k++ {
			data[i+k] = byte(v >> (8 * k))
		}
		path := filepath.Join(dir, "perch.db")
		os.Remove(markerPath(path))
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		db, err := Open(path, Options{NoRecover: true, CacheSessions: -1})
		if err != nil {
			refused++
			continue
		}
		passed++
		ss, _ := db.Sessions()
		for _, s := range ss {
			db.History(s.Key)
		}
		db.List(BucketCron, func(string, []byte) error { return nil })
		db.LoadDevices()
		db.SensorSeriesList()
		db.SensorHistory(SensorQuery{Sensor: "a", Since: time.Now().Add(-time.Hour)})
		db.Check()
		if err := db.Damaged(); err != nil {
			t.Errorf("mutation at %d passed the check but damaged a read: %v", i, err)
		}
		db.Close()
	}
	t.Logf("%d mutated files passed the check, %d were refused", passed, refused)
	if passed == 0 || refused == 0 {
		t.Fatal("the mutations did not exercise both outcomes")
	}
}
