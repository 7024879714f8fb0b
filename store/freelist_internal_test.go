package store

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/perchhq/perch/appliance/chat"
)

// newestMeta reads the meta bbolt would use from the file at path.
func newestMeta(t *testing.T, path string) boltMeta {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, _ := f.Stat()
	metas, problems := readMetas(f, st.Size())
	if len(metas) == 0 {
		t.Fatalf("no valid meta: %v", problems)
	}
	return metas[0]
}

// TestCleanCloseWritesTheFreelist: a clean close leaves the freelist
// written, so the next open need not rebuild it; commits while running leave
// it out again; across open/close cycles with deletes in between, bbolt's
// own consistency check (which compares the freelist with the pages the
// tree reaches) stays clean and nothing written is lost.
func TestCleanCloseWritesTheFreelist(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	rng := rand.New(rand.NewPCG(1, 2))
	want := map[string]int{}
	for cycle := range 6 {
		db, err := Open(path, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if cycle > 0 && !db.freelistAtOpen {
			t.Fatalf("cycle %d: the file opened without the freelist the last close wrote", cycle)
		}
		if err := db.Check(); err != nil {
			t.Fatalf("cycle %d: bbolt's check after open: %v", cycle, err)
		}
		for key, n := range want {
			h, err := db.History(key)
			if err != nil || len(h) != n {
				t.Fatalf("cycle %d: session %s: %d messages (%v), want %d", cycle, key, len(h), err, n)
			}
		}
		for i := range 40 {
			key := fmt.Sprintf("s%d-%d", cycle, i)
			msgs := []chat.Message{{Role: "user", Content: strings.Repeat("x", 200+rng.IntN(3000))}}
			if err := db.Append(key, msgs, chat.Usage{}, 100); err != nil {
				t.Fatal(err)
			}
			want[key] = 1
		}
		// Deleting sessions frees pages, so the freelist has ids to list.
		for key := range want {
			if rng.IntN(3) == 0 {
				if err := db.Reset(key); err != nil {
					t.Fatal(err)
				}
				delete(want, key)
			}
		}
		if err := db.settle(); err != nil {
			t.Fatal(err)
		}
		if m := newestMeta(t, path); m.freelist != noFreelist {
			t.Fatalf("cycle %d: a commit while running wrote the freelist (page %d)", cycle, m.freelist)
		}
		if err := db.Close(); err != nil {
			t.Fatal(err)
		}
		m := newestMeta(t, path)
		if m.freelist == noFreelist {
			t.Fatalf("cycle %d: no freelist after a clean close", cycle)
		}
		f, _ := os.Open(path)
		st, _ := f.Stat()
		chk := verifyFile(f, st.Size(), true, false)
		w := newWalker(f, st.Size(), m, &checkVisitor{c: &fileCheck{}})
		w.run()
		f.Close()
		if !chk.sound() || len(w.problems) > 0 {
			t.Fatalf("cycle %d: the closed file: %v %v", cycle, chk.problems, w.problems)
		}
		if cycle > 0 && len(w.free) == 0 {
			t.Errorf("cycle %d: the freelist lists no page after deletes", cycle)
		}
	}
}

// TestCloseWithoutWritesLeavesTheFile: opening a file whose freelist is
// written and closing it without a write (a CLI command that only reads)
// changes no byte of it.
func TestCloseWithoutWritesLeavesTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	db.Append("a", []chat.Message{{Role: "user", Content: "hello"}}, chat.Usage{}, 100)
	db.Close()
	before, _ := os.ReadFile(path)
	db, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if h, err := db.History("a"); err != nil || len(h) != 1 {
		t.Fatalf("history %v %v", h, err)
	}
	db.Close()
	after, _ := os.ReadFile(path)
	if !bytes.Equal(before, after) {
		t.Error("a close after only reads rewrote the file")
	}
}

// TestFreelistListingAUsedPageIsDamage: a freelist that lists a page the
// tree uses would have bbolt hand that page out again and overwrite live
// data. The check at open finds it, and the file is set aside with its
// sessions salvaged, as for any other damage.
func TestFreelistListingAUsedPageIsDamage(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		db.Append(fmt.Sprintf("s%d", i), []chat.Message{{Role: "user", Content: strings.Repeat("y", 1500)}}, chat.Usage{}, 100)
	}
	for i := range 10 {
		db.Reset(fmt.Sprintf("s%d", i))
	}
	db.Close()
	m := newestMeta(t, path)
	if m.freelist == noFreelist {
		t.Fatal("no freelist after a clean close")
	}
	// The first id the freelist page lists becomes the root page's id.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	page := make([]byte, m.pageSize)
	if _, err := f.ReadAt(page, int64(m.freelist)*int64(m.pageSize)); err != nil {
		t.Fatal(err)
	}
	off := pageHeaderSize
	if ne.Uint16(page[10:]) == 0xFFFF {
		off += 8
	}
	if ne.Uint16(page[10:]) == 0 {
		t.Fatal("the freelist is empty; the test needs freed pages")
	}
	ne.PutUint64(page[off:], m.root)
	if _, err := f.WriteAt(page, int64(m.freelist)*int64(m.pageSize)); err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	chk := verifyFile(f, st.Size(), false, true)
	f.Close()
	if chk.sound() || !strings.Contains(strings.Join(chk.problems, "; "), "listed as free but is in use") {
		t.Fatalf("check of a freelist listing the root page: %v", chk.problems)
	}
	db, err = Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	r := db.Recovered()
	if r == nil {
		t.Fatal("the file was not set aside")
	}
	if ss, _ := db.Sessions(); len(ss) != 20 {
		t.Errorf("%d sessions salvaged, want 20 (%+v)", len(ss), r.Salvaged)
	}
	if err := db.Check(); err != nil {
		t.Errorf("bbolt's check of the fresh file: %v", err)
	}
}
