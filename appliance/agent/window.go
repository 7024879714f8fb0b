package agent

import (
	"errors"
	"sync"

	"github.com/perchhq/perch/appliance/chat"
	"github.com/perchhq/perch/appliance/provider"
)

// A conversation outgrows a model's context window long before it reaches
// the history limit when its messages are long (a fetched page, a file):
// the provider then refuses every turn, and the chat is stuck until /new.
// The turn that meets the refusal sends the newer half of the history
// instead, and again if need be; the session then starts its later turns'
// histories where that turn's did, and they pay no failed call each. The
// stored history stays whole: a model with a larger window, or the same
// one after a restart, sees it all again.
//
// Where a window starts is the first message it keeps, not a count of the
// latest messages: a count made of what the refusal left (nothing, when
// the long message was the newest) would starve every later turn of the
// messages that came after it.

// maxWindows bounds the sessions whose window is remembered.
const maxWindows = 256

type windows struct {
	mu   sync.Mutex
	keep map[string]window // by session key
}

// A window is the first message of a session's history that its later
// turns send, known by its time and role.
type window struct {
	time int64
	role string
}

// fit returns the part of hist the session's model is known to take, and
// whether that is all of it. A window whose first message has left the
// stored history (trimmed to the history limit, or /new) has lost what
// did not fit too: the whole history goes again.
func (w *windows) fit(key string, hist []chat.Message) ([]chat.Message, bool) {
	w.mu.Lock()
	win, ok := w.keep[key]
	w.mu.Unlock()
	if !ok {
		return hist, true
	}
	for i := len(hist) - 1; i >= 0; i-- {
		if hist[i].Time == win.time && hist[i].Role == win.role {
			if i == 0 {
				return hist, true
			}
			return fromUser(hist[i:]), false
		}
	}
	w.forget(key)
	return hist, true
}

// halve returns the newer half of hist and remembers where it starts for
// key; when nothing of hist is left, the window starts at next, the turn's
// own first message.
func (w *windows) halve(key string, hist []chat.Message, next chat.Message) []chat.Message {
	out := fromUser(hist[len(hist)-len(hist)/2:])
	first := next
	if len(out) > 0 {
		first = out[0]
	}
	w.set(key, window{time: first.Time, role: first.Role}, true)
	return out
}

// get returns key's window, to put back with set when halving did not
// help: the turn's own messages were too long, not the history.
func (w *windows) get(key string) (window, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	win, ok := w.keep[key]
	return win, ok
}

func (w *windows) set(key string, win window, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !ok {
		delete(w.keep, key)
		return
	}
	if w.keep == nil {
		w.keep = map[string]window{}
	}
	if _, had := w.keep[key]; !had && len(w.keep) >= maxWindows {
		for k := range w.keep {
			delete(w.keep, k) // any one: a forgotten window costs one failed call
			break
		}
	}
	w.keep[key] = win
}

// forget drops key's window.
func (w *windows) forget(key string) { w.set(key, window{}, false) }

// fromUser drops leading messages up to the first of the user's: a
// history must not start with a tool result whose call was cut off.
func fromUser(hist []chat.Message) []chat.Message {
	for i, m := range hist {
		if m.Role == chat.RoleUser {
			return hist[i:]
		}
	}
	return nil
}

// overflows reports whether err is the provider refusing a request longer
// than the model's context window.
func overflows(err error) bool {
	var pe *provider.Error
	return errors.As(err, &pe) && pe.Kind == provider.KindContext
}

// leftOutNote ends the answer of the turn that first left part of the
// conversation out, so the user knows why the agent forgot it.
const leftOutNote = "\n\n(The start of this conversation no longer fits the model's context window, so I no longer see it; /new starts afresh.)"
