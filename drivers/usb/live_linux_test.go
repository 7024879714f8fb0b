package usb

import (
	"errors"
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// triggerLoChange makes the kernel announce a "change" of the loopback
// interface: a real uevent on a machine that has no USB to plug.
func triggerLoChange(t *testing.T) {
	t.Helper()
	if err := os.WriteFile("/sys/class/net/lo/uevent", []byte("change"), 0); err != nil {
		t.Fatalf("trigger a uevent (needs root): %v", err)
	}
}

// receive calls l.Receive in the background and gives up after d, closing
// the listener so the goroutine ends.
func receive(t *testing.T, l Listener, d time.Duration, want func(Event) bool) Event {
	t.Helper()
	type result struct {
		ev  Event
		err error
	}
	ch := make(chan result, 1)
	go func() {
		for {
			ev, err := l.Receive()
			if err != nil || want(ev) {
				ch <- result{ev, err}
				return
			}
		}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			t.Fatalf("Receive: %v", r.err)
		}
		return r.ev
	case <-time.After(d):
		l.Close()
		<-ch
		t.Fatalf("no matching uevent within %v", d)
	}
	return Event{}
}

func isLoChange(ev Event) bool {
	return ev.Action == "change" && ev.Subsystem == "net" && ev.DevPath == "/devices/virtual/net/lo"
}

func requireRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("writing /sys/class/net/lo/uevent needs root; CI runs as root")
	}
}

// TestListenReceivesARealUevent opens this build's listener (netlink, or
// libudev with -tags udev) and hears the kernel announce a real event.
func TestListenReceivesARealUevent(t *testing.T) {
	requireRoot(t)
	l, err := Listen()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	t.Logf("source: %s", l.Source())
	triggerLoChange(t)
	ev := receive(t, l, 10*time.Second, isLoChange)
	if ev.Env["INTERFACE"] != "lo" || ev.Seq == 0 {
		t.Errorf("event %+v", ev)
	}
}

// TestNetlinkIgnoresMessagesFromProcesses: a root process can multicast to
// the kernel's group; the listener drops what does not come from the kernel,
// so a forged "USB device added" never reaches the device service.
func TestNetlinkIgnoresMessagesFromProcesses(t *testing.T) {
	requireRoot(t)
	l, err := ListenNetlink()
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	s, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(s)
	forged := []byte("add@/devices/virtual/perch-test-forged\x00ACTION=add\x00DEVPATH=/devices/virtual/perch-test-forged\x00" +
		"SUBSYSTEM=usb\x00DEVTYPE=usb_device\x00PRODUCT=dead/beef/1\x00SEQNUM=1\x00")
	if err := unix.Sendto(s, forged, 0, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: netlinkGroupKernel}); err != nil {
		t.Fatalf("send forged uevent: %v", err)
	}
	triggerLoChange(t)
	// The forged message was queued first; the first event Receive returns
	// must still be the kernel's.
	ev := receive(t, l, 10*time.Second, func(Event) bool { return true })
	for ev.Subsystem != "net" && ev.DevPath != "/devices/virtual/perch-test-forged" {
		ev = receive(t, l, 10*time.Second, func(Event) bool { return true }) // unrelated kernel noise
	}
	if ev.DevPath == "/devices/virtual/perch-test-forged" {
		t.Fatal("forged uevent from a process was delivered")
	}
}

// TestCloseUnblocksReceive: Stop must not hang on a listener waiting for a
// device that never comes.
func TestCloseUnblocksReceive(t *testing.T) {
	l, err := ListenNetlink()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for {
			if _, err := l.Receive(); err != nil {
				done <- err
				return
			}
		}
	}()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if !errors.Is(err, ErrClosed) {
			t.Errorf("Receive after Close: %v, want ErrClosed", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Receive still blocked 10 s after Close")
	}
}
