package channel

import (
	"fmt"
	"maps"
	"sync"
	"time"
)

// Status is a channel's state as /admin/status and the page show it.
type Status struct {
	Connected bool `json:"connected"`
	// Since is when the connection state last changed.
	Since       time.Time `json:"since,omitzero"`
	MessagesIn  uint64    `json:"messages_in"`
	MessagesOut uint64    `json:"messages_out"`
	LastError   string    `json:"last_error,omitempty"`
	LastErrorAt time.Time `json:"last_error_at,omitzero"`
	// Note is what the /ready check says besides connected or not
	// (Telegram's privacy mode, LINE's webhook URL).
	Note string `json:"note,omitempty"`
	// Extra holds platform figures (LINE: pushes_this_month).
	Extra map[string]any `json:"extra,omitempty"`
}

// State is one channel's live state: the platform sets the connection, the
// framework counts messages and keeps the last error. Safe for concurrent
// use.
type State struct {
	name string

	mu        sync.Mutex
	started   bool
	connected bool
	since     time.Time
	down      string // why not connected
	in, out   uint64
	lastErr   string
	lastErrAt time.Time
	note      string
	extra     map[string]any
	// connects counts the times the connection came up: the idle trimmer
	// reads it (Hub.Connects) to give back the pages a connection's
	// set-up touched (TLS, the WebSocket upgrade) once the board is quiet.
	connects uint64
}

// NewState returns the state of the channel called name, not yet started.
func NewState(name string) *State { return &State{name: name} }

// Name is the channel's name.
func (s *State) Name() string { return s.name }

// Connected records that the platform connection works.
func (s *State) Connected() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.connected || !s.started {
		s.since = time.Now()
		s.connects++
	}
	s.started, s.connected, s.down = true, true, ""
}

// connectCount is how many times the connection came up.
func (s *State) connectCount() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.connects
}

// Disconnected records that the connection is down and why, in words the
// /ready check shows ("Telegram unreachable: …; retrying in 8s").
func (s *State) Disconnected(why string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.connected || !s.started {
		s.since = time.Now()
	}
	s.started, s.connected, s.down = true, false, why
}

// SetNote sets the remark the /ready check adds (privacy mode, say);
// empty removes it.
func (s *State) SetNote(note string) {
	s.mu.Lock()
	s.note = note
	s.mu.Unlock()
}

// SetExtra sets a platform figure shown in /admin/status.
func (s *State) SetExtra(key string, v any) {
	s.mu.Lock()
	if s.extra == nil {
		s.extra = map[string]any{}
	}
	s.extra[key] = v
	s.mu.Unlock()
}

// CountIn counts a message that reached the agent.
func (s *State) CountIn() {
	s.mu.Lock()
	s.in++
	s.mu.Unlock()
}

// CountOut counts a message sent to the platform.
func (s *State) CountOut() {
	s.mu.Lock()
	s.out++
	s.mu.Unlock()
}

// Fail records err as the channel's last error.
func (s *State) Fail(err error) {
	if err == nil {
		return
	}
	s.mu.Lock()
	s.lastErr, s.lastErrAt = err.Error(), time.Now()
	s.mu.Unlock()
}

// Status returns a snapshot.
func (s *State) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	return Status{
		Connected: s.connected, Since: s.since, MessagesIn: s.in, MessagesOut: s.out,
		LastError: s.lastErr, LastErrorAt: s.lastErrAt, Note: s.note, Extra: maps.Clone(s.extra),
	}
}

// Check is the channel's /ready check: failing until the platform
// connection works, with the reason while it does not.
func (s *State) Check() (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	var msg string
	switch {
	case !s.started:
		return false, s.name + ": not started"
	case !s.connected:
		msg = s.down
		if msg == "" {
			msg = "not connected"
		}
	default:
		msg = fmt.Sprintf("connected since %s", s.since.Format(time.RFC3339))
	}
	if s.note != "" {
		msg += "; " + s.note
	}
	return s.connected, msg
}
