package systemd

import "errors"

// Sentinels for the callers that branch; every error this package returns
// wraps at most one of them and says the cause and the fix in its text.
var (
	// ErrNoSystemd: no D-Bus, or no systemd on it. The gateway is not running
	// under systemd (a container, a laptop, `make run`).
	ErrNoSystemd = errors.New("systemd is not running here")
	// ErrUnitNotFound: systemd does not know the unit (not installed, or a
	// daemon-reload is missing).
	ErrUnitNotFound = errors.New("unit not found")
	// ErrBadUnitName: the name is not a plain unit name such as perch.service.
	ErrBadUnitName = errors.New("invalid unit name")
	// ErrNoJournalctl: the journalctl program is not installed or not on PATH.
	ErrNoJournalctl = errors.New("journalctl not found")
	// ErrJournalAccess: the process may not read the system journal.
	ErrJournalAccess = errors.New("no access to the system journal")
	// ErrJournal: journalctl ran and failed for another reason.
	ErrJournal = errors.New("journalctl failed")
)
