package systemdtest

import (
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// JournalStream returns a file to stand in for a process's standard error
// and the JOURNAL_STREAM value ("device:inode") systemd would set when that
// file is the stream it connected to the journal.
func JournalStream(t testing.TB) (*os.File, string) {
	t.Helper()
	f, err := os.Create(filepath.Join(t.TempDir(), "stderr"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		t.Fatal(err)
	}
	return f, fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}
