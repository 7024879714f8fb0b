package tools

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"unicode/utf8"
)

// echoTool records the arguments and call context it ran with.
type echoTool struct {
	name  string
	runs  atomic.Int32
	mu    sync.Mutex
	args  Args
	call  Call
	reply func(Args) Result
}

func (e *echoTool) Name() string        { return e.name }
func (e *echoTool) Description() string { return "Echo the arguments. Used by tests only." }
func (e *echoTool) Schema() Schema {
	return Object(map[string]*Property{
		"text":  String("what to echo"),
		"times": Integer("repeat count", Bound(1), Bound(5)),
	}, "text")
}
func (e *echoTool) Execute(ctx context.Context, args Args) Result {
	e.runs.Add(1)
	e.mu.Lock()
	e.args, e.call = args, CallFrom(ctx)
	e.mu.Unlock()
	if e.reply != nil {
		return e.reply(args)
	}
	return Text(strings.Repeat(args.String("text"), int(args.Int("times", 1))))
}

func newTestRegistry(t *testing.T) (*Registry, *bytes.Buffer) {
	t.Helper()
	var logs bytes.Buffer
	// A locked writer: the registry logs from concurrent calls in some tests.
	h := slog.NewTextHandler(&lockedWriter{w: &logs}, &slog.HandlerOptions{Level: slog.LevelDebug})
	return NewRegistry(slog.New(h)), &logs
}

// registryOf returns a quiet registry holding tools, as the agent would
// call them.
func registryOf(tools ...Tool) *Registry {
	r := NewRegistry(slog.New(slog.DiscardHandler))
	for _, t := range tools {
		r.Register(t)
	}
	return r
}

type lockedWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

func TestRegisterGetNamesCount(t *testing.T) {
	r, _ := newTestRegistry(t)
	if r.Count() != 0 || len(r.Names()) != 0 || r.ProviderDefinitions() != nil {
		t.Fatal("a new registry should be empty")
	}
	for _, n := range []string{"zeta", "alpha", "mid"} {
		r.Register(&echoTool{name: n})
	}
	replacement := &echoTool{name: "mid"}
	r.Register(replacement) // same name: replaces, does not duplicate
	if got, want := r.Names(), []string{"alpha", "mid", "zeta"}; !reflect.DeepEqual(got, want) {
		t.Errorf("Names = %v, want %v", got, want)
	}
	if r.Count() != 3 {
		t.Errorf("Count = %d, want 3", r.Count())
	}
	if got, ok := r.Get("mid"); !ok || got != replacement {
		t.Error("Get(mid) should return the replacement")
	}
	if _, ok := r.Get("nope"); ok {
		t.Error("Get of an unknown name should fail")
	}
	// Names returns a copy: callers cannot reorder the registry.
	names := r.Names()
	names[0] = "hacked"
	if r.Names()[0] != "alpha" {
		t.Error("Names exposes the registry's slice")
	}
}

