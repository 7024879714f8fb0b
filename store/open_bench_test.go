package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"golang.org/x/sys/unix"

	"github.com/perchhq/perch/appliance/chat"
)

// bigFile builds a database of about mb megabytes: sessions of 200 messages
// (every tenth an 8 KB tool result on overflow pages), as a board that has
// chatted for a long time holds.
func bigFile(b *testing.B, dir string, mb int) string {
	path := filepath.Join(dir, "perch.db")
	db, err := Open(path, Options{CacheSessions: -1})
	if err != nil {
		b.Fatal(err)
	}
	db.bolt.NoSync = true
	text := strings.Repeat("the greenhouse is at 18 degrees, humidity 71 percent. ", 4)
	tool := strings.Repeat("x", 8<<10)
	for i := 0; db.Size() < int64(mb)<<20 || i < 10; i++ {
		msgs := make([]chat.Message, 0, 200)
		for m := 0; m < 200; m++ {
			switch {
			case m%10 == 9:
				msgs = append(msgs, chat.Message{Role: "tool", ToolCallID: "c", Content: tool})
			case m%2 == 0:
				msgs = append(msgs, chat.Message{Role: "user", Content: text, Time: time.Now().UnixMilli()})
			default:
				msgs = append(msgs, chat.Message{Role: "assistant", Content: text, Time: time.Now().UnixMilli()})
			}
		}
		if err := db.Append(fmt.Sprintf("telegram:%d", 100000+i), msgs, chat.Usage{TotalTokens: 100}, 200, "telegram", fmt.Sprint(i)); err != nil {
			b.Fatal(err)
		}
	}
	db.Close()
	return path
}

// dropCache evicts the file from the page cache, as after a reboot.
func dropCache(b *testing.B, path string) {
	f, err := os.Open(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	f.Sync()
	if err := unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkOpen50MB measures what a start costs on a 50 MB file: bbolt's
// own open (its freelist walk; what perch 0.1 paid), the store's open after
// a clean shutdown (structural walk first), after an unclean one (every
// record decoded), `perch db check`, salvage, and a compaction after three
// sessions in four were deleted. "cold" runs evict the file from the page cache
// first.
//
//	go test -run XXX -bench Open50MB -benchtime 5x ./store/
func BenchmarkOpen50MB(b *testing.B) {
	dir := b.TempDir()
	path := bigFile(b, dir, 50)
	st, _ := os.Stat(path)
	b.Logf("file: %d bytes", st.Size())
	boltOpen := func() {
		bd, err := bolt.Open(path, 0o600, &bolt.Options{NoFreelistSync: true, FreelistType: bolt.FreelistMapType})
		if err != nil {
			b.Fatal(err)
		}
		bd.Close()
	}
	storeOpen := func(unclean bool) func() {
		return func() {
			if unclean {
				os.WriteFile(markerPath(path), nil, 0o600)
			}
			db, err := Open(path, Options{})
			if err != nil {
				b.Fatal(err)
			}
			if db.Recovered() != nil || db.Compaction() != nil {
				b.Fatal("the file changed")
			}
			db.Close()
		}
	}
	cases := []struct {
		name string
		fn   func()
	}{
		{"bbolt-open", boltOpen},
		{"store-open-clean", storeOpen(false)},
		{"store-open-unclean", storeOpen(true)},
		{"check", func() {
			rep, err := CheckFile(path)
			if err != nil || !rep.OK() {
				b.Fatal(rep, err)
			}
		}},
	}
	for _, c := range cases {
		for _, cold := range []bool{false, true} {
			name := c.name + "/warm"
			if cold {
				name = c.name + "/cold"
			}
			b.Run(name, func(b *testing.B) {
				c.fn() // warm up (and, for a cold run, evicted below)
				var total, cpu time.Duration
				for b.Loop() {
					if cold {
						dropCache(b, path)
					}
					t, c0 := time.Now(), cpuTime()
					c.fn()
					total += time.Since(t)
					cpu += cpuTime() - c0
				}
				b.ReportMetric(float64(total.Milliseconds())/float64(b.N), "ms/op")
				b.ReportMetric(float64(cpu.Milliseconds())/float64(b.N), "cpu-ms/op")
			})
		}
	}
	b.Run("salvage", func(b *testing.B) {
		for i := 0; b.Loop(); i++ {
			rep, err := Salvage(path, filepath.Join(dir, fmt.Sprint("salvaged", i, ".db")))
			if err != nil || rep.ProblemCount != 0 {
				b.Fatal(rep, err)
			}
			os.Remove(filepath.Join(dir, fmt.Sprint("salvaged", i, ".db")))
		}
	})
	b.Run("compact-3-in-4-deleted", func(b *testing.B) {
		for b.Loop() {
			b.StopTimer()
			p := filepath.Join(b.TempDir(), "perch.db")
			data, _ := os.ReadFile(path)
			os.WriteFile(p, data, 0o600)
			db, _ := Open(p, Options{})
			// Delete three sessions in four.
			var keys []string
			db.bolt.View(func(tx *bolt.Tx) error {
				i := 0
				return tx.Bucket([]byte(BucketSessions)).ForEachBucket(func(k []byte) error {
					if i++; i%4 != 0 {
						keys = append(keys, string(k))
					}
					return nil
				})
			})
			for _, k := range keys {
				db.Reset(k)
			}
			db.Close()
			b.StartTimer()
			db, err := Open(p, Options{})
			if err != nil {
				b.Fatal(err)
			}
			c := db.Compaction()
			if c == nil || c.Error != "" {
				b.Fatalf("not compacted: %+v", c)
			}
			b.ReportMetric(float64(c.Before), "bytes-before")
			b.ReportMetric(float64(c.After), "bytes-after")
			db.Close()
		}
	})
}

// cpuTime is the process's user and system time: on a shared, loaded
// machine it says more than the wall clock.
func cpuTime() time.Duration {
	var ru unix.Rusage
	unix.Getrusage(unix.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
