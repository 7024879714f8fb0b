package schedule

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// heartbeatRig records what the heartbeat asks and delivers.
type heartbeatRig struct {
	mu        sync.Mutex
	prompts   []string
	delivered []string
	answer    string
	err       error
	asked     chan struct{}
}

func (r *heartbeatRig) ask(_ context.Context, prompt string) (string, error) {
	r.mu.Lock()
	r.prompts = append(r.prompts, prompt)
	a, err := r.answer, r.err
	r.mu.Unlock()
	select {
	case r.asked <- struct{}{}:
	default:
	}
	return a, err
}

func (r *heartbeatRig) deliver(text string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.delivered = append(r.delivered, text)
}

func (r *heartbeatRig) snapshot() (prompts, delivered []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.prompts...), append([]string(nil), r.delivered...)
}

func newHeartbeat(t *testing.T, file *string, interval time.Duration) (*Heartbeat, *heartbeatRig) {
	t.Helper()
	ws := t.TempDir()
	if file != nil {
		if err := os.WriteFile(filepath.Join(ws, "HEARTBEAT.md"), []byte(*file), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	r := &heartbeatRig{asked: make(chan struct{}, 1)}
	h := NewHeartbeat(HeartbeatOptions{Interval: interval, Workspace: ws, Ask: r.ask, Deliver: r.deliver, Log: slog.New(slog.DiscardHandler)})
	return h, r
}

func str(s string) *string { return &s }

func TestHeartbeatTick(t *testing.T) {
	tasks := "# Heartbeat\n\n- Check whether the greenhouse is above 30 °C\n"
	tests := []struct {
		name      string
		file      *string
		answer    string
		err       error
		asked     bool
		delivered string
	}{
		{name: "no HEARTBEAT.md", file: nil},
		{name: "empty file", file: str("  \n\n")},
		{name: "headings only", file: str("# Heartbeat\n\n## Morning\n   ### Later\n")},
		{name: "all is well", file: &tasks, answer: HeartbeatOK, asked: true},
		{name: "all is well, padded", file: &tasks, answer: "\n  HEARTBEAT_OK \n", asked: true},
		{name: "all is well, with words", file: &tasks, answer: "Nothing to report. HEARTBEAT_OK", asked: true},
		{name: "empty answer", file: &tasks, answer: "   ", asked: true},
		{name: "something to say", file: &tasks, answer: "  The greenhouse is at 34 °C: open the vents.\n", asked: true,
			delivered: "The greenhouse is at 34 °C: open the vents."},
		{name: "model failed", file: &tasks, err: errors.New("provider openrouter: rate limited"), asked: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h, r := newHeartbeat(t, tt.file, time.Hour)
			r.answer, r.err = tt.answer, tt.err
			h.Tick(context.Background())
			prompts, delivered := r.snapshot()
			if tt.asked != (len(prompts) == 1) {
				t.Fatalf("model asked %d times, want asked=%v", len(prompts), tt.asked)
			}
			if tt.asked {
				p := prompts[0]
				if !strings.Contains(p, "greenhouse is above 30 °C") || !strings.Contains(p, HeartbeatOK) {
					t.Errorf("prompt %q should carry the tasks and the %s convention", p, HeartbeatOK)
				}
			}
			want := []string{}
			if tt.delivered != "" {
				want = []string{tt.delivered}
			}
			if strings.Join(delivered, "|") != strings.Join(want, "|") {
				t.Errorf("delivered %q, want %q", delivered, want)
			}
		})
	}
}

// Without a Deliver function a non-OK answer is simply not delivered.
func TestHeartbeatTickWithoutDeliver(t *testing.T) {
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "HEARTBEAT.md"), []byte("- check mail"), 0o644)
	asked := false
	h := NewHeartbeat(HeartbeatOptions{Workspace: ws, Ask: func(context.Context, string) (string, error) {
		asked = true
		return "You have mail.", nil
	}})
	h.Tick(context.Background())
	if !asked {
		t.Error("the model was not asked")
	}
}

// HEARTBEAT.md is read as the workspace's own file: a command that links
// it to a file outside (the config) or makes it a FIFO gets no tick, and
// no blocked one.
func TestHeartbeatReadsOnlyTheWorkspacesFile(t *testing.T) {
	secret := filepath.Join(t.TempDir(), "config.json")
	os.WriteFile(secret, []byte(`- {"api_key":"sk-leaked"}`), 0o600)
	for name, plant := range map[string]func(string) error{
		"a link out": func(p string) error { return os.Symlink(secret, p) },
		"a FIFO":     func(p string) error { return syscall.Mkfifo(p, 0o644) },
	} {
		ws := t.TempDir()
		if err := plant(filepath.Join(ws, "HEARTBEAT.md")); err != nil {
			t.Fatal(err)
		}
		asked := make(chan string, 1)
		h := NewHeartbeat(HeartbeatOptions{Workspace: ws, Log: slog.New(slog.DiscardHandler), Ask: func(_ context.Context, p string) (string, error) {
			asked <- p
			return HeartbeatOK, nil
		}})
		done := make(chan struct{})
		go func() { h.Tick(context.Background()); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: the tick blocked", name)
		}
		select {
		case p := <-asked:
			t.Errorf("%s: the model was asked: %q", name, p)
		default:
		}
	}
}

// Start ticks every interval until Stop, which waits for a tick in
// progress.
func TestHeartbeatStartStop(t *testing.T) {
	h, r := newHeartbeat(t, str("- water the basil"), 5*time.Millisecond)
	r.answer = "Water the basil now."
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		select {
		case <-r.asked:
		case <-time.After(10 * time.Second):
			h.Stop(context.Background())
			t.Fatal("the heartbeat did not tick")
		}
	}
	if err := h.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
	prompts, delivered := r.snapshot()
	if len(prompts) < 2 || len(delivered) != len(prompts) {
		t.Errorf("%d prompts, %d deliveries; want at least 2 of each, equal", len(prompts), len(delivered))
	}
}

func TestHeartbeatStopWithoutStart(t *testing.T) {
	h, _ := newHeartbeat(t, nil, time.Second)
	if err := h.Stop(context.Background()); err != nil {
		t.Errorf("Stop without Start = %v", err)
	}
}

// A tick that ignores cancellation makes Stop report its deadline rather
// than hang.
func TestHeartbeatStopDeadline(t *testing.T) {
	ws := t.TempDir()
	os.WriteFile(filepath.Join(ws, "HEARTBEAT.md"), []byte("- slow task"), 0o644)
	inTick := make(chan struct{}, 1)
	release := make(chan struct{})
	h := NewHeartbeat(HeartbeatOptions{Interval: time.Millisecond, Workspace: ws, Log: slog.New(slog.DiscardHandler),
		Ask: func(context.Context, string) (string, error) {
			select {
			case inTick <- struct{}{}:
			default:
			}
			<-release
			return HeartbeatOK, nil
		}})
	if err := h.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-inTick:
	case <-time.After(10 * time.Second):
		t.Fatal("no tick")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := h.Stop(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Stop during a stuck tick = %v, want the deadline", err)
	}
	close(release)
	if err := h.Stop(context.Background()); err != nil {
		t.Errorf("Stop after the tick ended = %v", err)
	}
}