func TestExecute(t *testing.T) {
	tests := []struct {
		name     string
		tool     string
		args     string
		wantKind Kind
		wantLLM  string // substring
		wantRuns int32
	}{
		{"valid call", "echo", `{"text":"ab","times":2}`, KindBasic, "abab", 1},
		{"integer normalised", "echo", `{"text":"x","times":3.0}`, KindBasic, "xxx", 1},
		{"unknown tool lists the available ones", "ehco", `{}`, KindError, `unknown tool "ehco"; available tools: echo, other`, 0},
		{"malformed JSON", "echo", `{"text":`, KindError, "arguments for echo are not a JSON object", 0},
		// Said in JSON's words, not Go's ("cannot unmarshal array into Go value of type tools.Args").
		{"JSON array", "echo", `["x"]`, KindError, `arguments for echo are not a JSON object: got a JSON array; send {"name": value, ...}`, 0},
		{"JSON string", "echo", `"x"`, KindError, "arguments for echo are not a JSON object: got a JSON string", 0},
		{"empty arguments miss the required one", "echo", ``, KindError, `echo: missing required argument "text"`, 0},
		{"null arguments miss the required one", "echo", `null`, KindError, `echo: missing required argument "text"`, 0},
		{"mistyped argument", "echo", `{"text":"x","times":"2"}`, KindError, `echo: argument "times" must be an integer, got string "2"`, 0},
		{"out of range", "echo", `{"text":"x","times":9}`, KindError, `argument "times" must be at most 5, got 9`, 0},
		// The call runs, and the model learns what it did not set.
		{"undeclared arguments are named", "echo", `{"text":"ab","timeout_seconds":1,"colour":"red"}`, KindBasic, "ab\n[ignored: echo takes no argument colour, timeout_seconds]", 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, _ := newTestRegistry(t)
			echo := &echoTool{name: "echo"}
			r.Register(echo)
			r.Register(&echoTool{name: "other"})
			res := r.Execute(context.Background(), tt.tool, tt.args)
			if res.Kind != tt.wantKind {
				t.Errorf("Kind = %v, want %v (%s)", res.Kind, tt.wantKind, res.ForLLM)
			}
			if !strings.Contains(res.ForLLM, tt.wantLLM) {
				t.Errorf("ForLLM = %q, want it to contain %q", res.ForLLM, tt.wantLLM)
			}
			if strings.Contains(res.ForLLM, "[ignored") != strings.Contains(tt.wantLLM, "[ignored") {
				t.Errorf("ForLLM = %q: the note of ignored arguments is wrong", res.ForLLM)
			}
			if res.IsError() && (res.Err == nil || !strings.HasPrefix(res.ForLLM, "error: ")) {
				t.Errorf("error result should carry Err and an 'error: ' prefix: %+v", res)
			}
			if got := echo.runs.Load(); got != tt.wantRuns {
				t.Errorf("tool ran %d times, want %d", got, tt.wantRuns)
			}
		})
	}
}

func TestExecuteNormalisesIntegersForTheTool(t *testing.T) {
	r, _ := newTestRegistry(t)
	echo := &echoTool{name: "echo"}
	r.Register(echo)
	r.Execute(context.Background(), "echo", `{"text":"x","times":2}`)
	if v, ok := echo.args["times"].(int64); !ok || v != 2 {
		t.Errorf("tool saw times = %#v, want int64(2)", echo.args["times"])
	}
}

// TestExecuteCarriesTheCall checks both ways of giving a tool its session
// context: ExecuteWith and a ctx built with WithCall.
func TestExecuteCarriesTheCall(t *testing.T) {
	r, _ := newTestRegistry(t)
	echo := &echoTool{name: "echo"}
	r.Register(echo)
	var got []Result
	call := Call{Channel: "telegram", ChatID: "42", SessionKey: "telegram:42", Async: func(res Result) { got = append(got, res) }}

	res := r.ExecuteWith(context.Background(), "echo", map[string]any{"text": "hi", "times": 2.0}, call)
	if res.ForLLM != "hihi" {
		t.Fatalf("ExecuteWith = %+v", res)
	}
	if echo.call.Channel != "telegram" || echo.call.ChatID != "42" || echo.call.SessionKey != "telegram:42" || echo.call.Async == nil {
		t.Errorf("tool saw call %+v", echo.call)
	}
	echo.call.Async(Text("done"))
	if len(got) != 1 || got[0].ForLLM != "done" {
		t.Errorf("async callback not the caller's: %v", got)
	}

	ctx := WithCall(context.Background(), Call{Channel: "slack", ChatID: "C1"})
	r.Execute(ctx, "echo", `{"text":"x"}`)
	if echo.call.Channel != "slack" || echo.call.ChatID != "C1" {
		t.Errorf("Execute lost the ctx call: %+v", echo.call)
	}

	if res := r.ExecuteWith(context.Background(), "echo", nil, call); !res.IsError() {
		t.Error("ExecuteWith(nil args) should report the missing argument")
	}
	if res := r.ExecuteWith(context.Background(), "nope", nil, call); !res.IsError() || !strings.Contains(res.ForLLM, `unknown tool "nope"`) {
		t.Errorf("ExecuteWith of unknown tool = %+v", res)
	}
	if c := CallFrom(context.Background()); c.Channel != "" || c.Async != nil {
		t.Errorf("CallFrom of a bare context = %+v, want zero", c)
	}
}

