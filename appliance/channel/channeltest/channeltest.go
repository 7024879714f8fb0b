// Package channeltest runs a chat channel against the real agent loop for
// tests: a store in a temporary directory, the bus, the agent with a fake
// provider (providertest) and the tools a restricted turn must not get, the
// channel manager and its hub — the same parts the gateway wires, without
// the HTTP server. A test builds its platform's channel from Deps, starts it
// here, and drives the platform's fake.
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

// Options tune a Harness.
type Options struct {
	// Dir holds the store and the workspace; empty makes a temporary one.
	// A second harness on the same Dir is a restart.
	Dir string
	// Provider is the fake model; nil starts one.
	Provider *providertest.Server
	// Transcribe is the hub's voice transcription (nil: none).
	Transcribe channel.TranscribeFunc
	// SaveAllowFrom records approvals (nil: in memory only).
	SaveAllowFrom func(ch, id string) error
}

// Harness is a running agent with a channel manager.
type Harness struct {
	T        testing.TB
	Dir      string
	Store    *store.DB
	Bus      *bus.Bus
	Provider *providertest.Server
	Tools    *tools.Registry
	Agent    *agent.Loop
	Manager  *channel.Manager
	Hub      *channel.Hub
	Log      *slog.Logger
	Logs     *Buffer

	// Executed counts calls of the board-changing test tool "switch_relay"
	// and of "read_sensor".
	mu       sync.Mutex
	executed map[string]int
	stopped  bool
}

// New builds a harness; Start starts it, Cleanup stops it.
func New(t testing.TB, o Options) *Harness {
	t.Helper()
	dir := o.Dir
	if dir == "" {
		dir = t.TempDir()
	}
	logs := &Buffer{}
	log := slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	db, err := store.Open(filepath.Join(dir, "perch.db"), store.Options{})
	if err != nil {
		t.Fatal(err)
	}
	prov := o.Provider
	if prov == nil {
		prov = providertest.New()
		t.Cleanup(prov.Close)
	}
	client, err := provider.New(context.Background(), provider.Options{
		Choice:   provider.Choice{Name: "openai", Model: "gpt-test", Configured: "gpt-test"},
		Settings: config.Provider{APIKey: "sk-test", APIBase: prov.Base(), MaxRetries: 0},
		Log:      log,
	})
	if err != nil {
		t.Fatal(err)
	}
	h := &Harness{T: t, Dir: dir, Store: db, Bus: bus.New(64), Provider: prov, Log: log, Logs: logs, executed: map[string]int{}}
	h.Tools = tools.NewRegistry(log)
	h.Tools.Register(tools.Func{ToolName: "switch_relay", ToolDescription: "Switch the relay.", Mutating: true,
		Run: func(context.Context, tools.Args) tools.Result { h.count("switch_relay"); return tools.Text("switched") }})
	h.Tools.Register(tools.Func{ToolName: "read_sensor", ToolDescription: "Read the sensor.",
		Run: func(context.Context, tools.Args) tools.Result { h.count("read_sensor"); return tools.Text("21.5 °C") }})
	h.Tools.Register(tools.NewCanvas())
	h.Agent = agent.New(agent.Options{Store: db, Provider: client, Tools: h.Tools, Bus: h.Bus, Log: log,
		Workspace: filepath.Join(dir, "workspace"), TurnTimeout: 30 * time.Second})
	h.Manager = channel.NewManager(h.Bus, log)
	h.Hub = channel.NewHub(channel.HubOptions{Bus: h.Bus, Store: db, Log: log, Workspace: filepath.Join(dir, "workspace"),
		Transcribe: o.Transcribe, SaveAllowFrom: o.SaveAllowFrom})
	h.Manager.UseHub(h.Hub)
	t.Cleanup(h.Stop)
	return h
}

func (h *Harness) count(name string) {
	h.mu.Lock()
	h.executed[name]++
	h.mu.Unlock()
}

// Executed counts the runs of a test tool (switch_relay, read_sensor).
func (h *Harness) Executed(name string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.executed[name]
}

// Deps returns the dependencies of a platform with section sec.
func (h *Harness) Deps(sec config.ChannelSection) channel.Deps {
	return channel.Deps{Section: sec, Bus: h.Bus, Store: h.Store, Log: h.Log.With("channel", sec.Name),
		Workspace: filepath.Join(h.Dir, "workspace"), Hub: h.Hub}
}

// Start registers the channels and starts the agent and the manager; a
// channel's Start error fails the test.
func (h *Harness) Start(chs ...channel.Channel) {
	h.T.Helper()
	if err := h.StartErr(chs...); err != nil {
		h.T.Fatal(err)
	}
}

// StartErr is Start returning the manager's error.
func (h *Harness) StartErr(chs ...channel.Channel) error {
	for _, c := range chs {
		h.Manager.Register(c)
	}
	if err := h.Agent.Start(context.Background()); err != nil {
		return err
	}
	return h.Manager.Start(context.Background())
}

// Stop stops in the gateway's order (agent, then channels), then closes
// the store. It may be called twice.
func (h *Harness) Stop() {
	h.mu.Lock()
	if h.stopped {
		h.mu.Unlock()
		return
	}
	h.stopped = true
	h.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h.Agent.Stop(ctx)
	h.Manager.Stop(ctx)
	h.Store.Close()
}

// Eventually polls cond until it holds or timeout passes.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
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
