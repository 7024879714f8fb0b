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
// instead, and again if need be; the session then keeps that many of its
// latest messages for later turns, which pay no failed call each. The
// stored history stays whole: a model with a larger window, or the same
// one after a restart, sees it all again.

// maxWindows bounds the sessions whose window is remembered.
const maxWindows = 256

type windows struct {
	mu   sync.Mutex
	keep map[string]int // session key → how many of the latest messages fit
}

// fit returns the part of hist the session's model is known to take, and
// whether that is all of it.
func (w *windows) fit(key string, hist []chat.Message) ([]chat.Message, bool) {
	w.mu.Lock()
	keep, ok := w.keep[key]
	w.mu.Unlock()
	if !ok || len(hist) <= keep {
		return hist, true
	}
	return fromUser(hist[len(hist)-keep:]), false
}

// halve returns the newer half of hist and remembers its length for key.
func (w *windows) halve(key string, hist []chat.Message) []chat.Message {
	out := fromUser(hist[len(hist)-len(hist)/2:])
	w.mu.Lock()
	if w.keep == nil {
		w.keep = map[string]int{}
	}
	if _, ok := w.keep[key]; !ok && len(w.keep) >= maxWindows {
		for k := range w.keep {
			delete(w.keep, k) // any one: a forgotten window costs one failed call
			break
		}
	}
	w.keep[key] = len(out)
	w.mu.Unlock()
	return out
}

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
