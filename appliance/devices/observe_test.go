package devices

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/perchhq/perch/drivers/usb"
)

// TestObserversSeeEachChangeAtOnce: an observer hears of every device that
// came or went, live and while Perch was stopped, one event per device and
// without waiting for the chat notification's quiet period.
func TestObserversSeeEachChangeAtOnce(t *testing.T) {
	sys, st := copySys(t), &memStore{}
	first := start(t, newFakeListener(), &outbox{}, Options{SysRoot: sys, Store: st})
	stop(t, first)
	plug(t, sys, "devices/platform/scb/fd500000.pcie/pci0000:00/0000:00:00.0/0000:01:00.0/usb1/1-1/1-1.4", false)

	var mu sync.Mutex
	var seen []Event
	l := newFakeListener()
	s := New(Options{Enabled: true, MonitorUSB: true, SysRoot: sys, Store: st, Notify: (&outbox{}).notify,
		LastActive: lastActive("telegram", "1"), Listen: func() (usb.Listener, error) { return l, nil },
		Quiet: time.Hour, MaxWait: time.Hour})
	s.Observe(func(e Event) { mu.Lock(); seen = append(seen, e); mu.Unlock() })
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(t, s) })
	l.push(scenario(t, "keyboard-add")...)
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := len(seen)
		mu.Unlock()
		if n >= 2 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 {
		t.Fatalf("observer saw %d events, want 2: %+v", len(seen), seen)
	}
	if e := seen[0]; e.Connected || !e.Offline || e.Device.Port != "1-1.4" {
		t.Errorf("first event %+v, want the stick removed while stopped", e)
	}
	if e := seen[1]; !e.Connected || e.Offline || e.Device.Name() != "Logitech USB Keyboard" {
		t.Errorf("second event %+v, want the keyboard plugged in", e)
	}
}
