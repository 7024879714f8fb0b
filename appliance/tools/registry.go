package tools

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/perchhq/perch/appliance/chat"
)

// Tool is one capability offered to the model.
type Tool interface {
	// Name is the identifier the model calls, e.g. "read_file".
	Name() string
	// Description tells the model when and how to use the tool.
	Description() string
	// Schema describes the parameters.
	Schema() Schema
	// Execute runs the tool. args were validated against Schema. The
	// session context is in ctx (see CallFrom).
	Execute(ctx context.Context, args Args) Result
}

// Definition is a tool's self-description.
type Definition struct {
	Name        string `json:"name"`
	Description string `json:"description"`
	Parameters  Schema `json:"parameters"`
}

// Registry holds the tools offered to the model. It is safe for concurrent
// use; registering after the first Execute is allowed but meant for start-up.
type Registry struct {
	log *slog.Logger

	mu    sync.RWMutex
	tools map[string]Tool
	names []string       // sorted, so definitions are stable between turns
	defs  []chat.ToolDef // cached provider definitions; nil after a change
	json  []byte         // defs encoded as a JSON array

	// safe and withheld cache SafeDefinitions; nil after a change.
	safeMu   sync.Mutex
	safe     []chat.ToolDef
	withheld []string
	safeJSON []byte // safe encoded as a JSON array
}

// NewRegistry returns an empty registry that logs through log (nil: the
// default logger).
func NewRegistry(log *slog.Logger) *Registry {
	if log == nil {
		log = slog.Default()
	}
	return &Registry{log: log, tools: map[string]Tool{}}
}

// Register adds t, replacing a tool of the same name.
func (r *Registry) Register(t Tool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	name := t.Name()
	if _, dup := r.tools[name]; !dup {
		r.names = append(r.names, name)
		sort.Strings(r.names)
	}
	r.tools[name] = t
	r.defs, r.json = nil, nil
	r.safeMu.Lock()
	r.safe, r.withheld, r.safeJSON = nil, nil, nil
	r.safeMu.Unlock()
}

// Get returns the tool called name.
func (r *Registry) Get(name string) (Tool, bool) {
	r.mu.RLock()
	defer r.mu.RUnlock()
	t, ok := r.tools[name]
	return t, ok
}

// Names lists the registered tool names, sorted.
func (r *Registry) Names() []string {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return append([]string(nil), r.names...)
}

// Count is the number of registered tools.
func (r *Registry) Count() int {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return len(r.tools)
}

// Definitions returns every tool's self-description, sorted by name.
func (r *Registry) Definitions() []Definition {
	r.mu.RLock()
	defer r.mu.RUnlock()
	out := make([]Definition, 0, len(r.names))
	for _, n := range r.names {
		t := r.tools[n]
		out = append(out, Definition{Name: n, Description: t.Description(), Parameters: t.Schema()})
	}
	return out
}

