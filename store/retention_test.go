package store_test

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/chat"
	"github.com/perchhq/perch/store"
	"github.com/perchhq/perch/store/storetest"
)

// TestDeleteIdleSessions: sessions last updated before the cutoff go, the
// others stay, and the count follows.
func TestDeleteIdleSessions(t *testing.T) {
	db := storetest.Open(t)
	store.NoSyncForTest(db)
	for i := 0; i < 100; i++ {
		db.Append(fmt.Sprint("old", i), []chat.Message{user("x")}, chat.Usage{}, 100)
	}
	cutoff := time.Now()
	time.Sleep(2 * time.Millisecond)
	db.Append("new", []chat.Message{user("x")}, chat.Usage{}, 100)
	db.Append("old5", []chat.Message{user("back again")}, chat.Usage{}, 100) // updated after the cutoff
	db.History("old7")                                                       // cached: must not survive its deletion
	if n := db.SessionCount(); n != 101 {
		t.Fatalf("count before = %d", n)
	}
	n, err := db.DeleteIdleSessions(cutoff)
	if err != nil || n != 99 {
		t.Fatalf("deleted %d, %v", n, err)
	}
	ss, _ := db.Sessions()
	var keys []string
	for _, s := range ss {
		keys = append(keys, s.Key)
	}
	if strings.Join(keys, ",") != "old5,new" {
		t.Fatalf("kept %v", keys)
	}
	if db.SessionCount() != 2 {
		t.Fatalf("count after = %d", db.SessionCount())
	}
	if h, _ := db.History("old7"); len(h) != 0 {
		t.Fatalf("deleted session still served from the cache: %v", h)
	}
	if n, _ := db.DeleteIdleSessions(cutoff); n != 0 {
		t.Fatalf("second sweep deleted %d", n)
	}
}

// TestSessionCountStaysExact: the in-memory count matches the bucket after
// concurrent appends to new and existing sessions, resets and a reopen.
func TestSessionCountStaysExact(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	db, _ := store.Open(path, store.Options{})
	store.NoSyncForTest(db)
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 20; i++ {
				// Two writers share each key: one creates it, both count once.
				db.Append(fmt.Sprint("k", (w/2)*100+i), []chat.Message{user("x")}, chat.Usage{}, 100)
			}
		}()
	}
	wg.Wait()
	if n := db.SessionCount(); n != 80 {
		t.Fatalf("count = %d, want 80", n)
	}
	db.Reset("k0")
	db.Reset("k0")
	db.Reset("absent")
	if n := db.SessionCount(); n != 79 {
		t.Fatalf("count after resets = %d", n)
	}
	db.Close()
	db, _ = store.Open(path, store.Options{})
	defer db.Close()
	ss, _ := db.Sessions()
	if db.SessionCount() != 79 || len(ss) != 79 {
		t.Fatalf("after reopen count %d, sessions %d", db.SessionCount(), len(ss))
	}
}

// TestCompactionReclaimsSpace: after most sessions are deleted the file is
// mostly free pages; the next open compacts it, keeping every record, and
// an interrupted compaction's leftover is cleaned up.
func TestCompactionReclaimsSpace(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "perch.db")
	db, _ := store.Open(path, store.Options{})
	store.NoSyncForTest(db)
	big := strings.Repeat("y", 40<<10)
	var wg sync.WaitGroup
	for i := 0; i < 160; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			db.Append(fmt.Sprint("s", i), []chat.Message{user(big), assistant("ok")}, chat.Usage{}, 100)
		}()
	}
	wg.Wait()
	db.Put(store.BucketCron, "j", map[string]string{"id": "j"})
	cutoff := time.Now()
	time.Sleep(2 * time.Millisecond)
	db.Append("s3", []chat.Message{user("keep me")}, chat.Usage{}, 100)
	db.Append("s7", []chat.Message{user("me too")}, chat.Usage{}, 100)
	if n, err := db.DeleteIdleSessions(cutoff); err != nil || n != 158 {
		t.Fatalf("deleted %d, %v", n, err)
	}
	db.Close()
	before, _ := os.Stat(path)
	// A compaction interrupted by a power cut leaves its copy behind.
	os.WriteFile(path+".compact", []byte("half a file"), 0o600)

	db, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c := db.Compaction()
	if c == nil || c.Error != "" || c.After >= c.Before/2 {
		t.Fatalf("compaction = %+v (file was %d bytes)", c, before.Size())
	}
	t.Logf("compacted %d -> %d bytes in %s", c.Before, c.After, c.Duration)
	if _, err := os.Stat(path + ".compact"); !os.IsNotExist(err) {
		t.Fatal("compaction copy left behind")
	}
	h, _ := db.History("s3")
	if len(h) != 3 || h[0].Content != big || h[2].Content != "keep me" || db.SessionCount() != 2 {
		t.Fatalf("s3 = %d messages, count %d", len(h), db.SessionCount())
	}
	var ids []string
	db.List(store.BucketCron, func(k string, _ []byte) error { ids = append(ids, k); return nil })
	if len(ids) != 1 {
		t.Fatalf("cron = %v", ids)
	}
	// Sequences survive: the next message follows the last.
	db.Append("s3", []chat.Message{assistant("after")}, chat.Usage{}, 100)
	db.Close()
	storetest.CheckFile(t, path)
	db, _ = store.Open(path, store.Options{})
	defer db.Close()
	if db.Compaction() != nil {
		t.Fatal("compacted again")
	}
	if h, _ := db.History("s3"); len(h) != 4 || h[3].Content != "after" {
		t.Fatalf("s3 after reopen = %s", contents(h))
	}
}
