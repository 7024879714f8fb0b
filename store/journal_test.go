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
	"golang.org/x/sys/unix"
)

func openAt(t *testing.T, path string, opts store.Options) *store.DB {
	t.Helper()
	db, err := store.Open(path, opts)
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// TestJournalReadsSeeAppendsAtOnce: an append acknowledged through the
// journal is in every read at once, though bbolt has not taken it.
func TestJournalReadsSeeAppendsAtOnce(t *testing.T) {
	db := openAt(t, filepath.Join(t.TempDir(), "perch.db"), store.Options{})
	defer db.Close()
	store.HoldJournalForTest(db)
	if _, err := db.History("web:a"); err != nil {
		t.Fatal(err)
	}
	if err := db.Append("web:a", []chat.Message{user("hi"), assistant("hello")}, chat.Usage{TotalTokens: 7}, 200, "web", "a"); err != nil {
		t.Fatal(err)
	}
	if n := store.JournalPendingForTest(db); n != 1 {
		t.Fatalf("%d records wait for bbolt, want 1 (the append did not go through the journal)", n)
	}
	if h, _ := db.History("web:a"); contents(h) != "u:hi a:hello" {
		t.Fatalf("history = %q", contents(h))
	}
	info, err := db.Session("web:a")
	if err != nil || info.Count != 2 || info.Channel != "web" || info.ChatID != "a" || info.Usage.TotalTokens != 7 {
		t.Fatalf("session = %+v, %v", info, err)
	}
	if u, _ := db.TotalUsage(); u.TotalTokens != 7 {
		t.Fatalf("total usage = %+v", u)
	}
	if all, _ := db.Sessions(); len(all) != 1 || all[0].Count != 2 {
		t.Fatalf("sessions = %+v", all)
	}
	if db.SessionCount() != 1 {
		t.Fatalf("session count = %d", db.SessionCount())
	}
	if n := store.JournalPendingForTest(db); n != 0 {
		t.Fatalf("%d records still wait after the reads settled them", n)
	}
}

// TestJournalReplaysAfterCrash: appends only in the journal at a power
// cut are in bbolt after the next open, once, with their own times and
// usage, and the trim of long histories matches what the cache showed.
func TestJournalReplaysAfterCrash(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	db := openAt(t, path, store.Options{})
	store.HoldJournalForTest(db)
	want := map[string]string{}
	for s := range 3 {
		key := fmt.Sprintf("s%d", s)
		db.History(key)
		for i := range 90 {
			// A tool exchange now and then, so trimming has non-user
			// messages to step over.
			msgs := []chat.Message{user(fmt.Sprint(i)), {Role: "assistant", ToolCalls: []chat.ToolCall{{ID: "c", Name: "x"}}}, {Role: "tool", ToolCallID: "c", Content: "r"}, assistant("ok")}
			if err := db.Append(key, msgs[:2+2*(i%2)], chat.Usage{TotalTokens: 1}, 120); err != nil {
				t.Fatal(err)
			}
		}
		h, _ := db.History(key)
		want[key] = contents(h)
	}
	before := store.JournalPendingForTest(db)
	store.CrashForTest(db)

	db = openAt(t, path, store.Options{})
	if db.Replayed() != before || before != 270 {
		t.Fatalf("replayed %d records, %d were pending (want 270)", db.Replayed(), before)
	}
	for key, w := range want {
		h, err := db.History(key)
		if err != nil || contents(h) != w {
			t.Fatalf("%s after replay:\n got %s\nwant %s (%v)", key, contents(h), w, err)
		}
		if h[0].Role != "user" || len(h) > 120 {
			t.Fatalf("%s: trimmed history has %d messages starting with %s", key, len(h), h[0].Role)
		}
		info, _ := db.Session(key)
		if info.Count != len(h) || info.Usage.TotalTokens != 90 {
			t.Fatalf("%s info = %+v (history %d)", key, info, len(h))
		}
	}
	if u, _ := db.TotalUsage(); u.TotalTokens != 270 {
		t.Fatalf("total usage = %+v", u)
	}
	db.Close()
	// Applied once: a second open replays nothing.
	db = openAt(t, path, store.Options{})
	defer db.Close()
	if db.Replayed() != 0 {
		t.Fatalf("second open replayed %d records", db.Replayed())
	}
	if u, _ := db.TotalUsage(); u.TotalTokens != 270 {
		t.Fatalf("total usage after a second open = %+v", u)
	}
}

// TestJournalHalvesTakeTurns writes several times the journal's size with
// the background apply held: each switch of halves makes bbolt take the
// half about to be reused, and nothing is lost across a crash.
func TestJournalHalvesTakeTurns(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	db := openAt(t, path, store.Options{})
	store.HoldJournalForTest(db)
	db.History("big")
	body := strings.Repeat("x", 8<<10)
	const n = 600 // ~5 MiB through a 2 MiB journal
	for i := range n {
		if err := db.Append("big", []chat.Message{user(fmt.Sprintf("%d %s", i, body))}, chat.Usage{}, 100000); err != nil {
			t.Fatal(err)
		}
	}
	if p := store.JournalPendingForTest(db); p == 0 || p >= n {
		t.Fatalf("%d of %d records pending: the halves never switched", p, n)
	}
	store.CrashForTest(db)
	if st, err := os.Stat(path + ".journal"); err != nil || st.Size() > 3<<20 {
		t.Fatalf("journal grew: %v %v", st.Size(), err)
	}
	db = openAt(t, path, store.Options{})
	defer db.Close()
	h, _ := db.History("big")
	if len(h) != n {
		t.Fatalf("history has %d messages after the crash, want %d", len(h), n)
	}
	for i, m := range h {
		if !strings.HasPrefix(m.Content, fmt.Sprintf("%d ", i)) {
			t.Fatalf("message %d is %.10q", i, m.Content)
		}
	}
}

// TestJournalKeepsPinnedSessionsCached: with a cache smaller than the
// sessions being written, a session whose appends bbolt has not taken is
// not evicted (it is the only current copy).
func TestJournalKeepsPinnedSessionsCached(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	db := openAt(t, path, store.Options{CacheSessions: 2})
	store.HoldJournalForTest(db)
	for s := range 6 {
		key := fmt.Sprintf("k%d", s)
		db.History(key)
		if err := db.Append(key, []chat.Message{user(key)}, chat.Usage{}, 100); err != nil {
			t.Fatal(err)
		}
	}
	for s := range 6 {
		key := fmt.Sprintf("k%d", s)
		if h, _ := db.History(key); contents(h) != "u:"+key {
			t.Fatalf("%s = %q", key, contents(h))
		}
	}
	store.CrashForTest(db)
	db = openAt(t, path, store.Options{CacheSessions: 2})
	defer db.Close()
	for s := range 6 {
		key := fmt.Sprintf("k%d", s)
		if h, _ := db.History(key); contents(h) != "u:"+key {
			t.Fatalf("after replay %s = %q", key, contents(h))
		}
	}
}

// TestJournalTornTail: a record torn by a power cut mid-write is dropped
// (it was never acknowledged), the ones before it are applied, and writing
// goes on over it.
func TestJournalTornTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	db := openAt(t, path, store.Options{})
	store.HoldJournalForTest(db)
	db.History("t")
	for i := range 3 {
		db.Append("t", []chat.Message{user(fmt.Sprint(i))}, chat.Usage{}, 100)
	}
	store.CrashForTest(db)
	// Tear the third record: the journal's first half starts at 4096 and
	// holds three records of equal length.
	f, err := os.OpenFile(path+".journal", os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4096)
	f.ReadAt(buf, 4096)
	end := len(strings.TrimRight(string(buf), "\x00"))
	f.WriteAt([]byte{0xff, 0xff}, int64(4096+end-3))
	f.Close()

	db = openAt(t, path, store.Options{})
	store.HoldJournalForTest(db)
	if db.Replayed() != 2 {
		t.Fatalf("replayed %d records, want the 2 before the torn one", db.Replayed())
	}
	if h, _ := db.History("t"); contents(h) != "u:0 u:1" {
		t.Fatalf("history = %q", contents(h))
	}
	db.Append("t", []chat.Message{user("3")}, chat.Usage{}, 100)
	store.CrashForTest(db)
	db = openAt(t, path, store.Options{})
	defer db.Close()
	if h, _ := db.History("t"); contents(h) != "u:0 u:1 u:3" {
		t.Fatalf("history after a second crash = %q", contents(h))
	}
}

