package systemd

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"
)

// DefaultLogEntries is how many entries /admin/logs shows: enough for the
// story of a failure, small enough for a phone.
const DefaultLogEntries = 100

// Journal reads a unit's entries with journalctl. The zero Journal reads the
// system journal through the journalctl on PATH.
//
// journalctl rather than a journal reader library: the default build has no
// cgo (sdjournal dlopens libsystemd), and journalctl's `-o short-iso` text is
// what an operator reads on the board anyway — full timestamps with the zone,
// multi-line and binary fields already handled — so there is nothing to
// re-implement from `-o json`.
type Journal struct {
	// Command is the journalctl program; empty means "journalctl" on PATH.
	Command string
	// Directory, when set, reads the journal files in that directory
	// (journalctl --directory) instead of the system journal: a journal
	// copied off a board, or /var/log/journal/<machine-id> of a mounted
	// image.
	Directory string
	// Files, when set, reads these journal files (journalctl --file).
	Files []string
	// Timeout bounds one call when ctx has no earlier deadline; zero means
	// 10 seconds.
	Timeout time.Duration
	// MaxBytes caps the output kept; the newest part is kept and the cut is
	// marked. Zero means 256 KiB, enough for 100 lines of about 2.5 KiB.
	MaxBytes int
}

// Logs returns the last n entries of unit from the system journal. See
// Journal.Logs.
func Logs(ctx context.Context, unit string, n int) (string, error) {
	return Journal{}.Logs(ctx, unit, n)
}

// Logs returns the last n (1 to 10000; 0 means DefaultLogEntries) entries of
// unit, oldest first, as `journalctl -u unit -n n --no-pager -o short-iso`
// prints them. Errors wrap ErrBadUnitName, ErrNoJournalctl, ErrJournalAccess
// or ErrJournal and name the fix.
func (j Journal) Logs(ctx context.Context, unit string, n int) (string, error) {
	if err := checkUnitName(unit); err != nil {
		return "", err
	}
	if n == 0 {
		n = DefaultLogEntries
	}
	if n < 1 || n > 10000 {
		return "", fmt.Errorf("systemd: journal: %d entries asked: ask for 1 to 10000", n)
	}
	timeout := j.Timeout
	if timeout <= 0 {
		timeout = 10 * time.Second
	}
	max := j.MaxBytes
	if max <= 0 {
		max = 256 << 10
	}
	command := j.Command
	if command == "" {
		command = "journalctl"
	}
	path, err := exec.LookPath(command)
	if err != nil {
		return "", fmt.Errorf("systemd: %w (%v): reading the unit's log needs journalctl; install the systemd package", ErrNoJournalctl, err)
	}

	// --unit=NAME rather than -u NAME: the name can never be read as an
	// option. --quiet is left off so an empty result says "-- No entries --".
	args := []string{"--unit=" + unit, "--lines=" + fmt.Sprint(n), "--no-pager", "--output=short-iso"}
	if j.Directory != "" {
		args = append(args, "--directory="+j.Directory)
	}
	for _, f := range j.Files {
		args = append(args, "--file="+f)
	}

	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, args...)
	cmd.WaitDelay = time.Second
	// journalctl pages and colours only on a terminal; this keeps it so even
	// when someone exports SYSTEMD_PAGER or SYSTEMD_COLORS for a shell.
	cmd.Env = append(cmd.Environ(), "SYSTEMD_PAGER=", "SYSTEMD_COLORS=0")
	stdout := &tailBuffer{max: max}
	stderr := &tailBuffer{max: 4 << 10}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	err = cmd.Run()
	msg := strings.TrimSpace(stderr.String())
	switch {
	case ctx.Err() != nil && err != nil:
		return "", fmt.Errorf("systemd: %w: journalctl did not finish within %s (a huge or damaged journal? try journalctl --verify): %w", ErrJournal, timeout, ctx.Err())
	case isAccessProblem(msg):
		// Also on success: journalctl then read only the files it could
		// open, and the unit's entries were not among them.
		return "", fmt.Errorf("systemd: %w, so %s's entries are hidden: add the gateway's user to group systemd-journal (the packaged perch.service sets SupplementaryGroups=systemd-journal): %s", ErrJournalAccess, unit, oneLine(msg))
	case err != nil:
		if msg == "" {
			msg = "no message"
		}
		return "", fmt.Errorf("systemd: %w (%v): %s", ErrJournal, err, oneLine(msg))
	}
	return stdout.String(), nil
}

// isAccessProblem recognises journalctl's words for "you may not read the
// system journal": the hint it prints to non-members of systemd-journal/adm
// and the error when it could open no file at all.
func isAccessProblem(stderr string) bool {
	return strings.Contains(stderr, "insufficient permissions") ||
		strings.Contains(stderr, "not seeing messages from other users and the system")
}

// oneLine folds journalctl's multi-line messages for an error string.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// tailBuffer keeps the last max bytes written to it, starting at a line
// boundary once anything was dropped, so memory stays bounded however much
// journalctl prints.
type tailBuffer struct {
	max     int
	buf     []byte
	dropped bool
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	n := len(p)
	if len(p) > t.max {
		p = p[len(p)-t.max:]
		t.dropped = true
	}
	if len(t.buf)+len(p) > 2*t.max {
		keep := t.max - len(p)
		t.buf = append(t.buf[:0], t.buf[len(t.buf)-keep:]...)
		t.dropped = true
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// String returns the kept tail; when output was dropped it starts after the
// first cut line, under a marker saying so.
func (t *tailBuffer) String() string {
	b := t.buf
	if len(b) > t.max {
		b = b[len(b)-t.max:]
		t.dropped = true
	}
	if !t.dropped {
		return string(b)
	}
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[i+1:]
	}
	return fmt.Sprintf("[earlier output cut: more than %d bytes]\n%s", t.max, b)
}
