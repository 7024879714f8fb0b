package main

// End-to-end harness: TestMain builds the real binary once; each test starts
// it as a gateway in its own PERCH_HOME against a loopback fake provider and
// talks to it over HTTP, as a user would. Other e2e_*_test.go files reuse
// these helpers.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/provider/providertest"
)

// perchBin is the binary under test.
var perchBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "perch-e2e-*")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	perchBin = filepath.Join(dir, "perch")
	build := exec.Command("go", "build", "-o", perchBin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building perch: %v\n%s", err, out)
		os.Exit(2)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// Home is a PERCH_HOME for one test.
type Home struct {
	t    *testing.T
	Dir  string
	Fake *providertest.Server
	// IgnoreHUP starts the gateway with SIGHUP ignored, as nohup does.
	IgnoreHUP bool
	// Bin, when set, is run instead of the binary TestMain built.
	Bin string
	// ExtraEnv is added to the environment of every command run.
	ExtraEnv []string
}

func (h *Home) bin() string {
	if h.Bin != "" {
		return h.Bin
	}
	return perchBin
}

// NewHome makes a config dir whose config points the aggregator at a fresh
// fake provider; mutate edits the config map before it is written.
func NewHome(t *testing.T, mutate func(cfg map[string]any)) *Home {
	t.Helper()
	h := &Home{t: t, Dir: t.TempDir(), Fake: providertest.New()}
	t.Cleanup(h.Fake.Close)
	cfg := map[string]any{
		"gateway": map[string]any{"host": "127.0.0.1", "port": 0, "api_token": "test-token"},
		"providers": map[string]any{
			"openrouter": map[string]any{"api_key": "sk-or-e2e-secret", "api_base": h.Fake.Base(), "max_retries": 3},
		},
		"agents": map[string]any{"defaults": map[string]any{"model": "openai/gpt-4o-mini"}},
	}
	if mutate != nil {
		mutate(cfg)
	}
	h.WriteConfig(cfg)
	return h
}

// WriteConfig replaces the config file.
func (h *Home) WriteConfig(cfg map[string]any) {
	h.t.Helper()
	data, _ := json.MarshalIndent(cfg, "", "  ")
	if err := os.WriteFile(filepath.Join(h.Dir, "config.json"), data, 0o600); err != nil {
		h.t.Fatal(err)
	}
}

// Workspace is the home's workspace dir.
func (h *Home) Workspace() string { return filepath.Join(h.Dir, "workspace") }

// Env is the environment perch runs with: no inherited provider keys.
func (h *Home) Env(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(k, "PERCH_") || strings.HasSuffix(k, "_API_KEY") {
			continue
		}
		env = append(env, kv)
	}
	env = append(append(env, "PERCH_HOME="+h.Dir), h.ExtraEnv...)
	return append(env, extra...)
}

// Run runs a perch command to completion and returns stdout, stderr and
// the exit code.
func (h *Home) Run(args ...string) (stdout, stderr string, code int) {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, h.bin(), args...)
	cmd.Env = h.Env()
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	err := cmd.Run()
	code = 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else if err != nil {
		h.t.Fatalf("run perch %v: %v", args, err)
	}
	return o.String(), e.String(), code
}

// Gateway is a running `perch gateway`.
type Gateway struct {
	t     *testing.T
	Home  *Home
	Cmd   *exec.Cmd
	Base  string
	Token string

	mu     sync.Mutex
	stderr bytes.Buffer
	done   chan struct{}
	code   int
}

// Start starts the gateway and waits until it answers /health.
func (h *Home) Start(args ...string) *Gateway {
	h.t.Helper()
	g := h.StartNoWait(args...)
	g.waitUp()
	return g
}

