package systemd

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"

	"github.com/perchhq/perch/systemd/systemdtest"
)

// testdata/journal.export holds, one second apart from 2024-05-14T10:00:00Z
// on host perch-pi: systemd's "Starting perch.service" message (UNIT=), 150
// entries of perch.service ("perch entry NNN of 150"), an ssh.service entry
// after every third of them, and a cron.service entry after the last.

var (
	fixtureOnce sync.Once
	fixtureDir  string
)

// fixture unpacks the journal once per test binary (an 8 MiB file) and
// points journalctl's clock at UTC.
func fixture(t *testing.T) string {
	t.Helper()
	systemdtest.Need(t, "journalctl", "systemd")
	t.Setenv("TZ", "UTC")
	fixtureOnce.Do(func() {
		dir, err := os.MkdirTemp("", "perch-journal")
		if err != nil {
			t.Fatal(err)
		}
		fixtureDir = dir
	})
	if _, err := os.Stat(filepath.Join(fixtureDir, "fixture.journal")); err != nil {
		built := systemdtest.Journal(t, "testdata/journal.export")
		if err := copyFile(filepath.Join(built, "fixture.journal"), filepath.Join(fixtureDir, "fixture.journal")); err != nil {
			t.Fatal(err)
		}
	}
	return fixtureDir
}

func TestMain(m *testing.M) {
	code := m.Run()
	if fixtureDir != "" {
		_ = os.RemoveAll(fixtureDir)
	}
	os.Exit(code)
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o644)
}

var perchLine = regexp.MustCompile(`^2024-05-14T\d\d:\d\d:\d\d\+0000 perch-pi perch\[812\]: perch entry (\d{3}) of 150$`)

// TestLogsLastEntriesOfTheUnit: the newest n entries of the unit only, oldest
// first, in journalctl's short-iso lines.
func TestLogsLastEntriesOfTheUnit(t *testing.T) {
	dir := fixture(t)
	tests := []struct {
		name        string
		n           int
		lines       int
		first, last string
	}{
		{"default is the last 100", 0, 100, "perch entry 051 of 150", "perch entry 150 of 150"},
		{"last 100", 100, 100, "perch entry 051 of 150", "perch entry 150 of 150"},
		{"last 5", 5, 5, "perch entry 146 of 150", "perch entry 150 of 150"},
		{"more than there are, with systemd's own line", 1000, 151, "systemd[1]: Starting perch.service", "perch entry 150 of 150"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := Journal{Directory: dir}.Logs(context.Background(), "perch.service", tt.n)
			if err != nil {
				t.Fatal(err)
			}
			lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
			if len(lines) != tt.lines {
				t.Fatalf("%d lines, want %d:\n%s", len(lines), tt.lines, out)
			}
			if !strings.Contains(lines[0], tt.first) || !strings.Contains(lines[len(lines)-1], tt.last) {
				t.Fatalf("first %q, last %q; want %q ... %q", lines[0], lines[len(lines)-1], tt.first, tt.last)
			}
			for _, l := range lines {
				if strings.Contains(l, "perch[812]") && !perchLine.MatchString(l) {
					t.Fatalf("line %q is not short-iso", l)
				}
				if strings.Contains(l, "ssh") || strings.Contains(l, "cron") {
					t.Fatalf("line of another unit: %q", l)
				}
			}
		})
	}
}

// TestLogsSources: --file reads named files; a unit without entries says so.
func TestLogsSources(t *testing.T) {
	dir := fixture(t)
	out, err := Journal{Files: []string{filepath.Join(dir, "fixture.journal")}}.Logs(context.Background(), "perch.service", 1)
	if err != nil {
		t.Fatal(err)
	}
	if !perchLine.MatchString(strings.TrimSuffix(out, "\n")) || !strings.Contains(out, "entry 150") {
		t.Fatalf("--file: got %q", out)
	}
	out, err = Journal{Directory: dir}.Logs(context.Background(), "quiet.service", 100)
	if err != nil || strings.TrimSpace(out) != "-- No entries --" {
		t.Fatalf("no entries: got %q, %v", out, err)
	}
}

// TestLogsOutputIsCapped: past MaxBytes the newest lines are kept whole and
// the cut is marked.
func TestLogsOutputIsCapped(t *testing.T) {
	dir := fixture(t)
	out, err := Journal{Directory: dir, MaxBytes: 1000}.Logs(context.Background(), "perch.service", 100)
	if err != nil {
		t.Fatal(err)
	}
	marker := "[earlier output cut: more than 1000 bytes]\n"
	if !strings.HasPrefix(out, marker) {
		t.Fatalf("no cut marker:\n%s", out)
	}
	body := strings.TrimPrefix(out, marker)
	if len(body) > 1000 {
		t.Fatalf("kept %d bytes, cap 1000", len(body))
	}
	for _, l := range strings.Split(strings.TrimSuffix(body, "\n"), "\n") {
		if !perchLine.MatchString(l) {
			t.Fatalf("cut inside a line: %q", l)
		}
	}
	if !strings.HasSuffix(body, "perch entry 150 of 150\n") {
		t.Fatalf("newest entry missing:\n%s", body)
	}
}