// TestPanickingToolBecomesAnError: one bad tool must not take the gateway down.
func TestPanickingToolBecomesAnError(t *testing.T) {
	r, logs := newTestRegistry(t)
	r.Register(&echoTool{name: "boom", reply: func(Args) Result { panic("index out of range") }})
	r.Register(&echoTool{name: "echo"})
	res := r.Execute(WithCall(context.Background(), Call{SessionKey: "cli:x"}), "boom", `{"text":"x"}`)
	if !res.IsError() || !strings.Contains(res.ForLLM, "boom failed unexpectedly: index out of range") {
		t.Errorf("result = %+v", res)
	}
	if !strings.Contains(logs.String(), "tool panicked") || !strings.Contains(logs.String(), "session=cli:x") {
		t.Errorf("panic not logged with its session: %s", logs)
	}
	if res := r.Execute(context.Background(), "echo", `{"text":"ok"}`); res.ForLLM != "ok" {
		t.Errorf("registry unusable after a panic: %+v", res)
	}
}

// TestResultTruncatedOnRuneBoundary: a tool's output is cut to MaxResultBytes
// without splitting a character, and the model is told.
func TestResultTruncatedOnRuneBoundary(t *testing.T) {
	r, _ := newTestRegistry(t)
	// "é" is two bytes and "€" three: whatever the cut, one is split unless
	// the cut backs off to a rune start.
	big := strings.Repeat("a€é", MaxResultBytes) // ~6 bytes a repetition
	r.Register(&echoTool{name: "big", reply: func(Args) Result { return User(big) }})
	res := r.Execute(context.Background(), "big", `{"text":"x"}`)
	if len(res.ForLLM) > MaxResultBytes {
		t.Errorf("ForLLM is %d bytes, cap %d", len(res.ForLLM), MaxResultBytes)
	}
	if !utf8.ValidString(res.ForLLM) {
		t.Error("truncation split a character")
	}
	if !strings.Contains(res.ForLLM, fmt.Sprintf("of %d bytes shown]", len(big))) {
		t.Errorf("no truncation note: ...%s", res.ForLLM[len(res.ForLLM)-80:])
	}
	if res.ForUser != big {
		t.Error("ForUser should be left to the channel, not cut by the registry")
	}
}

func TestTruncate(t *testing.T) {
	tests := []struct {
		name string
		in   string
		max  int
		want string
	}{
		{"short untouched", "hello", 10, "hello"},
		{"exact fit untouched", "hello", 5, "hello"},
		{"ascii cut", strings.Repeat("x", 200), 100, strings.Repeat("x", 36) + "\n[truncated: first 36 of 200 bytes shown]"},
		{"backs off a two-byte rune", strings.Repeat("x", 35) + "é" + strings.Repeat("y", 100), 100, strings.Repeat("x", 35) + "\n[truncated: first 35 of 137 bytes shown]"},
		{"max below the note", strings.Repeat("x", 100), 10, "\n[truncated: first 0 of 100 bytes shown]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := Truncate(tt.in, tt.max); got != tt.want {
				t.Errorf("Truncate = %q, want %q", got, tt.want)
			}
		})
	}
}

// TestProviderDefinitionsStableAndCached: the definitions go out every turn,
// so they are built once, in name order, until the registry changes.
func TestProviderDefinitionsStableAndCached(t *testing.T) {
	r, _ := newTestRegistry(t)
	r.Register(&echoTool{name: "zeta"})
	r.Register(&echoTool{name: "alpha"})
	a := r.ProviderDefinitions()
	b := r.ProviderDefinitions()
	if len(a) != 2 || &a[0] != &b[0] {
		t.Fatal("second call should return the cached slice")
	}
	if a[0].Name != "alpha" || a[1].Name != "zeta" {
		t.Errorf("order = %s, %s", a[0].Name, a[1].Name)
	}
	if a[0].Description != "Echo the arguments. Used by tests only." {
		t.Errorf("definition = %+v", a[0])
	}
	params, _ := json.Marshal(a[0].Parameters)
	want, _ := json.Marshal((&echoTool{}).Schema())
	if string(params) != string(want) {
		t.Errorf("parameters = %s, want %s", params, want)
	}
	whole1, _ := json.Marshal(a)
	r.Register(&echoTool{name: "mid"})
	c := r.ProviderDefinitions()
	if len(c) != 3 || c[1].Name != "mid" {
		t.Fatalf("registering should rebuild the definitions: %d", len(c))
	}
	r2, _ := newTestRegistry(t)
	r2.Register(&echoTool{name: "alpha"})
	r2.Register(&echoTool{name: "zeta"})
	whole2, _ := json.Marshal(r2.ProviderDefinitions())
	if string(whole1) != string(whole2) {
		t.Error("definitions depend on registration order")
	}
}