// StartNoWait starts the gateway without waiting.
func (h *Home) StartNoWait(args ...string) *Gateway {
	h.t.Helper()
	os.Remove(filepath.Join(h.Dir, "perch.pid"))
	g := &Gateway{t: h.t, Home: h, Token: "test-token", done: make(chan struct{})}
	g.Cmd = exec.Command(h.bin(), append([]string{"gateway"}, args...)...)
	if h.IgnoreHUP {
		// The shell ignores SIGHUP and execs the gateway in its place,
		// which inherits the ignored disposition, as under nohup.
		g.Cmd = exec.Command("sh", append([]string{"-c", `trap "" HUP; exec "$0" "$@"`, h.bin(), "gateway"}, args...)...)
	}
	g.Cmd.Env = h.Env()
	g.Cmd.Stdout = io.Discard
	g.Cmd.Stderr = lockedWriter{&g.mu, &g.stderr}
	if err := g.Cmd.Start(); err != nil {
		h.t.Fatal(err)
	}
	go func() {
		err := g.Cmd.Wait()
		g.code = 0
		if ee, ok := err.(*exec.ExitError); ok {
			g.code = ee.ExitCode()
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
				g.code = -int(ws.Signal())
			}
		}
		close(g.done)
	}()
	h.t.Cleanup(func() {
		select {
		case <-g.done:
		default:
			g.Cmd.Process.Kill()
			<-g.done
		}
		if h.t.Failed() {
			h.t.Logf("gateway stderr:\n%s", g.Stderr())
		}
	})
	return g
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *bytes.Buffer
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

// Stderr is the gateway's log so far.
func (g *Gateway) Stderr() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.stderr.String()
}

// waitUp waits for the pid file (the gateway chose its port) and /health.
func (g *Gateway) waitUp() {
	g.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case <-g.done:
			g.t.Fatalf("gateway exited with %d before answering:\n%s", g.code, g.Stderr())
		default:
		}
		data, err := os.ReadFile(filepath.Join(g.Home.Dir, "perch.pid"))
		if err == nil {
			var p struct{ Addr string }
			if json.Unmarshal(data, &p) == nil && p.Addr != "" {
				g.Base = "http://" + p.Addr
				if resp, err := http.Get(g.Base + "/health"); err == nil {
					resp.Body.Close()
					if resp.StatusCode == 200 {
						return
					}
				}
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	g.t.Fatalf("gateway did not come up:\n%s", g.Stderr())
}

// Wait waits for the process to exit and returns its exit code (negative:
// killed by that signal).
func (g *Gateway) Wait(timeout time.Duration) int {
	g.t.Helper()
	select {
	case <-g.done:
		return g.code
	case <-time.After(timeout):
		g.t.Fatalf("gateway still running after %v:\n%s", timeout, g.Stderr())
	}
	return 0
}

// Signal sends sig to the gateway.
func (g *Gateway) Signal(sig os.Signal) { g.Cmd.Process.Signal(sig) }

// Do sends a request with the token and decodes a JSON answer.
func (g *Gateway) Do(method, path string, body any) (int, map[string]any) {
	g.t.Helper()
	status, raw := g.DoRaw(method, path, body, true)
	var m map[string]any
	json.Unmarshal(raw, &m)
	return status, m
}

// DoRaw sends a request, with the token when auth is set, and returns the
// raw answer.
func (g *Gateway) DoRaw(method, path string, body any, auth bool) (int, []byte) {
	g.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		data, _ := json.Marshal(b)
		rd = bytes.NewReader(data)
	}
	req, _ := http.NewRequest(method, g.Base+path, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if auth {
		req.Header.Set("Authorization", "Bearer "+g.Token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		g.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, raw
}

// Chat posts a message to session and returns the status and body.
func (g *Gateway) Chat(session, message string) (int, map[string]any) {
	g.t.Helper()
	return g.Do("POST", "/chat", map[string]any{"message": message, "session_key": session})
}

// MustChat posts a message and fails unless it got 200; returns the reply.
func (g *Gateway) MustChat(session, message string) string {
	g.t.Helper()
	status, body := g.Chat(session, message)
	if status != 200 {
		g.t.Fatalf("chat %q: HTTP %d %v", message, status, body)
	}
	r, _ := body["response"].(string)
	return r
}
