// Package channeltest runs a chat channel against the real agent in one
// process, for the platforms' tests: a bus, a bbolt store, the channels'
// hub and manager (the dispatcher), and the agent loop whose provider is
// providertest's loopback fake. A platform test drives its platform's fake;
// everything between the two is the production code.
package channeltest

import (
	"bytes"
	"context"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/agent"
	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/channel"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/provider"
	"github.com/perchhq/perch/appliance/provider/providertest"
	"github.com/perchhq/perch/appliance/tools"
	"github.com/perchhq/perch/store"
)

// Env is one in-process gateway's worth of what a channel talks to.
type Env struct {
	Bus      *bus.Bus
	Store    *store.DB
	Hub      *channel.Hub
	Manager  *channel.Manager
	Agent    *agent.Loop
	Provider *providertest.Server
	Tools    *tools.Registry
	// Workspace is the agent's workspace (received media land under it).
	Workspace string
	Log       *slog.Logger
	// Logs holds what was logged when Options.Log was nil.
	Logs *Buffer
	// StorePath is the database file: a second Env on it is the same
	// gateway restarted.
	StorePath string

	tb       testing.TB
	mu       sync.Mutex
	stopped  bool
	executed map[string]int
}

// Options tune an Env.
type Options struct {
	// StorePath reuses a database (a restart); empty makes a fresh one.
	StorePath string
	// Provider reuses a fake provider; nil starts one (echoing "echo: …").
	Provider *providertest.Server
	// Workspace reuses a workspace; empty makes one.
	Workspace string
	// Log receives everything logged; nil keeps it in Env.Logs.
	Log *slog.Logger
	// Transcribe is the hub's voice transcription (nil: none).
	Transcribe channel.TranscribeFunc
	// SaveAllowFrom records approvals (nil: in memory only).
	SaveAllowFrom func(ch, id string) error
	// TestTools registers "switch_relay" (changes the board) and
	// "read_sensor" (does not) for tool-restriction tests, and the canvas.
	TestTools bool
}

// New builds an Env; Start starts it. Cleanup stops it.
func New(tb testing.TB, o Options) *Env {
	tb.Helper()
	e := &Env{tb: tb, Bus: bus.New(64), Log: o.Log, StorePath: o.StorePath, Workspace: o.Workspace, Provider: o.Provider,
		Logs: &Buffer{}, executed: map[string]int{}}
	if e.Log == nil {
		e.Log = slog.New(slog.NewTextHandler(e.Logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if e.StorePath == "" {
		e.StorePath = filepath.Join(tb.TempDir(), "perch.db")
	}
	if e.Workspace == "" {
		e.Workspace = tb.TempDir()
	}
	if e.Provider == nil {
		e.Provider = providertest.New()
		tb.Cleanup(e.Provider.Close)
	}
	db, err := store.Open(e.StorePath, store.Options{})
	if err != nil {
		tb.Fatalf("channeltest: %v", err)
	}
	e.Store = db
	cfg := config.Default()
	cfg.Providers.OpenRouter.APIKey = "sk-channeltest"
	cfg.Providers.OpenRouter.APIBase = e.Provider.Base()
	cfg.Providers.OpenRouter.MaxRetries = 0
	cfg.Agents.Defaults.Model = "openai/gpt-4o-mini"
	cl, err := provider.FromConfig(context.Background(), cfg, e.Log)
	if err != nil {
		tb.Fatalf("channeltest: %v", err)
	}
	e.Hub = channel.NewHub(channel.HubOptions{Bus: e.Bus, Store: db, Log: e.Log, Workspace: e.Workspace,
		Transcribe: o.Transcribe, SaveAllowFrom: o.SaveAllowFrom})
	e.Manager = channel.NewManager(e.Bus, e.Log)
	e.Manager.UseHub(e.Hub)
	e.Tools = tools.NewRegistry(e.Log)
	if o.TestTools {
		e.Tools.Register(tools.Func{ToolName: "switch_relay", ToolDescription: "Switch the relay.", Mutating: true,
			Run: func(context.Context, tools.Args) tools.Result { e.count("switch_relay"); return tools.Text("switched") }})
		e.Tools.Register(tools.Func{ToolName: "read_sensor", ToolDescription: "Read the sensor.",
			Run: func(context.Context, tools.Args) tools.Result { e.count("read_sensor"); return tools.Text("21.5 °C") }})
		e.Tools.Register(tools.NewCanvas())
	}
	e.Agent = agent.New(agent.Options{
		Store: db, Provider: cl, Tools: e.Tools, Bus: e.Bus, Log: e.Log, Workspace: e.Workspace,
		MaxToolIterations: 5, MaxConcurrentTurns: 4, MaxQueuedTurns: 16, TurnTimeout: turnTimeout, HistoryLimit: 100,
	})
	tb.Cleanup(e.Stop)
	return e
}

func (e *Env) count(name string) {
	e.mu.Lock()
	e.executed[name]++
	e.mu.Unlock()
}

// Executed counts the runs of a test tool (switch_relay, read_sensor).
func (e *Env) Executed(name string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.executed[name]
}

// turnTimeout bounds the agent's turns.
const turnTimeout = 20 * time.Second

// Deps are the channel.Deps of a platform with section sec.
func (e *Env) Deps(sec config.ChannelSection) channel.Deps {
	return channel.Deps{Section: sec, Bus: e.Bus, Store: e.Store, Log: e.Log.With("channel", sec.Name), Workspace: e.Workspace, Hub: e.Hub,
		TurnTimeout: turnTimeout, IsCommand: e.Agent.IsChatCommand}
}

// Start registers the channels and starts them, the dispatcher and the
// agent, as the gateway does. A channel's Start error is returned.
func (e *Env) Start(chs ...channel.Channel) error {
	e.tb.Helper()
	for _, c := range chs {
		e.Manager.Register(c)
	}
	if err := e.Agent.Start(context.Background()); err != nil {
		e.tb.Fatalf("channeltest: agent: %v", err)
	}
	return e.Manager.Start(context.Background())
}

// Stop stops the agent, the channels and the store, in the gateway's order;
// a second call does nothing.
func (e *Env) Stop() {
	e.mu.Lock()
	if e.stopped {
		e.mu.Unlock()
		return
	}
	e.stopped = true
	e.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e.Agent.Stop(ctx)
	e.Manager.Stop(ctx)
	e.Bus.Close()
	if err := e.Store.Close(); err != nil {
		e.tb.Errorf("channeltest: closing the store: %v", err)
	}
}

// Eventually polls cond until it holds, or fails the test after timeout.
func Eventually(tb testing.TB, timeout time.Duration, what string, cond func() bool) {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			tb.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Buffer is a goroutine-safe log buffer.
type Buffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *Buffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// String returns what was logged.
func (b *Buffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// Count counts the log lines containing s.
func (b *Buffer) Count(s string) int {
	n := 0
	for _, line := range strings.Split(b.String(), "\n") {
		if strings.Contains(line, s) {
			n++
		}
	}
	return n
}
