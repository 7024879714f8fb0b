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
// Results come in five kinds: basic (to the model), silent (to
// the model, nothing for the user), async (started in the background; the
// callback reports completion), error, and user (to the model and the user).
// A Result may also carry UI commands (canvas nodes) that /chat returns
// beside the reply.
//
// The file tools act on a workspace. With restriction on, every access goes
// through an os.Root opened on it: ".." and absolute paths elsewhere are
// refused before any system call, and os.Root refuses symbolic links that
// lead out, so no spelling of a path reaches a file outside. Writes are
// atomic (temporary file, fsync, rename).
//
// web_fetch reaches only public addresses unless told otherwise. The check
// sits in the dialer's Control hook, which sees each address after DNS
// resolution, so a name resolving to 127.0.0.1 or a redirect into the LAN is
// refused like a literal private address.
package tools
