package systemd

import (
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/perchhq/perch/systemd/systemdtest"
)

// TestNotifyOffSystemdIsNoop: without NOTIFY_SOCKET (a laptop, `make run`)
// every notification is silently skipped.
func TestNotifyOffSystemdIsNoop(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	for name, f := range map[string]func() (bool, error){
		"ready":    Ready,
		"stopping": Stopping,
		"status":   func() (bool, error) { return Status("serving") },
	} {
		t.Run(name, func(t *testing.T) {
			sent, err := f()
			if sent || err != nil {
				t.Fatalf("got (%v, %v), want (false, nil)", sent, err)
			}
		})
	}
}

// TestNotifyMessages: what systemd receives on its notify socket.
func TestNotifyMessages(t *testing.T) {
	sock := systemdtest.ListenNotify(t)
	tests := []struct {
		name string
		send func() (bool, error)
		want string
	}{
		{"ready", Ready, "READY=1"},
		{"status", func() (bool, error) { return Status("serving 3 channels") }, "STATUS=serving 3 channels"},
		{"status folds newlines", func() (bool, error) { return Status("line one\nline two\r\n") }, "STATUS=line one line two "},
		{"stopping", Stopping, "STOPPING=1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sent, err := tt.send()
			if err != nil || !sent {
				t.Fatalf("got (%v, %v), want (true, nil)", sent, err)
			}
			if got := sock.Next(t, 5*time.Second); got != tt.want {
				t.Fatalf("socket got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestNotifyErrorNamesTheSocket: a NOTIFY_SOCKET nobody listens on is an
// error that says what to check, not a silent drop.
func TestNotifyErrorNamesTheSocket(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", t.TempDir()+"/nobody")
	_, err := Ready()
	if err == nil {
		t.Fatal("want an error for a socket nobody listens on")
	}
	for _, want := range []string{"systemd: notify READY", "NOTIFY_SOCKET"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

// TestWatchdogOff: without WATCHDOG_USEC (or for another process's
// WATCHDOG_PID) Start starts nothing and never asks for health.
func TestWatchdogOff(t *testing.T) {
	tests := []struct{ name, usec, pid string }{
		{"unset", "", ""},
		{"other process", "2000", strconv.Itoa(os.Getpid() + 1)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv("WATCHDOG_USEC", tt.usec)
			t.Setenv("WATCHDOG_PID", tt.pid)
			w := NewWatchdog(func() bool { t.Error("health asked while the watchdog is off"); return true })
			if err := w.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			if d := w.Interval(); d != 0 {
				t.Fatalf("interval %v, want 0", d)
			}
			if w.done != nil {
				t.Fatal("a goroutine was started")
			}
			if err := w.Stop(context.Background()); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestWatchdogBadInterval: a malformed WATCHDOG_USEC is reported, naming it.
func TestWatchdogBadInterval(t *testing.T) {
	t.Setenv("WATCHDOG_USEC", "soon")
	t.Setenv("WATCHDOG_PID", "")
	err := NewWatchdog(nil).Start(context.Background())
	if err == nil || !strings.Contains(err.Error(), "WATCHDOG_USEC") {
		t.Fatalf("got %v, want an error naming WATCHDOG_USEC", err)
	}
}

// TestWatchdogPingsOnlyWhileHealthy: one WATCHDOG=1 per healthy answer and
// none for an unhealthy one, so a wedged gateway gets restarted.
func TestWatchdogPingsOnlyWhileHealthy(t *testing.T) {
	sock := systemdtest.ListenNotify(t)
	t.Setenv("WATCHDOG_USEC", "2000") // pings asked every 1ms
	t.Setenv("WATCHDOG_PID", strconv.Itoa(os.Getpid()))

	// Each health check hands the test a channel and waits for the answer,
	// so the test decides every answer and knows when the previous tick
	// (and its ping, if any) is done.
	calls := make(chan chan bool)
	quit := make(chan struct{})
	w := NewWatchdog(func() bool {
		answer := make(chan bool)
		select {
		case calls <- answer:
		case <-quit:
			return false
		}
		select {
		case ok := <-answer:
			return ok
		case <-quit:
			return false
		}
	})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := w.Interval(); got != 2*time.Millisecond {
		t.Fatalf("interval %v, want 2ms", got)
	}
	nextCall := func() chan bool {
		select {
		case a := <-calls:
			return a
		case <-time.After(10 * time.Second):
			t.Fatal("watchdog stopped asking for health")
			return nil
		}
	}
	answers := []bool{true, false, true, true, false, false}
	healthy := 0
	for _, ok := range answers {
		nextCall() <- ok
		if ok {
			healthy++
		}
	}
	nextCall() // the tick after the last answer: every ping of those is sent
	pings := sock.Pending(t)
	for _, p := range pings {
		if p != "WATCHDOG=1" {
			t.Errorf("unexpected message %q", p)
		}
	}
	if len(pings) != healthy {
		t.Fatalf("%d pings for %d healthy answers of %v", len(pings), healthy, answers)
	}

	close(quit)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := w.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if err := w.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
}

// TestWatchdogStopWaitsForAWedgedHealthCheck: Stop gives up at its deadline
// and says why, instead of hanging shutdown.
func TestWatchdogStopWaitsForAWedgedHealthCheck(t *testing.T) {
	systemdtest.ListenNotify(t)
	t.Setenv("WATCHDOG_USEC", "2000")
	t.Setenv("WATCHDOG_PID", "")
	entered := make(chan struct{}, 1)
	release := make(chan struct{})
	w := NewWatchdog(func() bool {
		select {
		case entered <- struct{}{}:
		default:
		}
		<-release
		return true
	})
	if err := w.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-entered
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.Stop(ctx); err == nil || !strings.Contains(err.Error(), "health function") {
		t.Fatalf("got %v, want a deadline error naming the health function", err)
	}
	close(release)
	if err := w.Stop(context.Background()); err != nil {
		t.Fatal(err)
	}
}
