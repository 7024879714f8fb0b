package store

import (
	"testing"

	"github.com/perchhq/perch/appliance/chat"
)

// TestLoadRacingAWriteIsNotCached: a disk read that a write to the same
// session overtook is not cached, so the cache never holds an old history.
func TestLoadRacingAWriteIsNotCached(t *testing.T) {
	c := newHistoryCache(4)
	old := []chat.Message{{Role: "user", Content: "1"}}
	c.beginLoad("a")
	c.appended("a", []chat.Message{{Role: "user", Content: "2"}}, 0) // commits while the read runs
	c.finishLoad("a", old, true)
	if _, ok := c.get("a"); ok {
		t.Fatal("a read overtaken by a write was cached")
	}
	c.beginLoad("a")
	c.finishLoad("a", old, true)
	if got, ok := c.get("a"); !ok || len(got) != 1 {
		t.Fatal("an undisturbed read was not cached")
	}
	c.beginLoad("b")
	c.drop("b")
	c.finishLoad("b", old, true)
	if _, ok := c.get("b"); ok {
		t.Fatal("a read overtaken by a reset was cached")
	}
	c.beginLoad("c")
	c.finishLoad("c", old, false)
	if _, ok := c.get("c"); ok || len(c.loads) != 0 {
		t.Fatal("a failed read was cached or left a load behind")
	}
}

// TestDropUnpinnedKeepsWhatTheJournalNeeds: dropping the cache keeps the
// entries whose appends bbolt has not taken (the only up-to-date copy)
// and forgets the others.
func TestDropUnpinnedKeepsWhatTheJournalNeeds(t *testing.T) {
	c := newHistoryCache(4)
	for _, k := range []string{"a", "b", "c"} {
		c.beginLoad(k)
		c.finishLoad(k, []chat.Message{{Role: "user", Content: k}}, true)
	}
	if !c.pin("b") {
		t.Fatal("b was not cached")
	}
	if n := c.dropUnpinned(); n != 2 {
		t.Fatalf("dropped %d, want 2", n)
	}
	if _, ok := c.get("a"); ok {
		t.Error("a is still cached")
	}
	if got, ok := c.get("b"); !ok || got[0].Content != "b" {
		t.Error("the pinned entry was dropped")
	}
	if c.ll.Len() != 1 || len(c.items) != 1 {
		t.Errorf("list %d, map %d entries", c.ll.Len(), len(c.items))
	}
	if n := newHistoryCache(-1).dropUnpinned(); n != 0 {
		t.Errorf("a disabled cache dropped %d", n)
	}
}
