package tools

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/perchhq/perch/appliance/chat"
)

// Mutator is implemented by tools whose calls can change the board: files,
// processes, hardware, scheduled jobs, messages to other chats. A turn for
// a sender the owner has not vouched for (Call.Restricted) is not offered
// the tools that always change something, and the registry refuses the
// changing calls of tools that mostly read (i2c write, cron add with a
// command) before they run. A tool that implements nothing is read-only.
type Mutator interface {
	// MutatesAlways reports whether every call can change the board; such
	// a tool is withheld from restricted turns altogether.
	MutatesAlways() bool
	// Mutates reports whether this call would change the board.
	Mutates(ctx context.Context, args Args) bool
}

// MutatesAlways implements Mutator.
func (f Func) MutatesAlways() bool { return f.Mutating }

// Mutates implements Mutator.
func (f Func) Mutates(ctx context.Context, args Args) bool {
	return f.Mutating || (f.MutatingCall != nil && f.MutatingCall(ctx, args))
}

// Private is implemented by tools some of whose calls read what is the
// owner's: the files in the workspace (notes, memory, what earlier turns
// wrote). A turn for a sender nobody vouched for has those calls refused.
type Private interface {
	ReadsPrivate(ctx context.Context, args Args) bool
}

// ReadsPrivate implements Private.
func (f Func) ReadsPrivate(ctx context.Context, args Args) bool {
	return f.PrivateCall != nil && f.PrivateCall(ctx, args)
}

func readsPrivate(ctx context.Context, t Tool, args Args) bool {
	p, ok := t.(Private)
	return ok && p.ReadsPrivate(ctx, args)
}

// mutates reports whether running t with args changes the board.
func mutates(ctx context.Context, t Tool, args Args) bool {
	m, ok := t.(Mutator)
	return ok && m.Mutates(ctx, args)
}

func withheld(t Tool) bool {
	m, ok := t.(Mutator)
	return ok && m.MutatesAlways()
}

// SafeDefinitions returns the definitions offered to a restricted turn (the
// tools that do not always change the board) and the names of the tools
// withheld, both sorted. Like ProviderDefinitions, the slice is shared.
func (r *Registry) SafeDefinitions() (defs []chat.ToolDef, names []string) {
	defs, names, _ = r.SafeDefinitionsJSON()
	return defs, names
}

// SafeDefinitionsJSON is SafeDefinitions with the definitions encoded as a
// JSON array, encoded once per set of tools: a restricted turn (every
// message from a sender nobody vouched for) would otherwise encode them
// again, ~37 KB of reflection-driven JSON per turn. encoded is nil when
// the encoding failed; the provider then encodes defs itself.
func (r *Registry) SafeDefinitionsJSON() (defs []chat.ToolDef, names []string, encoded []byte) {
	all := r.ProviderDefinitions()
	r.mu.RLock()
	defer r.mu.RUnlock()
	r.safeMu.Lock()
	defer r.safeMu.Unlock()
	if r.safe != nil {
		return r.safe, r.withheld, r.safeJSON
	}
	safe := make([]chat.ToolDef, 0, len(all))
	for _, d := range all {
		if t := r.tools[d.Name]; t != nil && withheld(t) {
			names = append(names, d.Name)
			continue
		}
		safe = append(safe, d)
	}
	encoded, err := json.Marshal(safe)
	if err != nil {
		encoded = nil
	}
	// Cache only what was built from the current definitions: a tool
	// registered meanwhile cleared r.defs.
	if r.defs != nil {
		r.safe, r.withheld, r.safeJSON = safe, names, encoded
	}
	return safe, names, encoded
}

// refusal is the result a restricted call of a changing tool gets.
func refusal(name string, call Call) Result {
	return Errorf("%s refused: this call would change the board, and the sender of this message is not one the owner approved (%s). "+
		"Tell the user the owner can allow it: %s", name, restrictedSource(call), restrictedFix(call))
}

// privateRefusal is the result a restricted call that would read the
// owner's files gets.
func privateRefusal(name string, call Call) Result {
	return Errorf("%s refused: the workspace holds the owner's files, which only senders the owner approved may read (this is %s); "+
		"skills/ is open to everyone. Tell the user the owner can allow it: %s", name, restrictedSource(call), restrictedFix(call))
}

func restrictedSource(call Call) string {
	if call.RestrictedBy != "" {
		call.Channel = call.RestrictedBy
	}
	if call.Channel == "" {
		return "an untrusted source"
	}
	return "a message on " + call.Channel
}

// restrictedFix names the setting that lifts the restriction for the
// call's source.
func restrictedFix(call Call) string {
	if call.RestrictedBy != "" {
		call.Channel = call.RestrictedBy
	}
	switch {
	case call.Channel == "mqtt":
		return "set mqtt.allow_all_tools to true"
	case call.Channel != "":
		return fmt.Sprintf("add the sender to channels.%s.allow_from (perch channels approve CODE) or set channels.%s.allow_all_tools to true", call.Channel, call.Channel)
	}
	return "trust the source in the config"
}

// RestrictionNote is what the system prompt of a restricted turn says:
// which tools are withheld, which calls are refused, and why.
func RestrictionNote(channel string, withheld []string) string {
	call := Call{Channel: channel}
	var sb strings.Builder
	sb.WriteString("## Restricted tools\n")
	fmt.Fprintf(&sb, "The sender of this message is not one the owner approved (%s), so nothing that changes the board is allowed: ", restrictedSource(call))
	if len(withheld) > 0 {
		fmt.Fprintf(&sb, "these tools are withheld: %s; ", strings.Join(withheld, ", "))
	}
	sb.WriteString("calls that write to hardware, change scheduled jobs or message other chats are refused, " +
		"and so is reading the workspace's files outside skills/ (they are the owner's). ")
	fmt.Fprintf(&sb, "If the user asks for such things, explain that the owner can allow them: %s.\n", restrictedFix(call))
	return sb.String()
}
