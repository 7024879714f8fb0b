package appliance

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/gateway/gatewaytest"
	"github.com/perchhq/perch/appliance/pidfile"
)

// lockedBuffer is a log destination safe for concurrent use.
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

// When the HTTP server fails for good, `perch gateway` stops and reports it
// (exit 1, so systemd restarts it) instead of running on without HTTP.
func TestGatewayStopsWhenServeFails(t *testing.T) {
	home := t.TempDir()
	t.Setenv("PERCH_HOME", home)
	if err := os.WriteFile(filepath.Join(home, "config.json"), []byte(`{"gateway": {"host": "127.0.0.1", "port": 0}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs lockedBuffer
	done := make(chan error, 1)
	cfg, err := config.Load(config.Options{Env: func(string) (string, bool) { return "", false }})
	if err != nil {
		t.Fatal(err)
	}
	go func() { done <- RunGateway(ctx, cfg, slog.New(slog.NewTextHandler(&logs, nil)), nil, nil) }()

	var addr string
	for deadline := time.Now().Add(20 * time.Second); addr == ""; {
		if p, err := pidfile.Read(filepath.Join(home, "perch.pid")); err == nil {
			addr = p.Addr
			break
		}
		select {
		case err := <-done:
			t.Fatalf("gateway ended before it was up: %v\n%s", err, logs.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("gateway did not come up:\n%s", logs.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	gatewaytest.BreakListener(t, addr)
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "gateway") {
			t.Fatalf("Gateway = %v, want an error from the HTTP server", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatalf("Gateway still running 15 s after its HTTP server failed:\n%s", logs.String())
	}
	if _, err := os.Stat(filepath.Join(home, "perch.pid")); !os.IsNotExist(err) {
		t.Errorf("the pid file outlived the gateway (stat: %v)", err)
	}
}