// ProviderDefinitions returns the definitions as offered to the model. The
// slice is cached and shared: callers must not modify it.
func (r *Registry) ProviderDefinitions() []chat.ToolDef {
	r.mu.RLock()
	defs := r.defs
	r.mu.RUnlock()
	if defs != nil || r.Count() == 0 {
		return defs
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.defs != nil {
		return r.defs
	}
	defs = make([]chat.ToolDef, 0, len(r.names))
	for _, n := range r.names {
		t := r.tools[n]
		// Marshalled once here: the schema is the same every turn.
		params, err := json.Marshal(t.Schema())
		if err != nil {
			r.log.Error("tool schema does not marshal; tool not offered", "tool", n, "err", err)
			continue
		}
		defs = append(defs, chat.ToolDef{Name: n, Description: t.Description(), Parameters: params})
	}
	r.defs = defs
	if b, err := json.Marshal(defs); err == nil {
		r.json = b
	}
	return defs
}

// ProviderDefinitionsJSON returns ProviderDefinitions encoded as a JSON
// array, cached: the request body of every turn embeds it.
func (r *Registry) ProviderDefinitionsJSON() []byte {
	r.ProviderDefinitions()
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.json
}

// Summaries returns one "name: first sentence of the description" line per
// tool, for the system prompt and the /tools command.
func (r *Registry) Summaries() []string {
	defs := r.Definitions()
	out := make([]string, 0, len(defs))
	for _, d := range defs {
		desc := d.Description
		if i := strings.IndexByte(desc, '\n'); i > 0 {
			desc = strings.TrimSpace(desc[:i])
		}
		if i := strings.Index(desc, ". "); i > 0 {
			desc = desc[:i+1]
		}
		out = append(out, d.Name+": "+desc)
	}
	return out
}

// Execute runs the tool name with arguments given as the model's JSON text,
// in the session context already in ctx.
func (r *Registry) Execute(ctx context.Context, name, argsJSON string) Result {
	t, ok := r.Get(name)
	if !ok {
		return Errorf("unknown tool %q; available tools: %s", name, strings.Join(r.Names(), ", "))
	}
	args := Args{}
	if s := strings.TrimSpace(argsJSON); s != "" && s != "null" {
		if err := json.Unmarshal([]byte(s), &args); err != nil {
			var te *json.UnmarshalTypeError
			if errors.As(err, &te) {
				return Errorf("arguments for %s are not a JSON object: got a JSON %s; send {\"name\": value, ...}", name, te.Value)
			}
			return Errorf("arguments for %s are not a JSON object: %s", name, strings.TrimPrefix(err.Error(), "json: "))
		}
	}
	return r.run(ctx, t, args)
}

// ExecuteWith runs the tool name with already-decoded arguments in the
// session context call (channel, chat id and, for asynchronous tools, the
// completion callback).
func (r *Registry) ExecuteWith(ctx context.Context, name string, args map[string]any, call Call) Result {
	t, ok := r.Get(name)
	if !ok {
		return Errorf("unknown tool %q; available tools: %s", name, strings.Join(r.Names(), ", "))
	}
	if args == nil {
		args = map[string]any{}
	}
	return r.run(WithCall(ctx, call), t, args)
}

func (r *Registry) run(ctx context.Context, t Tool, args Args) (res Result) {
	name := t.Name()
	schema := t.Schema()
	if err := schema.Validate(args); err != nil {
		return Errorf("%s: %v", name, err)
	}
	call := CallFrom(ctx)
	if call.Restricted && mutates(ctx, t, args) {
		r.log.Info("tool call refused for a restricted sender", "tool", name, "session", call.SessionKey)
		return refusal(name, call)
	}
	if call.Restricted && readsPrivate(ctx, t, args) {
		r.log.Info("tool call refused for a restricted sender", "tool", name, "session", call.SessionKey, "reason", "the owner's files")
		return privateRefusal(name, call)
	}
	start := time.Now()
	defer func() {
		// A panicking tool must not take the gateway down with it.
		if p := recover(); p != nil {
			r.log.Error("tool panicked", "tool", name, "session", call.SessionKey, "panic", p)
			res = Errorf("%s failed unexpectedly: %v", name, p)
		}
		res.ForLLM = Truncate(res.ForLLM, MaxResultBytes)
		if extra := schema.Unknown(args); len(extra) > 0 {
			// The call ran without them: the model must not believe it
			// set, say, a timeout this tool does not take.
			res.ForLLM += "\n[ignored: " + name + " takes no argument " + strings.Join(extra, ", ") + "]"
		}
		if res.Kind == KindError {
			r.log.Info("tool call failed", "tool", name, "session", call.SessionKey,
				"took", time.Since(start).Round(time.Microsecond), "err", res.Err)
		} else {
			r.log.Debug("tool call", "tool", name, "session", call.SessionKey, "kind", res.Kind,
				"took", time.Since(start).Round(time.Microsecond), "bytes", len(res.ForLLM))
		}
	}()
	return t.Execute(ctx, args)
}

// Func adapts a function to the Tool interface; handy for small tools and
// tests.
type Func struct {
	ToolName        string
	ToolDescription string
	Params          Schema
	Run             func(ctx context.Context, args Args) Result
	// Mutating marks a tool whose every call can change the board (file
	// writes): it is withheld from restricted turns.
	Mutating bool
	// MutatingCall, when set, tells which calls change the board (i2c
	// write): restricted turns have them refused.
	MutatingCall func(ctx context.Context, args Args) bool
	// PrivateCall, when set, tells which calls read what is the owner's
	// (the workspace's files): restricted turns have them refused.
	PrivateCall func(ctx context.Context, args Args) bool
}

// Name implements Tool.
func (f Func) Name() string { return f.ToolName }

// Description implements Tool.
func (f Func) Description() string { return f.ToolDescription }

// Schema implements Tool.
func (f Func) Schema() Schema {
	if f.Params.Type == "" {
		return Object(map[string]*Property{})
	}
	return f.Params
}

// Execute implements Tool.
func (f Func) Execute(ctx context.Context, args Args) Result { return f.Run(ctx, args) }
