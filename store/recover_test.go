package store_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/chat"
	"github.com/perchhq/perch/store"
	"github.com/perchhq/perch/store/storetest"
)

// populate writes n sessions of a few turns each, two cron jobs and a device
// record, and closes the file.
func populate(t testing.TB, path string, n int) {
	t.Helper()
	db, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store.NoSyncForTest(db)
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func() { // concurrent appends share commits: a quicker set-up
			defer wg.Done()
			key := fmt.Sprintf("telegram:%d", 1000+i)
			var msgs []chat.Message
			for turn := 0; turn < 3; turn++ {
				msgs = append(msgs, user(fmt.Sprintf("q%d %s", turn, strings.Repeat("x", 200))), assistant(fmt.Sprintf("a%d", turn)))
			}
			if err := db.Append(key, msgs, chat.Usage{TotalTokens: 1}, 200, "telegram", fmt.Sprint(1000+i)); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	for _, id := range []string{"job1", "job2"} {
		if err := db.Put(store.BucketCron, id, map[string]any{"id": id, "message": "water the plants"}); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.SaveDevices([]byte(`{"version":1,"devices":[]}`)); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
}

// smash writes random bytes over page pg.
func smash(t testing.TB, path string, pg int64, seed int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	b := make([]byte, os.Getpagesize())
	rand.New(rand.NewSource(seed)).Read(b)
	if _, err := f.WriteAt(b, pg*int64(len(b))); err != nil {
		t.Fatal(err)
	}
}

// messagePage finds a page in the middle of the file holding messages
// (populate's layout varies with how its concurrent appends were grouped).
func messagePage(t testing.TB, path string) int64 {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ps := os.Getpagesize()
	var pages []int64
	for i := 0; ; {
		j := bytes.Index(data[i:], []byte(`"content":"q1 `))
		if j < 0 {
			break
		}
		i += j
		if pg := int64(i / ps); len(pages) == 0 || pages[len(pages)-1] != pg {
			pages = append(pages, pg)
		}
		i++
	}
	if len(pages) < 3 {
		t.Fatalf("message pages: %v", pages)
	}
	return pages[len(pages)/2]
}

func truncate(t testing.TB, path string, frac float64) {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, int64(float64(st.Size())*frac)); err != nil {
		t.Fatal(err)
	}
}

// useAll reads everything through the store the way `perch gateway` and
// `perch cron list` do.
func useAll(db *store.DB) error {
	if err := db.List(store.BucketCron, func(string, []byte) error { return nil }); err != nil {
		return err
	}
	ss, err := db.Sessions()
	if err != nil {
		return err
	}
	for _, s := range ss {
		if _, err := db.History(s.Key); err != nil {
			return err
		}
	}
	if _, err := db.LoadDevices(); err != nil {
		return err
	}
	if err := db.Append("after:recovery", []chat.Message{user("still works")}, chat.Usage{}, 100); err != nil {
		return err
	}
	return db.Ping()
}

// openChild opens the store in a child process (so a crash inside bbolt
// fails this test instead of ending the test binary), uses everything and
// prints what Open reported.
func openChild(t *testing.T, path string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	// Under -race a child would otherwise sleep a second before exiting.
	cmd.Env = append(os.Environ(), "STORE_OPEN_CHILD="+path, "GORACE=atexit_sleep_ms=0")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func openChildMain(path string) {
	db, err := store.Open(path, store.Options{})
	if err != nil {
		fmt.Println("open:", err)
		os.Exit(1)
	}
	if err := useAll(db); err != nil {
		fmt.Println("use:", err)
		os.Exit(1)
	}
	if r := db.Recovered(); r != nil {
		b, _ := json.Marshal(r)
		fmt.Printf("recovered %s\n", b)
	}
	db.Close()
}

// TestDamagedDatabaseDoesNotCrash reproduces the two reports (random bytes
// over a page, a truncated file), which made the gateway and `perch cron
// list` panic inside bbolt: the store now sets the file aside, starts a
// fresh one with what could be read, and says so.
func TestDamagedDatabaseDoesNotCrash(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		damage func(t testing.TB, path string)
		// salvage: something must be copied out. A truncation usually
		// takes the newest pages, the top of the tree among them, and
		// what hangs below a lost page cannot be placed.
		salvage bool
	}{
		{"random page", func(t testing.TB, path string) { smash(t, path, messagePage(t, path), 1) }, true},
		{"truncated", func(t testing.TB, path string) { truncate(t, path, 0.5) }, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "perch.db")
			populate(t, path, 60)
			c.damage(t, path)
			out, err := openChild(t, path)
			if err != nil {
				t.Fatalf("the store crashed or failed on a damaged file: %v\n%s", err, out)
			}
			line, ok := strings.CutPrefix(strings.TrimSpace(out), "recovered ")
			if !ok {
				t.Fatalf("no recovery reported:\n%s", out)
			}
			var rec store.Recovered
			if err := json.Unmarshal([]byte(line), &rec); err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(filepath.Base(rec.DamagedPath), "perch.db") || filepath.Dir(rec.DamagedPath) != dir {
				t.Errorf("damaged copy at %q, want beside perch.db with perch.db in its name", rec.DamagedPath)
			}
			if _, err := os.Stat(rec.DamagedPath); err != nil {
				t.Errorf("damaged copy missing: %v", err)
			}
			if rec.Reason == "" || rec.ProblemCount == 0 || rec.At.IsZero() {
				t.Errorf("recovery note incomplete: %+v", rec)
			}
			// What could be read was copied into the fresh file.
			if c.salvage && (rec.Salvaged.Sessions < 50 || rec.Salvaged.CronJobs != 2) {
				t.Errorf("nothing salvaged: %+v", rec.Salvaged)
			}
			storetest.CheckFile(t, path)
			// A second start is an ordinary one and still shows the note.
			out, err = openChild(t, path)
			if err != nil || !strings.Contains(out, rec.DamagedPath) {
				t.Fatalf("second start: %v\n%s", err, out)
			}
		})
	}
}

