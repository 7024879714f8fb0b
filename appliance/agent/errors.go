package agent

import "errors"

// Sentinel errors; the gateway maps them to HTTP statuses.
var (
	// ErrBusy means the turn queue is full (503).
	ErrBusy = errors.New("agent: too many turns in progress; try again shortly")
	// ErrTimeout means the turn ran past turn_timeout_seconds (504).
	ErrTimeout = errors.New("agent: the turn ran past its deadline (agents.defaults.turn_timeout_seconds)")
	// ErrEmpty means the message had no text.
	ErrEmpty = errors.New("agent: empty message")
	// ErrStopped means the loop is shutting down.
	ErrStopped = errors.New("agent: shutting down")
)