// TestJournalNotOursSetAside: a file in the journal's place that is not a
// journal is kept under another name and a fresh journal made.
func TestJournalNotOursSetAside(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "perch.db")
	os.WriteFile(path+".journal", []byte("something else entirely"), 0o600)
	db := openAt(t, path, store.Options{})
	defer db.Close()
	aside, _ := filepath.Glob(path + ".journal.damaged-*")
	if len(aside) != 1 {
		t.Fatalf("set aside: %v", aside)
	}
	if b, _ := os.ReadFile(aside[0]); string(b) != "something else entirely" {
		t.Fatalf("kept %q", b)
	}
	db.History("a")
	if err := db.Append("a", []chat.Message{user("x")}, chat.Usage{}, 100); err != nil {
		t.Fatal(err)
	}
}

// TestJournalConcurrent: writers, readers, listings and resets at once (run
// with -race); afterwards bbolt, reopened, holds what the cache showed.
func TestJournalConcurrent(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	db := openAt(t, path, store.Options{CacheSessions: 4})
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			key := fmt.Sprintf("c%d", w)
			for i := range 150 {
				if _, err := db.History(key); err != nil {
					t.Error(err)
					return
				}
				if err := db.Append(key, []chat.Message{user(fmt.Sprint(i)), assistant("r")}, chat.Usage{TotalTokens: 1}, 100); err != nil {
					t.Error(err)
					return
				}
				if i%50 == 0 {
					db.Sessions()
				}
			}
		}()
	}
	wg.Wait()
	want := map[string]string{}
	for w := range 8 {
		key := fmt.Sprintf("c%d", w)
		h, _ := db.History(key)
		want[key] = contents(h)
	}
	db.Close()
	storetest.CheckFile(t, path)
	db = openAt(t, path, store.Options{})
	defer db.Close()
	for key, w := range want {
		if h, _ := db.History(key); contents(h) != w {
			t.Fatalf("%s:\n got %s\nwant %s", key, contents(h), w)
		}
	}
	if u, _ := db.TotalUsage(); u.TotalTokens != 8*150 {
		t.Fatalf("total usage %+v", u)
	}
}

