package systemd

import (
	"fmt"
	"os"
	"syscall"
)

// LogsToJournal reports whether f (the process's standard error) is the
// stream systemd connected to the journal. systemd names that stream's
// device and inode in JOURNAL_STREAM for the services it starts; the
// variable alone is not enough, because every process a service starts
// inherits it (a shell in a terminal that runs as a user service has it
// too) while its standard error may go elsewhere. lookup reads the
// environment (os.LookupEnv).
func LogsToJournal(lookup func(string) (string, bool), f *os.File) bool {
	want, ok := lookup("JOURNAL_STREAM")
	if !ok || want == "" || f == nil {
		return false
	}
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return false
	}
	return want == fmt.Sprintf("%d:%d", st.Dev, st.Ino)
}
