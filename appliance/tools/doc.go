// Package tools holds the agent's tool registry and the tools themselves, one
// file per family (fs, exec, web, message, canvas, cron, hw, image, subagent).
//
// # Concepts
//
// A Tool has a name, a description, a JSON-schema-style parameter Schema and an
// Execute operation returning a Result. The Registry validates the model's
// arguments against the schema before a tool runs, so a tool only ever sees
// arguments of the declared types; a missing or mistyped argument comes back
// to the model as an error Result naming the argument.
//
// Session context (channel, chat id, session key) and the completion callback of
// asynchronous tools travel in the context.Context as a Call, not as state set
// on the tool: one tool instance serves every session at once, and a tool
// holding "the current chat" would race between them.
//
// Results come in the five kinds of the spec: basic (to the model), silent (to
// the model, nothing for the user), async (started in the background; the
// callback reports completion), error, and user (to the model and the user).
package tools
