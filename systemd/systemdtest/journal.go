package systemdtest

import (
	"bytes"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// JournalRemote is where Debian installs systemd-journal-remote (package
// systemd-journal-remote); it is not on PATH.
const JournalRemote = "/lib/systemd/systemd-journal-remote"

// BuildJournal turns a journal export stream (systemd-journal-export(5): one
// FIELD=value per line, a blank line between entries) into a journal file
// in a new directory, and returns the directory, for journalctl --directory.
func BuildJournal(t testing.TB, export io.Reader) string {
	t.Helper()
	remote := Need(t, JournalRemote, "systemd-journal-remote")
	dir := t.TempDir()
	cmd := exec.Command(remote, "--output="+filepath.Join(dir, "fixture.journal"), "-")
	cmd.Stdin = export
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("systemd-journal-remote: %v: %s", err, out.Bytes())
	}
	return dir
}

// BuildJournalFile is BuildJournal reading the export text from a file.
func BuildJournalFile(t testing.TB, exportPath string) string {
	t.Helper()
	f, err := os.Open(exportPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	return BuildJournal(t, f)
}