// TestJournalGoesWithDamagedDatabase: a database found damaged at open is
// set aside with its journal; the fresh one gets what the damaged file
// held plus the acknowledged appends only the journal had, once, and
// `perch db salvage` of the damaged copy finds them too.
func TestJournalGoesWithDamagedDatabase(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	populate(t, path, 40)
	db := openAt(t, path, store.Options{})
	store.HoldJournalForTest(db)
	db.History("web:late")
	if err := db.Append("web:late", []chat.Message{user("late"), assistant("noted")}, chat.Usage{TotalTokens: 5}, 200, "web", "late"); err != nil {
		t.Fatal(err)
	}
	store.CrashForTest(db)
	smash(t, path, messagePage(t, path), 3)

	db = openAt(t, path, store.Options{})
	rec := db.Recovered()
	if rec == nil {
		t.Fatal("the damaged file was not recovered")
	}
	if rec.Salvaged.JournalRecords != 1 || rec.Salvaged.JournalMessages != 2 || rec.Salvaged.JournalSkipped != "" {
		t.Fatalf("salvage report = %+v", rec.Salvaged)
	}
	if h, err := db.History("web:late"); err != nil || contents(h) != "u:late a:noted" {
		t.Fatalf("the journal's append after recovery: %q, %v", contents(h), err)
	}
	if _, err := os.Stat(store.JournalPath(rec.DamagedPath)); err != nil {
		t.Fatalf("the damaged file's journal was not kept beside it: %v", err)
	}
	copies := store.DamagedCopies(path)
	if len(copies) != 1 || copies[0] != rec.DamagedPath {
		t.Fatalf("damaged copies = %v, want only %s", copies, rec.DamagedPath)
	}
	// The fresh database's own journal starts empty and goes on.
	if db.Replayed() != 0 {
		t.Fatalf("replayed %d records into the fresh file", db.Replayed())
	}
	if err := db.Append("web:late", []chat.Message{user("after")}, chat.Usage{}, 200); err != nil {
		t.Fatal(err)
	}
	db.Close()
	db = openAt(t, path, store.Options{})
	if h, _ := db.History("web:late"); contents(h) != "u:late a:noted u:after" {
		t.Fatalf("after a restart: %q", contents(h))
	}
	db.Close()

	// By hand, from the damaged copy: the same, and nothing twice.
	dst := filepath.Join(t.TempDir(), "salvaged.db")
	rep, err := store.Salvage(rec.DamagedPath, dst)
	if err != nil {
		t.Fatal(err)
	}
	if rep.JournalRecords != 1 || !strings.Contains(rep.String(), "2 messages added from the journal") {
		t.Fatalf("salvage report: %s", rep)
	}
	db = openAt(t, dst, store.Options{})
	defer db.Close()
	if h, _ := db.History("web:late"); contents(h) != "u:late a:noted" {
		t.Fatalf("salvaged by hand: %q", contents(h))
	}
	if u, _ := db.TotalUsage(); u.TotalTokens < 5 {
		t.Fatalf("the journal's usage was not counted: %+v", u)
	}
}

