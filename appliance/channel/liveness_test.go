package channel

import (
	"context"
	"errors"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestBackoffGrowsWithJitterWithinBounds(t *testing.T) {
	b := Backoff{Min: 100 * time.Millisecond, Max: time.Second}
	prevStep := time.Duration(0)
	for i := 0; i < 8; i++ {
		step := min(100*time.Millisecond<<i, time.Second)
		d := b.Next()
		if d < step/2 || d > step {
			t.Errorf("attempt %d waited %s, want within [%s, %s]", i, d, step/2, step)
		}
		prevStep = step
	}
	_ = prevStep
	b.Reset()
	if d := b.Next(); d > 100*time.Millisecond {
		t.Errorf("after Reset waited %s", d)
	}
	seen := map[time.Duration]bool{}
	for i := 0; i < 20; i++ {
		b := Backoff{Min: time.Second, Max: time.Second}
		seen[b.Next()] = true
	}
	if len(seen) < 5 {
		t.Errorf("20 boards would wait only %d distinct times: no jitter", len(seen))
	}
}

func TestWatchdogCancelsAQuietConnection(t *testing.T) {
	w := NewWatchdog(100 * time.Millisecond)
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	stop := make(chan struct{})
	go func() { // a live connection at first
		for i := 0; i < 5; i++ {
			w.Alive()
			time.Sleep(30 * time.Millisecond)
		}
		close(stop)
	}()
	start := time.Now()
	if !w.Watch(ctx, cancel) {
		t.Fatal("Watch returned without firing")
	}
	<-stop
	if el := time.Since(start); el < 150*time.Millisecond {
		t.Errorf("fired after %s while the connection was alive", el)
	}
	if !errors.Is(context.Cause(ctx), ErrQuiet) {
		t.Errorf("cause %v", context.Cause(ctx))
	}
}

func TestSupervisorReconnectsAndReplacesWedgedConnections(t *testing.T) {
	st := NewState("test")
	s := &Supervisor{Name: "Test", State: st, Log: slog.New(slog.DiscardHandler),
		Backoff: Backoff{Min: time.Millisecond, Max: 2 * time.Millisecond}, Quiet: 50 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	var attempts atomic.Int32
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx, func(ctx context.Context, alive func()) error {
			switch attempts.Add(1) {
			case 1:
				return errors.New("dial: refused") // never connected
			case 2:
				alive()
				<-ctx.Done() // wedged: never alive again
				return ctx.Err()
			case 3:
				return RetryAfter(200*time.Millisecond, errors.New("409 conflict"))
			}
			alive()
			<-ctx.Done()
			return ctx.Err()
		})
	}()
	deadline := time.Now().Add(5 * time.Second)
	for attempts.Load() < 4 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if s.Replaced.Load() != 1 {
		t.Errorf("replaced %d wedged connections, want 1", s.Replaced.Load())
	}
	time.Sleep(20 * time.Millisecond)
	if ok, msg := st.Check(); !ok {
		t.Errorf("check after reconnecting = %v %q", ok, msg)
	}
	cancel()
	<-done
}

func TestSupervisorSaysUnreachableUntilItConnects(t *testing.T) {
	st := NewState("test")
	s := &Supervisor{Name: "Test", State: st, Log: slog.New(slog.DiscardHandler), Backoff: Backoff{Min: time.Hour, Max: time.Hour}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.Run(ctx, func(context.Context, func()) error { return errors.New("no route to host") })
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		_, msg := st.Check()
		if strings.Contains(msg, "Test unreachable: no route to host; retrying in") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("check says %q", msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	<-done
}

func TestStateCheckAndStatus(t *testing.T) {
	st := NewState("tg")
	if ok, msg := st.Check(); ok || !strings.Contains(msg, "not started") {
		t.Errorf("new state: %v %q", ok, msg)
	}
	st.Connected()
	st.SetNote("privacy mode is on")
	st.CountIn()
	st.CountOut()
	st.Fail(errors.New("sending to chat 1 failed"))
	st.SetExtra("pushes_this_month", 3)
	ok, msg := st.Check()
	if !ok || !strings.Contains(msg, "connected since") || !strings.Contains(msg, "privacy mode is on") {
		t.Errorf("check %v %q", ok, msg)
	}
	s := st.Status()
	if !s.Connected || s.MessagesIn != 1 || s.MessagesOut != 1 || s.LastError == "" || s.LastErrorAt.IsZero() || s.Extra["pushes_this_month"] != 3 {
		t.Errorf("status %+v", s)
	}
	st.Disconnected("Telegram unreachable")
	if ok, msg := st.Check(); ok || !strings.HasPrefix(msg, "Telegram unreachable") {
		t.Errorf("check %v %q", ok, msg)
	}
}

func TestStripName(t *testing.T) {
	for _, tc := range []struct {
		text, name, want string
		ok               bool
	}{
		{"Perch, water the plants", "Perch", "water the plants", true},
		{"hey @perch: status?", "perch", "hey status?", true},
		{"perchance it rains", "Perch", "perchance it rains", false},
		{"ask the Perch Bot now", "Perch Bot", "ask the now", true},
		{"Перч, привет", "Перч", "привет", true},
		{"nothing here", "", "nothing here", false},
		// The user's lines and indents stay as typed.
		{"Perch, why does this fail?\n```\nfor i in x:\n    print(i)\n```", "Perch", "why does this fail?\n```\nfor i in x:\n    print(i)\n```", true},
		{"@perch\n- one\n- two", "perch", "- one\n- two", true},
		{"list:\n1. a @perch\n2. b", "perch", "list:\n1. a\n2. b", true},
		{"a  b @perch  c", "perch", "a  b c", true},
	} {
		got, ok := StripName(tc.text, tc.name)
		if got != tc.want || ok != tc.ok {
			t.Errorf("StripName(%q, %q) = %q, %v; want %q, %v", tc.text, tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestSessionKeyIncludesTheThread(t *testing.T) {
	if k := (Message{ChatID: "C1"}).SessionKey("slack"); k != "slack:C1" {
		t.Errorf("key %q", k)
	}
	if k := (Message{ChatID: "C1", ThreadID: "169.2"}).SessionKey("slack"); k != "slack:C1:169.2" {
		t.Errorf("key %q", k)
	}
}

// TestAwaitFirst: the first outcome's error is returned at once; silence
// past the wait is late; a cancelled start is neither.
func TestAwaitFirst(t *testing.T) {
	refused := make(chan error, 1)
	refused <- errors.New("invalid_auth")
	if late, err := AwaitFirst(context.Background(), refused, time.Minute); late || err == nil {
		t.Errorf("a refusal: late %v, err %v", late, err)
	}
	if late, err := AwaitFirst(context.Background(), make(chan error), 10*time.Millisecond); !late || err != nil {
		t.Errorf("silence: late %v, err %v", late, err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if late, err := AwaitFirst(ctx, make(chan error), time.Minute); late || err != nil {
		t.Errorf("cancelled: late %v, err %v", late, err)
	}
}