// TestUnmarshalableSchemaIsLeftOut: a tool whose schema cannot be encoded
// would make every provider request fail; it is dropped and logged instead.
func TestUnmarshalableSchemaIsLeftOut(t *testing.T) {
	r, logs := newTestRegistry(t)
	r.Register(&echoTool{name: "good"})
	r.Register(Func{ToolName: "bad", Params: Object(map[string]*Property{"x": {Type: "string", Default: make(chan int)}})})
	defs := r.ProviderDefinitions()
	if len(defs) != 1 || defs[0].Name != "good" {
		t.Errorf("definitions = %v", defs)
	}
	if !strings.Contains(logs.String(), "tool=bad") {
		t.Errorf("the dropped tool was not logged: %s", logs)
	}
}

func TestDefinitionsAndSummaries(t *testing.T) {
	r, _ := newTestRegistry(t)
	r.Register(Func{ToolName: "b_tool", ToolDescription: "Does b. More detail follows here."})
	r.Register(Func{ToolName: "a_tool", ToolDescription: "One sentence only."})
	r.Register(Func{ToolName: "c_tool", ToolDescription: "First line ends here.\nSecond line."})
	defs := r.Definitions()
	if len(defs) != 3 || defs[0].Name != "a_tool" || defs[0].Parameters.Type != "object" {
		t.Errorf("Definitions = %+v", defs)
	}
	want := []string{"a_tool: One sentence only.", "b_tool: Does b.", "c_tool: First line ends here."}
	if got := r.Summaries(); !reflect.DeepEqual(got, want) {
		t.Errorf("Summaries = %q, want %q", got, want)
	}
}

// TestLogsNameToolNotArguments: arguments may hold secrets (a token the user
// pasted), so logs carry the tool and session only.
func TestLogsNameToolNotArguments(t *testing.T) {
	r, logs := newTestRegistry(t)
	r.Register(&echoTool{name: "echo", reply: func(a Args) Result { return Errorf("refused") }})
	r.Register(&echoTool{name: "ok", reply: func(a Args) Result { return Text("fine") }})
	ctx := WithCall(context.Background(), Call{SessionKey: "telegram:1"})
	r.Execute(ctx, "echo", `{"text":"sk-SECRET-123"}`)
	r.Execute(ctx, "ok", `{"text":"sk-SECRET-456"}`)
	out := logs.String()
	if strings.Contains(out, "SECRET") {
		t.Errorf("an argument reached the log: %s", out)
	}
	for _, want := range []string{"tool call failed", "tool=echo", "session=telegram:1", "tool call", "tool=ok"} {
		if !strings.Contains(out, want) {
			t.Errorf("log lacks %q: %s", want, out)
		}
	}
}

// TestConcurrentUse runs calls while tools are registered; -race checks it.
func TestConcurrentUse(t *testing.T) {
	r, _ := newTestRegistry(t)
	r.Register(&echoTool{name: "echo"})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range 50 {
				if res := r.Execute(context.Background(), "echo", `{"text":"x"}`); res.ForLLM != "x" {
					t.Errorf("Execute = %+v", res)
					return
				}
				if j%10 == 0 {
					r.Register(&echoTool{name: fmt.Sprintf("t%d_%d", i, j)})
				}
				_ = r.ProviderDefinitions()
				_ = r.Summaries()
			}
		}()
	}
	wg.Wait()
	if r.Count() != 1+8*5 {
		t.Errorf("Count = %d", r.Count())
	}
}

func TestResultConstructors(t *testing.T) {
	tests := []struct {
		res      Result
		kind     Kind
		llm, usr string
	}{
		{Text("a"), KindBasic, "a", ""},
		{Silent("b"), KindSilent, "b", ""},
		{User("c"), KindUser, "c", "c"},
		{Async("d"), KindAsync, "d", ""},
		{Errorf("bad %s", "x"), KindError, "error: bad x", ""},
		{Error(fmt.Errorf("e")), KindError, "error: e", ""},
	}
	for _, tt := range tests {
		t.Run(tt.kind.String(), func(t *testing.T) {
			if tt.res.Kind != tt.kind || tt.res.ForLLM != tt.llm || tt.res.ForUser != tt.usr {
				t.Errorf("got %+v", tt.res)
			}
		})
	}
	if Kind(42).String() != "kind(42)" {
		t.Error("unknown kind name")
	}
}
