// Package storetest opens throw-away stores for tests and checks their
// consistency when the test ends.
package storetest

import (
	"path/filepath"
	"testing"

	"github.com/perchhq/perch/store"
)

// Open returns a store in a temp dir; at cleanup it closes the store and
// fails the test if the file is inconsistent (bbolt's tx.Check) or holds a
// record that does not decode (store.CheckFile).
func Open(t testing.TB) *store.DB {
	t.Helper()
	path := filepath.Join(t.TempDir(), "perch.db")
	db, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatalf("storetest: %v", err)
	}
	t.Cleanup(func() {
		if err := db.Check(); err != nil {
			t.Errorf("storetest: database inconsistent: %v", err)
		}
		if err := db.Close(); err != nil {
			t.Errorf("storetest: close: %v", err)
		}
		rep, err := store.CheckFile(path)
		if err != nil {
			t.Errorf("storetest: check: %v", err)
		} else if !rep.OK() {
			t.Errorf("storetest: %s", rep)
		}
	})
	return db
}

// CheckFile opens the file at path, checks it and closes it.
func CheckFile(t testing.TB, path string) {
	t.Helper()
	db, err := store.Open(path, store.Options{})
	if err != nil {
		t.Fatalf("storetest: reopen %s: %v", path, err)
	}
	defer db.Close()
	if err := db.Check(); err != nil {
		t.Fatalf("storetest: %s inconsistent: %v", path, err)
	}
}
