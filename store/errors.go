package store

import "errors"

// Sentinel errors.
var (
	// ErrClosed is returned by operations on a closed DB.
	ErrClosed = errors.New("store: database is closed")
	// ErrLocked is returned by Open when another process holds the file.
	ErrLocked = errors.New("store: database is locked")
	// ErrNewerSchema is returned by Open for a file written by a newer perch.
	ErrNewerSchema = errors.New("store: database schema is newer than this perch")
	// ErrDamaged is matched by errors about a damaged file: from Open with
	// Options.NoRecover, and from any call that met damage while running.
	ErrDamaged = errors.New("store: database is damaged")
	// ErrNotFound is returned by Get for an absent record.
	ErrNotFound = errors.New("store: not found")
)
