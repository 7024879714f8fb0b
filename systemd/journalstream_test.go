package systemd

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// TestLogsToJournal: only the stream JOURNAL_STREAM names counts as the
// journal; the variable inherited by a process whose standard error is
// another file does not.
func TestLogsToJournal(t *testing.T) {
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	env := func(v string) func(string) (string, bool) {
		return func(k string) (string, bool) {
			if k == "JOURNAL_STREAM" && v != "" {
				return v, true
			}
			return "", false
		}
	}
	for _, tc := range []struct {
		name string
		env  string
		f    *os.File
		want bool
	}{
		{"this file", fmt.Sprintf("%d:%d", st.Dev, st.Ino), f, true},
		{"another inode", fmt.Sprintf("%d:%d", st.Dev, st.Ino+1), f, false},
		{"another device", fmt.Sprintf("%d:%d", st.Dev+1, st.Ino), f, false},
		{"unset", "", f, false},
		{"garbage", "journal", f, false},
		{"no file", fmt.Sprintf("%d:%d", st.Dev, st.Ino), nil, false},
	} {
		if got := LogsToJournal(env(tc.env), tc.f); got != tc.want {
			t.Errorf("%s: LogsToJournal = %v, want %v", tc.name, got, tc.want)
		}
	}
}
