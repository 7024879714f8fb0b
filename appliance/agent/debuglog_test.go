package agent_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/perchhq/perch/appliance/agent"
	"github.com/perchhq/perch/appliance/provider/providertest"
)

// lockedBuffer is a log sink safe for the loop's goroutines.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestProviderCallDebugRecord: each provider call is logged at debug level,
// with its outcome and token counts (the arguments are built only when that
// level is on), and not at all at info level.
func TestProviderCallDebugRecord(t *testing.T) {
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo} {
		var logs lockedBuffer
		f := newFixture(t, func(o *agent.Options) {
			o.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: level}))
		})
		f.fake.Enqueue(providertest.Reply{Content: "fine", Usage: [3]int{7, 3, 10}}, providertest.Reply{Status: 500, ErrorMessage: "down"})
		if _, err := f.loop.Process(context.Background(), in("s1", "hello")); err != nil {
			t.Fatal(err)
		}
		if _, err := f.loop.Process(context.Background(), in("s1", "again")); err == nil {
			t.Fatal("the failing call did not fail the turn")
		}
		out := logs.String()
		ok := strings.Contains(out, `msg="provider call" provider=openrouter model=openai/gpt-4o-mini session=s1 status=ok tool_calls=0 prompt_tokens=7 completion_tokens=3 total_tokens=10 took=`)
		failed := strings.Contains(out, `msg="provider call" provider=openrouter model=openai/gpt-4o-mini session=s1 status=error took=`)
		if level == slog.LevelDebug && (!ok || !failed) {
			t.Fatalf("debug records missing (ok %v, error %v):\n%s", ok, failed, out)
		}
		if level == slog.LevelInfo && strings.Contains(out, "provider call") {
			t.Fatalf("provider call logged at info level:\n%s", out)
		}
	}
}