func TestTailBuffer(t *testing.T) {
	tests := []struct {
		name   string
		writes []string
		max    int
		want   string
	}{
		{"under the cap", []string{"a\n", "b\n"}, 10, "a\nb\n"},
		{"many small writes", []string{"1111\n", "2222\n", "3333\n", "4444\n", "5555\n"}, 12, "[earlier output cut: more than 12 bytes]\n4444\n5555\n"},
		{"one huge write", []string{"xxxxxxxxxxxxxxxxxxxx\nlast\n"}, 8, "[earlier output cut: more than 8 bytes]\nlast\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := &tailBuffer{max: tt.max}
			for _, w := range tt.writes {
				if n, err := b.Write([]byte(w)); n != len(w) || err != nil {
					t.Fatalf("Write = %d, %v", n, err)
				}
				if len(b.buf) > 2*tt.max {
					t.Fatalf("buffer grew to %d for cap %d", len(b.buf), tt.max)
				}
			}
			if got := b.String(); got != tt.want {
				t.Fatalf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestLogsErrors: each failure wraps its sentinel and names the fix.
func TestLogsErrors(t *testing.T) {
	systemdtest.Need(t, "journalctl", "systemd")
	tests := []struct {
		name     string
		j        Journal
		unit     string
		n        int
		sentinel error
		words    []string
	}{
		{"journalctl missing", Journal{Command: filepath.Join(t.TempDir(), "journalctl")}, "perch.service", 100,
			ErrNoJournalctl, []string{"install the systemd package"}},
		{"journal directory missing", Journal{Directory: filepath.Join(t.TempDir(), "none")}, "perch.service", 100,
			ErrJournal, []string{"exit status 1", "No such file or directory"}},
		{"not a journal file", Journal{Files: []string{"testdata/journal.export"}}, "perch.service", 100,
			ErrJournal, []string{"exit status 1", "Bad message"}},
		{"option as unit name", Journal{}, "--all", 100, ErrBadUnitName, []string{"perch.service"}},
		{"too many entries", Journal{}, "perch.service", 20000, nil, []string{"ask for 1 to 10000"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := tt.j.Logs(context.Background(), tt.unit, tt.n)
			if out != "" {
				t.Errorf("output %q beside an error", out)
			}
			wantErr(t, err, tt.sentinel, tt.words...)
		})
	}
}

// TestLogsWithoutJournalAccess: a user outside systemd-journal gets an
// error naming the group, not an empty log. As root the test re-runs itself
// as nobody, since root reads every file.
func TestLogsWithoutJournalAccess(t *testing.T) {
	systemdtest.Need(t, "journalctl", "systemd")
	if os.Getuid() == 0 {
		runAsNobody(t)
		return
	}
	dir := systemdtest.Journal(t, "testdata/journal.export")
	// Unreadable for its owner too: like system.journal (0640
	// root:systemd-journal) for the perch user outside that group.
	if err := os.Chmod(filepath.Join(dir, "fixture.journal"), 0); err != nil {
		t.Fatal(err)
	}
	out, err := Journal{Directory: dir}.Logs(context.Background(), "perch.service", 100)
	if out != "" {
		t.Errorf("output %q beside an error", out)
	}
	wantErr(t, err, ErrJournalAccess, "group systemd-journal", "SupplementaryGroups=systemd-journal", "insufficient permissions")
}

// runAsNobody runs this test binary's current test as user nobody.
func runAsNobody(t *testing.T) {
	setpriv := systemdtest.Need(t, "setpriv", "util-linux")
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// The go test build directory is private to root: run a copy from a
	// directory nobody can enter.
	dir, err := os.MkdirTemp("", "perch-nobody")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "systemd.test")
	if err := copyFile(exe, bin); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	// The package directory may be closed to nobody too: the child runs in
	// dir, with its own copy of the fixture journal.
	if err := os.Mkdir(filepath.Join(dir, "testdata"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := copyFile("testdata/journal.journal.gz", filepath.Join(dir, "testdata", "journal.journal.gz")); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(setpriv, "--reuid=65534", "--regid=65534", "--clear-groups", "--",
		bin, "-test.run=^"+t.Name()+"$", "-test.v", "-test.count=1")
	cmd.Dir = dir
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Fatalf("as nobody: %v\n%s", err, out.Bytes())
	}
	if !bytes.Contains(out.Bytes(), []byte(fmt.Sprintf("--- PASS: %s", t.Name()))) {
		t.Fatalf("as nobody the test did not pass:\n%s", out.Bytes())
	}
}
