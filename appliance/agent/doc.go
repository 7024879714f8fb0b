// Package agent is the agent loop: it turns an inbound message into a reply
// by calling the provider and running the tools the model asks for.
//
// # Concepts
//
// A turn belongs to a session (its key, "<channel>:<chat>" or what /chat
// named). One turn runs at a time per session, so history stays in order;
// turns of different sessions run in parallel up to max_concurrent_turns,
// and at most max_queued_turns more may wait. Beyond that a turn is refused
// at once with ErrBusy rather than queueing without bound.
//
// A turn is durable in two commits: the user's message is stored before the
// provider is called (a crash never loses an acknowledged message), and the
// model's tool calls, their results and the reply are stored together after.
//
// Messages whose first word is a registered command (/help, /new, /status,
// /tools, and what other services add) are answered without the model.
//
// Subagents run a task as a conversation of their own: synchronously
// (subagent tool) or in the background with a completion notice to the
// requester's chat (spawn tool).
package agent
