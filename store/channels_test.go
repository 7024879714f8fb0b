package store

import (
	"fmt"
	"path/filepath"
	"sync"
	"testing"
)

func TestAdmitDeduplicatesAndKeepsTheInbox(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "perch.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	entry := func(id uint64) ([]byte, error) { return []byte(fmt.Sprintf(`{"id":%d}`, id)), nil }
	var wg sync.WaitGroup
	var mu sync.Mutex
	admitted := 0
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, dup, err := db.Admit("telegram", "u1", 100, entry)
			if err != nil {
				t.Error(err)
			}
			if !dup {
				mu.Lock()
				admitted++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if admitted != 1 {
		t.Fatalf("event admitted %d times, want once", admitted)
	}
	// The same id on another channel is another event.
	if _, dup, _ := db.Admit("line", "u1", 100, entry); dup {
		t.Error("ids are not scoped per channel")
	}
	if seen, _ := db.Seen("telegram", "u1"); !seen {
		t.Error("Seen does not know an admitted event")
	}
	var ids []uint64
	db.InboxList(func(id uint64, data []byte) error {
		ids = append(ids, id)
		if string(data) != fmt.Sprintf(`{"id":%d}`, id) {
			t.Errorf("entry %d holds %s", id, data)
		}
		return nil
	})
	if len(ids) != 2 || ids[0] >= ids[1] {
		t.Fatalf("inbox ids %v", ids)
	}
	var got string
	if found, err := db.InboxGet(ids[1], func(data []byte) error { got = string(data); return nil }); !found || err != nil || got != fmt.Sprintf(`{"id":%d}`, ids[1]) {
		t.Errorf("InboxGet(%d) = %v, %v, %s", ids[1], found, err, got)
	}
	if err := db.InboxDelete(ids[0]); err != nil {
		t.Fatal(err)
	}
	if found, err := db.InboxGet(ids[0], func([]byte) error { t.Error("called for a deleted entry"); return nil }); found || err != nil {
		t.Errorf("InboxGet of a deleted entry = %v, %v", found, err)
	}
	n := 0
	db.InboxList(func(uint64, []byte) error { n++; return nil })
	if n != 1 {
		t.Errorf("%d entries after delete", n)
	}
}

func TestAdmitRemembersOnlyTheNewestIDs(t *testing.T) {
	db, err := Open(filepath.Join(t.TempDir(), "perch.db"), Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := 0; i < 20; i++ {
		if _, _, err := db.Admit("slack", fmt.Sprint(i), 5, func(uint64) ([]byte, error) { return []byte("{}"), nil }); err != nil {
			t.Fatal(err)
		}
	}
	for i := 0; i < 20; i++ {
		seen, _ := db.Seen("slack", fmt.Sprint(i))
		if seen != (i >= 15) {
			t.Errorf("event %d seen=%v; only the newest 5 are kept", i, seen)
		}
	}
	if err := db.Check(); err != nil {
		t.Errorf("database inconsistent: %v", err)
	}
}

func TestRememberKeepsTheNewestKeysAcrossAReopen(t *testing.T) {
	path := filepath.Join(t.TempDir(), "perch.db")
	db, err := Open(path, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 18; i++ {
		if err := db.Remember("line/sent", 5, fmt.Sprint(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := db.Remember("line/sent", 5, "18", "19"); err != nil {
		t.Fatal(err)
	}
	// Again: a key already held is not added twice (it would push out
	// another).
	if err := db.Remember("line/sent", 5, "19"); err != nil {
		t.Fatal(err)
	}
	// Values of the bucket sit beside the sets.
	if err := db.Put(BucketChannels, "line/pushes", map[string]int{"count": 1}); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = Open(path, Options{}); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	for i := 0; i < 20; i++ {
		got, err := db.Remembered("line/sent", fmt.Sprint(i))
		if err != nil {
			t.Fatal(err)
		}
		if got != (i >= 15) {
			t.Errorf("key %d remembered=%v; only the newest 5 are kept", i, got)
		}
	}
	if got, _ := db.Remembered("slack/threads", "19"); got {
		t.Error("sets are not kept apart")
	}
	var v map[string]int
	if err := db.Get(BucketChannels, "line/pushes", &v); err != nil || v["count"] != 1 {
		t.Errorf("a value beside the sets: %v, %v", v, err)
	}
	if err := db.Check(); err != nil {
		t.Errorf("database inconsistent: %v", err)
	}
}
