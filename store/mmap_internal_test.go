package store

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/perchhq/perch/appliance/chat"
)

// TestOpenLoadsOnlyThePagesInUse: the walk at open loads the file up to the
// larger high water mark of its two meta pages, not bbolt's preallocated
// tail; the whole file when the marks cannot be trusted (no valid meta, or
// a mark past the end of a truncated file), so that the walk still reports
// what is wrong.
func TestOpenLoadsOnlyThePagesInUse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		msgs := []chat.Message{{Role: "user", Content: strings.Repeat("y", 3000)}}
		if err := db.Append(fmt.Sprintf("s%d", i), msgs, chat.Usage{}, 100); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	// A tail past the marks, as bbolt's growth leaves it (zeros there;
	// bytes that are not pages here, which the walk must never read).
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	st, _ := f.Stat()
	if _, err := f.WriteAt([]byte(strings.Repeat("\xff", 1<<20)), st.Size()); err != nil {
		t.Fatal(err)
	}
	st, _ = f.Stat()
	metas, problems := readMetas(f, st.Size())
	if len(metas) != 2 {
		t.Fatalf("want two valid metas, got %d: %v", len(metas), problems)
	}
	want := int64(max(metas[0].pgid, metas[1].pgid)) * int64(metas[0].pageSize)
	if got := inUse(f, st.Size()); got != want || got >= st.Size()-1<<20 {
		t.Fatalf("inUse = %d bytes of a %d-byte file, want the high water mark's %d", got, st.Size(), want)
	}
	f.Close()

	db, err = Open(path, Options{NoRecover: true})
	if err != nil {
		t.Fatalf("open with a tail past the high water mark: %v", err)
	}
	if h, err := db.History("s29"); err != nil || len(h) != 1 {
		t.Fatalf("history after reopen: %d messages, %v", len(h), err)
	}
	db.Close()

	t.Run("truncated", func(t *testing.T) {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		short := want - 2*int64(metas[0].pageSize)
		if err := f.Truncate(short); err != nil {
			t.Fatal(err)
		}
		if got := inUse(f, short); got != short {
			t.Fatalf("inUse of a file cut below its high water mark = %d, want all %d bytes", got, short)
		}
	})
	t.Run("no valid meta", func(t *testing.T) {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		st, _ := f.Stat()
		for _, off := range []int64{pageHeaderSize, int64(metas[0].pageSize) + pageHeaderSize} {
			if _, err := f.WriteAt([]byte{0, 0, 0, 0}, off); err != nil {
				t.Fatal(err)
			}
		}
		if got := inUse(f, st.Size()); got != st.Size() {
			t.Fatalf("inUse without a valid meta = %d, want all %d bytes", got, st.Size())
		}
	})
}