// TestSalvageSkipsAppliedJournal: records the file already holds are not
// applied again.
func TestSalvageSkipsAppliedJournal(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "perch.db")
	db := openAt(t, src, store.Options{})
	db.History("web:a")
	for i := range 5 {
		if err := db.Append("web:a", []chat.Message{user(fmt.Sprint(i)), assistant("ok")}, chat.Usage{}, 200); err != nil {
			t.Fatal(err)
		}
	}
	// Settled into bbolt, then a power cut: the journal still holds all
	// five records, and the file's mark says it has them.
	if _, err := db.Sessions(); err != nil {
		t.Fatal(err)
	}
	store.CrashForTest(db)
	if _, err := os.Stat(store.JournalPath(src)); err != nil {
		t.Fatal(err)
	}
	rep, err := store.Salvage(src, filepath.Join(dir, "out.db"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.JournalRecords != 0 || rep.JournalSkipped != "" || rep.Messages != 10 {
		t.Fatalf("report = %+v", rep)
	}
}

// TestJournalWriteFailure: when the journal's write fails, that append
// reports it, and later appends go to bbolt directly and last.
func TestJournalWriteFailure(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	db := openAt(t, path, store.Options{})
	store.HoldJournalForTest(db) // the journal is whole once the apply loop has started
	db.History("f")
	if err := db.Append("f", []chat.Message{user("a")}, chat.Usage{}, 100); err != nil {
		t.Fatal(err)
	}
	store.BreakJournalForTest(db)
	err := db.Append("f", []chat.Message{user("b")}, chat.Usage{}, 100)
	if err == nil || !strings.Contains(err.Error(), "journal write") {
		t.Fatalf("append over a broken journal: %v", err)
	}
	if err := db.Append("f", []chat.Message{user("c")}, chat.Usage{}, 100); err != nil {
		t.Fatalf("append after the journal broke: %v", err)
	}
	if h, _ := db.History("f"); contents(h) != "u:a u:c" {
		t.Fatalf("history = %q", contents(h))
	}
	db.Close()
	db = openAt(t, path, store.Options{})
	defer db.Close()
	if h, _ := db.History("f"); contents(h) != "u:a u:c" {
		t.Fatalf("history after reopen = %q", contents(h))
	}
}

// TestJournalCleanCloseLeavesNothingToRead: after a clean close both
// halves start empty, so the next open reads a few bytes, not 2 MiB.
func TestJournalCleanCloseLeavesNothingToRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	db := openAt(t, path, store.Options{})
	store.HoldJournalForTest(db)
	db.History("c")
	db.Append("c", []chat.Message{user("x")}, chat.Usage{}, 100)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(path + ".journal")
	if len(b) != 4096+2<<20 {
		t.Fatalf("journal is %d bytes", len(b))
	}
	for _, off := range []int{4096, 4096 + 1<<20} {
		if string(b[off:off+8]) != "\x00\x00\x00\x00\x00\x00\x00\x00" {
			t.Fatalf("the half at %d still starts with a record after a clean close", off)
		}
	}
	db = openAt(t, path, store.Options{})
	defer db.Close()
	if h, _ := db.History("c"); contents(h) != "u:x" || db.Replayed() != 0 {
		t.Fatalf("history %q, replayed %d", contents(h), db.Replayed())
	}
}

// TestCheckCountsJournal: `perch db check` after a crash says what waits
// in the journal, and nothing once the gateway has applied it.
func TestCheckCountsJournal(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	db := openAt(t, path, store.Options{})
	db.Close()
	db = openAt(t, path, store.Options{})
	store.HoldJournalForTest(db)
	db.History("web:a")
	if err := db.Append("web:a", []chat.Message{user("hi"), assistant("hello")}, chat.Usage{}, 200); err != nil {
		t.Fatal(err)
	}
	store.CrashForTest(db)
	rep, err := store.CheckFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.JournalRecords != 1 || rep.JournalMessages != 2 || !strings.Contains(rep.String(), "2 messages wait in its journal") {
		t.Fatalf("check after a crash: %+v\n%s", rep, rep)
	}
	db = openAt(t, path, store.Options{})
	db.Close()
	if rep, err = store.CheckFile(path); err != nil || rep.JournalRecords != 0 || rep.Messages != 2 {
		t.Fatalf("check after the replay: %+v, %v", rep, err)
	}
}