// TestEveryPageDamaged: random bytes over any one page of the file, or a
// truncation anywhere, never stop the store from opening and serving.
func TestEveryPageDamaged(t *testing.T) {
	t.Parallel()
	src := filepath.Join(t.TempDir(), "perch.db")
	populate(t, src, 25)
	orig, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	pages := int64(len(orig) / os.Getpagesize())
	var recovered atomic.Int32
	try := func(parent *testing.T, name string, damage func(t testing.TB, path string)) {
		parent.Run(name, func(t *testing.T) {
			t.Parallel() // the time goes to fsyncs, which overlap
			path := filepath.Join(t.TempDir(), "perch.db")
			if err := os.WriteFile(path, orig, 0o600); err != nil {
				t.Fatal(err)
			}
			damage(t, path)
			db, err := store.Open(path, store.Options{})
			if err != nil {
				t.Fatalf("open: %v", err)
			}
			defer db.Close()
			if db.Recovered() != nil {
				recovered.Add(1)
			}
			if err := useAll(db); err != nil {
				t.Error(err)
			}
			if err := db.Check(); err != nil {
				t.Errorf("inconsistent after open: %v", err)
			}
		})
	}
	t.Run("all", func(all *testing.T) {
		for pg := int64(0); pg < pages; pg++ {
			try(all, fmt.Sprintf("page %d", pg), func(t testing.TB, path string) { smash(t, path, pg, pg) })
		}
		for _, frac := range []float64{0, 0.01, 0.1, 0.3, 0.6, 0.9, 0.99} {
			try(all, fmt.Sprintf("truncated to %.2f", frac), func(t testing.TB, path string) { truncate(t, path, frac) })
		}
	})
	if recovered.Load() == 0 {
		t.Fatal("no damage was detected at all")
	}
	t.Logf("%d pages; %d of the damaged files were set aside", pages, recovered.Load())
}

