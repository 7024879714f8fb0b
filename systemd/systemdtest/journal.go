package systemdtest

import (
	"bytes"
	"compress/gzip"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// JournalRemote is where Debian installs systemd-journal-remote (package
// systemd-journal-remote); it is not on PATH.
const JournalRemote = "/lib/systemd/systemd-journal-remote"

var updateJournal = flag.Bool("update-journal", false, "rebuild testdata/*.journal.gz from their .export files with systemd-journal-remote")

// Journal returns a new directory holding fixture.journal, a journal file
// unpacked from the committed <export without .export>.journal.gz beside
// exportPath, for journalctl --directory.
//
// The journal is committed, built once from the export text (one
// FIELD=value per line, systemd-journal-export(5)), because
// systemd-journal-remote must have the exact version of the host's systemd:
// installing it would upgrade the host's systemd whenever Debian's archive
// is a point release ahead. Run the test with -update-journal on a machine
// that has it to rebuild the file after changing the export.
func Journal(t testing.TB, exportPath string) string {
	t.Helper()
	gz := strings.TrimSuffix(exportPath, ".export") + ".journal.gz"
	if *updateJournal {
		built := BuildJournalFile(t, exportPath)
		raw, err := os.ReadFile(filepath.Join(built, "fixture.journal"))
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zw.Write(raw)
		zw.Close()
		if err := os.WriteFile(gz, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(gz)
	if err != nil {
		t.Fatalf("fixture journal: %v (rebuild it with -update-journal)", err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatalf("fixture journal %s: %v", gz, err)
	}
	dir := t.TempDir()
	out, err := os.OpenFile(filepath.Join(dir, "fixture.journal"), os.O_CREATE|os.O_WRONLY, 0o640)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, zr); err != nil {
		t.Fatalf("fixture journal %s: %v", gz, err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

// BuildJournal turns a journal export stream (systemd-journal-export(5): one
// FIELD=value per line, a blank line between entries) into a journal file
// in a new directory, and returns the directory, for journalctl --directory.
// It needs systemd-journal-remote; tests use Journal.
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
