package tools

import "context"

// Call is the session context a tool runs in.
type Call struct {
	// Channel and ChatID name where the conversation happens ("telegram",
	// "12345"); tools that send messages default to them.
	Channel string
	ChatID  string
	// SessionKey is "<channel>:<chat>" or the key given to /chat.
	SessionKey string
	// Restricted marks a call made for a sender the owner has not vouched
	// for (bus.Inbound.RestrictTools): calls that change the board are
	// refused.
	Restricted bool
	// RestrictedBy is the channel whose settings restrict the call (the
	// requester's channel in a subagent's turn); empty means Channel.
	RestrictedBy string
	// Async, when set, receives the completion of a KindAsync tool's
	// background work. It must not block.
	Async func(Result)
}

type callKey struct{}

// WithCall returns ctx carrying c.
func WithCall(ctx context.Context, c Call) context.Context {
	return context.WithValue(ctx, callKey{}, c)
}

// CallFrom returns the Call in ctx, or the zero Call.
func CallFrom(ctx context.Context) Call {
	c, _ := ctx.Value(callKey{}).(Call)
	return c
}
