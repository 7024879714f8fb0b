package tools

import (
	"fmt"
	"unicode/utf8"

	"github.com/perchhq/perch/appliance/api"
)

// Kind says who sees a tool's Result.
type Kind int

const (
	// KindBasic results go to the model only.
	KindBasic Kind = iota
	// KindSilent results go to the model; the user is never told.
	KindSilent
	// KindAsync results say work was started in the background; completion is
	// reported later through the Call's Async callback.
	KindAsync
	// KindError results tell the model the call failed and why.
	KindError
	// KindUser results go to the model and, as ForUser, to the user's chat.
	KindUser
)

func (k Kind) String() string {
	switch k {
	case KindBasic:
		return "basic"
	case KindSilent:
		return "silent"
	case KindAsync:
		return "async"
	case KindError:
		return "error"
	case KindUser:
		return "user"
	}
	return fmt.Sprintf("kind(%d)", int(k))
}

// MaxResultBytes caps the text a tool hands back to the model. The contract
// asks for no less than 64 KiB; more would only fill the model's context.
const MaxResultBytes = 64 << 10

// Result is what a tool execution returns.
type Result struct {
	Kind Kind
	// ForLLM is the text the model sees next turn.
	ForLLM string
	// ForUser is sent to the user's chat for KindUser results.
	ForUser string
	// Err is the cause of a KindError result, for logs; ForLLM carries the
	// message the model sees.
	Err error
	// UI holds user-interface commands (canvas) to return beside the reply.
	UI []api.UICommand
}

// Text returns a basic result.
func Text(s string) Result { return Result{Kind: KindBasic, ForLLM: s} }

// Silent returns a result for the model only.
func Silent(s string) Result { return Result{Kind: KindSilent, ForLLM: s} }

// User returns a result shown to the model and to the user.
func User(s string) Result { return Result{Kind: KindUser, ForLLM: s, ForUser: s} }

// Async returns a result saying work continues in the background.
func Async(s string) Result { return Result{Kind: KindAsync, ForLLM: s} }

// Errorf returns an error result; the message is what the model reads, so it
// should name the cause and what to do instead.
func Errorf(format string, a ...any) Result {
	err := fmt.Errorf(format, a...)
	return Result{Kind: KindError, ForLLM: "error: " + err.Error(), Err: err}
}

// Error wraps err as an error result.
func Error(err error) Result {
	return Result{Kind: KindError, ForLLM: "error: " + err.Error(), Err: err}
}

// IsError reports whether r is an error result.
func (r Result) IsError() bool { return r.Kind == KindError }

// Truncate cuts s to at most max bytes on a rune boundary and says so, so the
// model knows the text is incomplete rather than guessing.
func Truncate(s string, max int) string {
	if len(s) <= max {
		return s
	}
	const reserve = 64 // room for the note
	cut := max - reserve
	if cut < 0 {
		cut = 0
	}
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + fmt.Sprintf("\n[truncated: first %d of %d bytes shown]", cut, len(s))
}
