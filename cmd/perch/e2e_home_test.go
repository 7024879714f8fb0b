package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestHomeCreatedPrivate: whichever command makes PERCH_HOME first makes
// it 0700, since it will hold the config, the token and the database. A
// command that only reads (db check) makes nothing and says why.
func TestHomeCreatedPrivate(t *testing.T) {
	for _, args := range [][]string{
		{"onboard"},
		{"cron", "list"},
		{"agent", "-m", "/help"},
	} {
		t.Run(args[0], func(t *testing.T) {
			h := &Home{t: t, Dir: filepath.Join(t.TempDir(), "fresh", "home")}
			_, stderr, _ := h.Run(args...)
			fi, err := os.Stat(h.Dir)
			if err != nil {
				t.Fatalf("perch %v made no home: %v\n%s", args, err, stderr)
			}
			if got := fi.Mode().Perm(); got != 0o700 {
				t.Errorf("perch %v made PERCH_HOME %v, want 0700", args, got)
			}
		})
	}
	h := &Home{t: t, Dir: filepath.Join(t.TempDir(), "fresh")}
	_, stderr, code := h.Run("db", "check")
	if code != 1 || !strings.Contains(stderr, "no database at "+filepath.Join(h.Dir, "perch.db")+" yet") {
		t.Errorf("db check without a database: exit %d, %q", code, stderr)
	}
	_, stderr, code = h.Run("db", "salvage")
	if code != 1 || !strings.Contains(stderr, "no database at "+filepath.Join(h.Dir, "perch.db")+" and no damaged copy") {
		t.Errorf("db salvage without a database: exit %d, %q", code, stderr)
	}
	if _, err := os.Stat(h.Dir); err == nil {
		t.Errorf("db check or salvage made %s", h.Dir)
	}
}
