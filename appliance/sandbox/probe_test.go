package sandbox

import (
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestFirstCommandWaitsForTheCgroupProbe: New returns before its cgroup
// probe ends, so the gateway need not wait for it; a command run at once
// must still get its own cgroup wherever one can be made.
func TestFirstCommandWaitsForTheCgroupProbe(t *testing.T) {
	f := newFixture(t)
	r := f.newRunner(t, Options{})
	res := run(t, r, "cat /proc/self/cgroup") // before anything waited for the probe
	tree := r.tree()
	if tree == nil {
		if os.Geteuid() == 0 {
			t.Log("no cgroup can be made here; checking only that the probe ended")
		}
		return
	}
	if !strings.Contains(res.Output, cgroupPrefix) {
		t.Errorf("the first command ran outside a %s cgroup (probe found %s):\n%s", cgroupPrefix, cgParent(tree), res.Output)
	}
}

// lockedBuffer is a log sink the probe's goroutine may write to while the
// test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
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

// TestProbeWaitsUntilStarted: New does not probe (making and removing a
// cgroup would compete with the gateway's start for the cores); the probe
// runs once, when StartProbe is called (more calls do nothing), and
// EndProbe waits for it. EndProbe before any probe returns at once (a
// gateway stopped before its probe), and none starts after it.
func TestProbeWaitsUntilStarted(t *testing.T) {
	f := newFixture(t)
	var logs lockedBuffer
	r := f.newRunner(t, Options{Log: slog.New(slog.NewTextHandler(&logs, nil))})
	time.Sleep(50 * time.Millisecond) // a probe New started would have logged by now
	if strings.Contains(logs.String(), "sandbox ready") {
		t.Fatalf("the probe ran before StartProbe:\n%s", logs.String())
	}
	r.StartProbe()
	r.StartProbe()
	r.EndProbe()
	if n := strings.Count(logs.String(), "sandbox ready"); n != 1 {
		t.Fatalf("after StartProbe twice the probe logged %d times, want once:\n%s", n, logs.String())
	}

	var logs2 lockedBuffer
	r2 := f.newRunner(t, Options{Log: slog.New(slog.NewTextHandler(&logs2, nil))})
	done := make(chan struct{})
	go func() {
		r2.EndProbe()
		r2.StartProbe()
		r2.tree()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("EndProbe, or tree after it, waited for a probe that was never started")
	}
	if strings.Contains(logs2.String(), "sandbox ready") {
		t.Fatalf("a probe ran after EndProbe:\n%s", logs2.String())
	}
}
