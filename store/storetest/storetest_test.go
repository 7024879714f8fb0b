package storetest

import (
	"github.com/perchhq/perch/appliance/chat"

	"testing"
)

// TestOpenGivesWritableStore: the helper's store accepts writes and passes
// its own cleanup check.
func TestOpenGivesWritableStore(t *testing.T) {
	db := Open(t)
	if err := db.Append("k", []chat.Message{{Role: "user", Content: "x"}}, chat.Usage{}, 100); err != nil {
		t.Fatal(err)
	}
	CheckFile(t, db.Path()+".missing-is-created") // a new file is consistent too
}
