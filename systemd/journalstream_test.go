package systemd

import (
	"fmt"
	"os"
	"testing"

	"github.com/perchhq/perch/systemd/systemdtest"
)

// TestLogsToJournal: only the stream JOURNAL_STREAM names counts as the
// journal; the variable inherited by a process whose standard error is
// another file does not.
func TestLogsToJournal(t *testing.T) {
	f, stream := systemdtest.JournalStream(t)
	var dev, ino uint64
	if _, err := fmt.Sscanf(stream, "%d:%d", &dev, &ino); err != nil {
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
		{"this file", stream, f, true},
		{"another inode", fmt.Sprintf("%d:%d", dev, ino+1), f, false},
		{"another device", fmt.Sprintf("%d:%d", dev+1, ino), f, false},
		{"unset", "", f, false},
		{"garbage", "journal", f, false},
		{"no file", stream, nil, false},
	} {
		if got := LogsToJournal(env(tc.env), tc.f); got != tc.want {
			t.Errorf("%s: LogsToJournal = %v, want %v", tc.name, got, tc.want)
		}
	}
}