// TestJournalWaitsForRoomAfterAFullDisk: records the last run left in the
// journal that bbolt cannot take at the next open, the disk being full,
// wait in the journal instead of failing the open (which stopped the
// gateway from starting at all, restart after restart); the store says why
// it is not healthy, and takes them once there is room, each history whole.
func TestJournalWaitsForRoomAfterAFullDisk(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("a small file system of its own needs a mount, which needs root; CI runs as root")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=8m"); err != nil {
		t.Fatalf("mount an 8 MB tmpfs: %v", err)
	}
	t.Cleanup(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	path := filepath.Join(dir, "perch.db")
	var told []error
	var mu sync.Mutex
	opts := store.Options{OnWriteError: func(err error) { mu.Lock(); told = append(told, err); mu.Unlock() }}
	db := openAt(t, path, opts)
	store.HoldJournalForTest(db)
	for s := range 3 {
		db.History(fmt.Sprint("s", s)) // a session's appends go through the journal once it is cached
	}
	long := strings.Repeat("a fetched page ", 1400) // ~20 KB
	for i := range 90 {
		if err := db.Append(fmt.Sprint("s", i%3), []chat.Message{user(fmt.Sprint(i, long)), assistant("ok")}, chat.Usage{}, 200); err != nil {
			t.Fatal(err)
		}
	}
	store.CrashForTest(db)
	filler := filepath.Join(dir, "filler")
	f, err := os.Create(filler)
	if err != nil {
		t.Fatal(err)
	}
	block := make([]byte, 64<<10)
	for {
		if _, err := f.Write(block); err != nil {
			break
		}
	}
	f.Close()

	db, err = store.Open(path, opts)
	if err != nil {
		t.Fatalf("open on a full disk: %v", err)
	}
	defer db.Close()
	if err := db.WriteError(); err == nil || !strings.Contains(err.Error(), "disk is full: 90 records") {
		t.Errorf("write error %v; want the disk full and 90 records waiting", err)
	}
	if ok, msg := db.Health(); ok || !strings.Contains(msg, "free space on the disk") {
		t.Errorf("health %v %q; want failing, saying to free space", ok, msg)
	}
	if err := db.Ping(); err != nil {
		t.Errorf("ping %v; the database answers (a watchdog restart would not make room)", err)
	}
	// What waits is read as if it were in: a turn's context, and the check
	// that a message sent again is the one still unanswered, need it.
	for s := range 3 {
		if h, err := db.History(fmt.Sprint("s", s)); err != nil || len(h) != 60 {
			t.Errorf("s%d while its records wait: %d messages (%v); want 60", s, len(h), err)
		}
	}
	// An append meanwhile goes through the journal, after them.
	if err := db.Append("s0", []chat.Message{user("meanwhile"), assistant("noted")}, chat.Usage{}, 200); err != nil {
		t.Fatalf("an append while the disk is full and the journal has room: %v", err)
	}
	os.Remove(filler)
	deadline := time.Now().Add(10 * time.Second)
	for db.WriteError() != nil {
		if time.Now().After(deadline) {
			t.Fatalf("the records did not go in once there was room: %v", db.WriteError())
		}
		time.Sleep(50 * time.Millisecond)
	}
	for s := range 3 {
		want := 60
		if s == 0 {
			want = 62
		}
		h, err := db.History(fmt.Sprint("s", s))
		if err != nil || len(h) != want {
			t.Errorf("s%d: %d messages (%v); want %d", s, len(h), err, want)
		}
	}
	db.Close()
	db = openAt(t, path, store.Options{})
	defer db.Close()
	if h, err := db.History("s0"); err != nil || len(h) != 62 || h[61].Content != "noted" {
		t.Errorf("s0 read from the file: %d messages (%v); want 62, the last one noted", len(h), err)
	}
	if ok, _ := db.Health(); !ok {
		t.Error("still unhealthy once the records are in")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(told) != 1 || told[0] != nil {
		t.Errorf("told %v; want one word that writes go in again", told)
	}
}
