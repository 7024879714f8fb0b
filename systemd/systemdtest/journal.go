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
// is a point release ahead. To rebuild the file after changing the export
// (each entry ends with a blank line, the last one too, or
// systemd-journal-remote drops it), run the tests with -update-journal
// where it exists: the host's own version can be fetched without installing
// it (apt-get download systemd-journal-remote=<the host's systemd version>
// libmicrohttpd12, then dpkg-deb -x) and run from there. The rebuilt file is
// checked to hold every entry of the export before it is written.
func Journal(t testing.TB, exportPath string) string {
	t.Helper()
	gz := strings.TrimSuffix(exportPath, ".export") + ".journal.gz"
	if *updateJournal {
		built := buildJournalFile(t, exportPath)
		checkJournal(t, built, exportPath)
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

// buildJournalFile turns the journal export text at exportPath
// (systemd-journal-export(5): one FIELD=value per line, a blank line after
// each entry) into a journal file in a new directory, and returns the
// directory, for journalctl --directory. It needs systemd-journal-remote,
// so only -update-journal runs it.
func buildJournalFile(t testing.TB, exportPath string) string {
	t.Helper()
	remote := Need(t, JournalRemote, "systemd-journal-remote")
	f, err := os.Open(exportPath)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	dir := t.TempDir()
	cmd := exec.Command(remote, "--output="+filepath.Join(dir, "fixture.journal"), "-")
	cmd.Stdin = f
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("systemd-journal-remote: %v: %s", err, out.Bytes())
	}
	return dir
}

// checkJournal fails unless journalctl reads back from dir as many entries
// as the export at exportPath holds: a rebuilt file before it is written,
// the committed one in the tests.
func checkJournal(t testing.TB, dir, exportPath string) {
	t.Helper()
	export, err := os.ReadFile(exportPath)
	if err != nil {
		t.Fatal(err)
	}
	want := 0
	for _, e := range strings.Split(string(export), "\n\n") {
		if strings.TrimSpace(e) != "" {
			want++
		}
	}
	journalctl := Need(t, "journalctl", "systemd")
	out, err := exec.Command(journalctl, "--directory="+dir, "--no-pager", "--output=json").Output()
	if err != nil {
		t.Fatalf("journalctl cannot read the journal built from %s: %v", exportPath, err)
	}
	if got := strings.Count(string(out), "\n"); got != want {
		t.Fatalf("the journal built from %s holds %d entries, the export %d (does its last entry end with a blank line?)", exportPath, got, want)
	}
}
