package agent

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

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

// timeoutError is a turn past its deadline, with what it was waiting for,
// so the person reading it knows whether the provider, a tool or the
// queue was slow. It is ErrTimeout to errors.Is.
type timeoutError struct {
	limit   time.Duration
	waiting string
}

func (e *timeoutError) Error() string {
	s := "agent: the turn ran past its " + strconv.FormatFloat(e.limit.Seconds(), 'f', -1, 64) + "-second deadline (agents.defaults.turn_timeout_seconds)"
	if e.waiting != "" {
		s += " waiting for " + e.waiting
	}
	return s
}

func (e *timeoutError) Is(target error) bool { return target == ErrTimeout }

// providerWait names the provider call a timed-out turn was waiting for.
func providerWait(p Provider) string {
	return fmt.Sprintf("provider %s (model %s) to answer", p.Name(), p.Model())
}