// TestDamagedWithNoRecover: NoRecover reports the damage and changes
// nothing.
func TestDamagedWithNoRecover(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	populate(t, path, 20)
	truncate(t, path, 0.5)
	before, _ := os.ReadFile(path)
	_, err := store.Open(path, store.Options{NoRecover: true})
	if !errors.Is(err, store.ErrDamaged) || !strings.Contains(err.Error(), "perch db salvage") {
		t.Fatalf("err = %v", err)
	}
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) || len(store.DamagedCopies(path)) != 0 {
		t.Fatal("the file was changed")
	}
}

// TestTornMetaIsNotDamage: a power cut in the middle of a commit leaves the
// newest meta page half written; bbolt then uses the other one (the
// previous transaction). That is not damage, and nothing is set aside.
func TestTornMetaIsNotDamage(t *testing.T) {
	for _, pg := range []int64{0, 1} {
		path := filepath.Join(t.TempDir(), "perch.db")
		populate(t, path, 5)
		smash(t, path, pg, 7)
		db, err := store.Open(path, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if r := db.Recovered(); r != nil {
			t.Errorf("meta page %d torn: set aside: %+v", pg, r)
		}
		if n := db.SessionCount(); n != 5 {
			t.Errorf("meta page %d torn: %d sessions", pg, n)
		}
		if err := useAll(db); err != nil {
			t.Error(err)
		}
		db.Close()
	}
}

// TestUncleanShutdownChecksRecords: damage inside a record (valid structure,
// garbage bytes in a message) is not looked for at every start, only after
// an unclean shutdown, when the full check decodes every record.
func TestUncleanShutdownChecksRecords(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	db, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	marker := strings.Repeat("M", 9000) // on overflow pages of its own
	db.Append("s", []chat.Message{user("first"), assistant(marker), user("third")}, chat.Usage{}, 100)
	db.Append("t", []chat.Message{user("other session")}, chat.Usage{}, 100)
	db.Close()
	data, _ := os.ReadFile(path)
	i := bytes.Index(data, []byte("MMMM"))
	copy(data[i+100:], "\x00\x01garbage")
	os.WriteFile(path, data, 0o600)

	// A clean shutdown before: the quick check passes (the structure is
	// sound); the broken record shows when it is read.
	db, err = store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if db.Recovered() != nil {
		t.Fatal("the quick check decoded records")
	}
	if _, err := db.History("s"); err == nil {
		t.Fatal("damaged message decoded")
	}
	db.Close()

	// The marker of an unclean shutdown asks for the full check.
	if err := os.WriteFile(path+".open", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	db, err = store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	rec := db.Recovered()
	if rec == nil || !rec.UncleanShutdown || !strings.Contains(rec.Reason, "does not decode") {
		t.Fatalf("recovered = %+v", rec)
	}
	h, err := db.History("s")
	if err != nil || contents(h) != "u:first u:third" {
		t.Fatalf("history = %s, %v", contents(h), err)
	}
	if h, _ := db.History("t"); contents(h) != "u:other session" {
		t.Fatalf("other session = %s", contents(h))
	}
	if rec.Salvaged.MessagesLost != 1 || rec.Salvaged.Sessions != 2 {
		t.Errorf("salvaged = %+v", rec.Salvaged)
	}
}

// TestMarkerSaysOpenUntilCleanClose: the marker says the store is open
// exactly while it is, by a byte written in place (the file stays); an
// earlier version's marker (an empty file, removed at a clean close) still
// reads as an unclean stop, and its absence as a clean one.
func TestMarkerSaysOpenUntilCleanClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	if store.MarkerUnclean(path) {
		t.Fatal("no marker read as an unclean stop")
	}
	for range 2 {
		db, err := store.Open(path, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !store.MarkerUnclean(path) {
			t.Fatal("the marker does not say open while the store is")
		}
		st0, err := os.Stat(path + ".open")
		if err != nil {
			t.Fatal(err)
		}
		db.Close()
		if store.MarkerUnclean(path) {
			t.Fatal("the marker says open after a clean close")
		}
		st1, err := os.Stat(path + ".open")
		if err != nil || !os.SameFile(st0, st1) {
			t.Fatalf("the marker file was not kept in place: %v", err)
		}
	}
	if err := os.WriteFile(path+".open", nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if !store.MarkerUnclean(path) {
		t.Fatal("an earlier version's empty marker read as a clean stop")
	}
}

// TestOpenTrustsOnlyTheFileItsCloseLeft: an open that finds the file exactly
// as its last clean close left it skips the walk (the file was checked when
// it was last opened, and every write since was one of bbolt's own
// transactions), and still knows how many sessions it holds. Any change
// since (its times touched), a marker from an earlier version, or a writer
// that stopped without closing, and the open walks it again.
func TestOpenTrustsOnlyTheFileItsCloseLeft(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	populate(t, path, 5)
	open := func(want bool, why string) {
		t.Helper()
		db, err := store.Open(path, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if got := store.WalkedAtOpen(db); got != want {
			t.Errorf("%s: walked %v, want %v", why, got, want)
		}
		if n := db.SessionCount(); n != 5 {
			t.Errorf("%s: %d sessions, want 5", why, n)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
	}
	open(false, "as the close left it")
	open(false, "as the close left it, again")
	now := time.Now()
	if err := os.Chtimes(path, now, now); err != nil {
		t.Fatal(err)
	}
	open(true, "times touched")
	open(false, "closed since")
	if err := os.WriteFile(path+".open", []byte("0"), 0o600); err != nil {
		t.Fatal(err)
	}
	open(true, "an earlier version's marker")
	db, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	store.CrashForTest(db)
	open(true, "after a stop without a close")
}

// TestDamageRightAfterACleanCloseIsFound: bytes written over a page at
// once after a clean close, with the file's modification time put back,
// are still found at the next open: the change time moved (no one can set
// it back), also where it moves only at each timer tick, since the close
// waited for the clock to pass it.
func TestDamageRightAfterACleanCloseIsFound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	populate(t, path, 60)
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	smash(t, path, messagePage(t, path), 1)
	if err := os.Chtimes(path, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	wantRecovered(t, path, "a page damaged after a clean close")
	if !store.SettleChangeTime(time.Now().UnixNano() - int64(time.Second)) {
		t.Error("the clock did not pass a change time a second old")
	}
	if store.SettleChangeTime(time.Now().UnixNano() + int64(time.Hour)) {
		t.Error("a change time an hour ahead (the clock set back) did not give up")
	}
}

// TestDamagedFreelistAfterACleanCloseIsFound: the one page bbolt reads at
// open besides the meta pages, the freelist a clean close writes, is
// checked even when the file looks as its close left it (its times put
// back here stand for damage the file system did not see).
func TestDamagedFreelistAfterACleanCloseIsFound(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	populate(t, path, 20)
	db, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	pg := store.FreelistPageForTest(db)
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if pg < 2 {
		t.Fatalf("no freelist page after a clean close: %d", pg)
	}
	marker, err := os.ReadFile(path + ".open")
	if err != nil {
		t.Fatal(err)
	}
	smash(t, path, int64(pg), 7)
	// Put the marker's record back in line with the file as it is now,
	// as if the damage had come without the file system's knowledge.
	if err := os.WriteFile(path+".open", []byte(store.RecordFileForTest(t, string(marker), path)), 0o600); err != nil {
		t.Fatal(err)
	}
	wantRecovered(t, path, "a damaged freelist")
}

// wantRecovered opens path in a child process and fails unless the open
// survived what and set the file aside.
func wantRecovered(t *testing.T, path, what string) {
	t.Helper()
	out, err := openChild(t, path)
	if err != nil {
		t.Fatalf("the store crashed on %s: %v\n%s", what, err, out)
	}
	if !strings.HasPrefix(strings.TrimSpace(out), "recovered ") {
		t.Fatalf("%s was not found:\n%s", what, out)
	}
}

// TestRecoveryNoteLastsUntilCopyDeleted: the note survives restarts and
// goes away with the damaged copy; copies beyond three are deleted.
func TestRecoveryNoteLastsUntilCopyDeleted(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	for i := 0; i < 5; i++ {
		populate(t, path, 3)
		if err := os.Truncate(path, int64(2.5*float64(os.Getpagesize()))); err != nil {
			t.Fatal(err)
		}
		db, err := store.Open(path, store.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if db.Recovered() == nil {
			t.Fatalf("round %d: not recovered", i)
		}
		msg := db.Recovered().Message()
		if strings.Contains(msg, path) || strings.Contains(msg, "telegram:") {
			t.Errorf("the public message names a path or a session: %s", msg)
		}
		db.Close()
	}
	copies := store.DamagedCopies(path)
	if len(copies) != 3 {
		t.Fatalf("%d damaged copies kept, want 3: %v", len(copies), copies)
	}
	// Each copy keeps its journal; pruned copies take theirs along.
	journals, _ := filepath.Glob(path + ".damaged-*.journal")
	if len(journals) != 3 {
		t.Fatalf("journals beside the damaged copies: %v", journals)
	}
	db, _ := store.Open(path, store.Options{})
	r := db.Recovered()
	db.Close()
	if r == nil || r.DamagedPath != copies[2] {
		t.Fatalf("note after restart = %+v, newest copy %s", r, copies[2])
	}
	os.Remove(r.DamagedPath)
	db, _ = store.Open(path, store.Options{})
	defer db.Close()
	if db.Recovered() != nil {
		t.Fatal("note outlived its damaged copy")
	}
	if _, err := os.Stat(store.JournalPath(r.DamagedPath)); err == nil {
		t.Fatal("the deleted copy's journal was left behind")
	}
}

// TestHealthSaysWhatHappened: readiness stays ok after a recovery and says
// so without naming paths or sessions.
func TestHealthSaysWhatHappened(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	populate(t, path, 3)
	db, _ := store.Open(path, store.Options{})
	if ok, msg := db.Health(); !ok || msg != "3 sessions, "+fmt.Sprint(db.Size()>>10)+" KiB" {
		t.Fatalf("healthy: %v %q", ok, msg)
	}
	db.Close()
	if err := os.Truncate(path, int64(2.5*float64(os.Getpagesize()))); err != nil {
		t.Fatal(err)
	}
	db, _ = store.Open(path, store.Options{})
	ok, msg := db.Health()
	if !ok || !strings.Contains(msg, "damaged") || strings.Contains(msg, path) || strings.Contains(msg, "telegram:") {
		t.Fatalf("after recovery: %v %q", ok, msg)
	}
	db.Close()
	if ok, msg := db.Health(); ok {
		t.Fatalf("closed store healthy: %q", msg)
	}
}

// TestDamageWhileRunning: a file cut short under a running store (a failing
// card, another program) makes reads fault on pages that are gone; the
// store turns the fault into an ErrDamaged error instead of dying, reports
// it in Health, keeps the unclean marker, and the next start recovers.
func TestDamageWhileRunning(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	populate(t, path, 30)
	db, err := store.Open(path, store.Options{CacheSessions: -1})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(path, int64(2*os.Getpagesize())); err != nil {
		t.Fatal(err)
	}
	_, err = db.History("telegram:1005")
	if !errors.Is(err, store.ErrDamaged) {
		t.Fatalf("read of a vanished page: %v", err)
	}
	if ok, msg := db.Health(); ok || !strings.Contains(msg, "restart perch") {
		t.Fatalf("health = %v %q", ok, msg)
	}
	db.Close()
	if !store.MarkerUnclean(path) {
		t.Fatal("the marker says clean after damage")
	}
	db, err = store.Open(path, store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if r := db.Recovered(); r == nil || !r.UncleanShutdown {
		t.Fatalf("not recovered at the next start: %+v", r)
	}
}
