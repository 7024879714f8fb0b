package devices

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/drivers/usb"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// The recorded uevents and sysfs tree of a Raspberry Pi 4 (see
// drivers/usb/testdata/README.md).
const (
	usbTestdata = "../../drivers/usb/testdata"
	piSys       = usbTestdata + "/sys"
	piPCI       = "/devices/platform/scb/fd500000.pcie/pci0000:00/0000:00:00.0/0000:01:00.0"
)

func scenario(t *testing.T, name string) []usb.Event {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(usbTestdata, "uevents", name, "*.uevent"))
	if len(files) == 0 {
		t.Fatalf("no recordings for %s", name)
	}
	sort.Strings(files)
	var out []usb.Event
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		ev, err := usb.ParseUevent(b)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, ev)
	}
	return out
}

// fakeListener stands in for the kernel's netlink socket: it delivers the
// recorded events the test pushes.
type fakeListener struct {
	items  chan item
	closed chan struct{}
	once   sync.Once
}

type item struct {
	ev  usb.Event
	err error
}

func newFakeListener() *fakeListener {
	return &fakeListener{items: make(chan item, 64), closed: make(chan struct{})}
}

func (f *fakeListener) push(evs ...usb.Event) {
	for _, ev := range evs {
		f.items <- item{ev: ev}
	}
}

func (f *fakeListener) fail(err error) { f.items <- item{err: err} }

func (f *fakeListener) Receive() (usb.Event, error) {
	select {
	case <-f.closed:
		return usb.Event{}, usb.ErrClosed
	case it := <-f.items:
		return it.ev, it.err
	}
}

func (f *fakeListener) Close() error {
	f.once.Do(func() { close(f.closed) })
	return nil
}

func (f *fakeListener) Source() string { return "fake" }

// outbox records notifications; failures makes the first sends fail.
type outbox struct {
	mu       sync.Mutex
	sent     []bus.Outbound
	attempts int
	failures int
}

func (o *outbox) notify(m bus.Outbound) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.attempts++
	if o.failures > 0 {
		o.failures--
		return bus.ErrFull
	}
	o.sent = append(o.sent, m)
	return nil
}

func (o *outbox) messages() []bus.Outbound {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]bus.Outbound(nil), o.sent...)
}

// waitFor polls until n notifications were sent or 10 s passed.
func (o *outbox) waitFor(t *testing.T, n int) []bus.Outbound {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if m := o.messages(); len(m) >= n {
			return m
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatalf("%d notifications after 10 s, want %d: %+v", len(o.messages()), n, o.messages())
	return nil
}

type memStore struct {
	mu    sync.Mutex
	data  []byte
	saves int
}

func (m *memStore) saved() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.saves
}

func (m *memStore) LoadDevices() ([]byte, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.data, nil
}

func (m *memStore) SaveDevices(b []byte) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.data = append([]byte(nil), b...)
	m.saves++
	return nil
}

func lastActive(channel, chat string) func() (string, string) {
	return func() (string, string) { return channel, chat }
}

// start runs a service over l and the Pi's sysfs (or sys) until the test
// ends.
func start(t *testing.T, l usb.Listener, out *outbox, opts Options) *Service {
	t.Helper()
	opts.Enabled, opts.MonitorUSB = true, true
	if opts.SysRoot == "" {
		opts.SysRoot = piSys
	}
	if opts.Listen == nil {
		opts.Listen = func() (usb.Listener, error) { return l, nil }
	}
	if opts.Notify == nil {
		opts.Notify = out.notify
	}
	if opts.LastActive == nil {
		opts.LastActive = lastActive("telegram", "4242")
	}
	if opts.Quiet == 0 {
		opts.Quiet = 20 * time.Millisecond
	}
	s := New(opts)
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { stop(t, s) })
	return s
}

func stop(t *testing.T, s *Service) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

func ports(ds []usb.Device) []string {
	var out []string
	for _, d := range ds {
		out = append(out, d.Port)
	}
	return out
}

// TestPlugAndUnplugNotifyOnceEach: the keyboard's seven add events make one
// "connected" notification, its seven remove events one "disconnected", both
// to the last active chat; the removal names the device from its add.
func TestPlugAndUnplugNotifyOnceEach(t *testing.T) {
	l, out := newFakeListener(), &outbox{}
	s := start(t, l, out, Options{})
	if got := ports(s.Devices()); strings.Join(got, " ") != "1-1 1-1.4" {
		t.Fatalf("devices at start %v", got)
	}
	l.push(scenario(t, "keyboard-add")...)
	msgs := out.waitFor(t, 1)
	want := bus.Outbound{Channel: "telegram", ChatID: "4242",
		Text: "USB device connected: Logitech USB Keyboard [046d:c31c, port 1-1.3]"}
	if !reflect.DeepEqual(msgs[0], want) {
		t.Errorf("notification %+v\nwant %+v", msgs[0], want)
	}
	if got := ports(s.Devices()); strings.Join(got, " ") != "1-1 1-1.3 1-1.4" {
		t.Errorf("devices after plugging %v", got)
	}
	l.push(scenario(t, "keyboard-remove")...)
	msgs = out.waitFor(t, 2)
	if msgs[1].Text != "USB device disconnected: Logitech USB Keyboard [046d:c31c, port 1-1.3]" || msgs[1].Channel != "telegram" {
		t.Errorf("notification %+v", msgs[1])
	}
	stop(t, s)
	if n := len(out.messages()); n != 2 {
		t.Errorf("%d notifications in all, want 2: %+v", n, out.messages())
	}
	if got := ports(s.Devices()); strings.Join(got, " ") != "1-1 1-1.4" {
		t.Errorf("devices after unplugging %v", got)
	}
}

// TestHubBurstNamesEachDeviceOnce: a hub arriving with two devices is three
// changes; each is reported exactly once, whatever the batching.
func TestHubBurstNamesEachDeviceOnce(t *testing.T) {
	l, out := newFakeListener(), &outbox{}
	s := start(t, l, out, Options{Quiet: 200 * time.Millisecond})
	l.push(scenario(t, "hub-burst")...)
	out.waitFor(t, 1)
	stop(t, s) // sends anything still gathering
	var all string
	for _, m := range out.messages() {
		if m.Channel != "telegram" || m.ChatID != "4242" {
			t.Errorf("sent to %s/%s", m.Channel, m.ChatID)
		}
		all += m.Text + "\n"
	}
	for _, want := range []string{
		"connected: GenesysLogic USB2.1 Hub [05e3:0610, port 1-1.2]",
		"connected: Arduino (www.arduino.cc) device [2341:0043, serial 85736323838351F0B1C1, port 1-1.2.1]",
		"connected: FTDI FT232R USB UART [0403:6001, serial A50285BI, port 1-1.2.3]",
	} {
		if n := strings.Count(all, want); n != 1 {
			t.Errorf("%q reported %d times in:\n%s", want, n, all)
		}
	}
	if n := strings.Count(all, "connected"); n != 3 {
		t.Errorf("%d changes reported, want 3:\n%s", n, all)
	}
}

func TestNoActiveChatSkipsTheNotificationButKeepsTheList(t *testing.T) {
	l, out := newFakeListener(), &outbox{}
	s := start(t, l, out, Options{LastActive: lastActive("", "")})
	l.push(scenario(t, "keyboard-add")...)
	deadline := time.Now().Add(10 * time.Second)
	for len(s.Devices()) != 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	stop(t, s)
	if got := ports(s.Devices()); strings.Join(got, " ") != "1-1 1-1.3 1-1.4" {
		t.Errorf("devices %v", got)
	}
	if out.attempts != 0 {
		t.Errorf("Notify called %d times with no active chat", out.attempts)
	}
}

// TestFailedNotificationIsRetried: a full bus is not the end of the news.
func TestFailedNotificationIsRetried(t *testing.T) {
	l, out := newFakeListener(), &outbox{failures: 2}
	start(t, l, out, Options{RetryDelay: 10 * time.Millisecond})
	l.push(scenario(t, "keyboard-add")...)
	msgs := out.waitFor(t, 1)
	if !strings.Contains(msgs[0].Text, "connected: Logitech USB Keyboard") {
		t.Errorf("notification %+v", msgs[0])
	}
	out.mu.Lock()
	attempts := out.attempts
	out.mu.Unlock()
	if attempts != 3 {
		t.Errorf("%d attempts, want 3 (two failures, one success)", attempts)
	}
}

// TestStopSendsTheBurstStillGathering: a change seen just before shutdown is
// reported, not lost with the process.
func TestStopSendsTheBurstStillGathering(t *testing.T) {
	l, out := newFakeListener(), &outbox{}
	st := &memStore{}
	s := start(t, l, out, Options{Quiet: time.Hour, Store: st})
	l.push(scenario(t, "keyboard-add")...)
	deadline := time.Now().Add(10 * time.Second)
	for len(s.Devices()) != 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	stop(t, s)
	msgs := out.messages()
	if len(msgs) != 1 || !strings.Contains(msgs[0].Text, "connected: Logitech USB Keyboard") {
		t.Errorf("notifications %+v", msgs)
	}
	var saved storedState
	if err := json.Unmarshal(st.data, &saved); err != nil {
		t.Fatal(err)
	}
	if saved.Version != 1 || strings.Join(ports(saved.Devices), " ") != "1-1 1-1.3 1-1.4" {
		t.Errorf("saved %+v", saved)
	}
}

// copySys copies the Pi's sysfs tree (links included) so a test can plug and
// unplug devices in it.
func copySys(t *testing.T) string {
	t.Helper()
	dst := t.TempDir()
	err := filepath.WalkDir(piSys, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(piSys, p)
		target := filepath.Join(dst, rel)
		switch {
		case d.Type()&fs.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				return err
			}
			return os.Symlink(link, target)
		case d.IsDir():
			return os.MkdirAll(target, 0o755)
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		return os.WriteFile(target, b, 0o644)
	})
	if err != nil {
		t.Fatal(err)
	}
	return dst
}

// plug links (or unlinks) a device of the tree in bus/usb/devices, as the
// kernel does when it is plugged (or unplugged).
func plug(t *testing.T, sys, rel string, in bool) {
	t.Helper()
	link := filepath.Join(sys, "bus/usb/devices", filepath.Base(rel))
	if !in {
		if err := os.Remove(link); err != nil {
			t.Fatal(err)
		}
		return
	}
	target, _ := filepath.Rel(filepath.Dir(link), filepath.Join(sys, rel))
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
}

// TestChangesWhileStoppedAreReportedAtStart: the saved list lets the next
// start tell what was plugged or pulled while Perch was down; the first run,
// with nothing saved, reports nothing.
func TestChangesWhileStoppedAreReportedAtStart(t *testing.T) {
	sys, st, out := copySys(t), &memStore{}, &outbox{}
	first := start(t, newFakeListener(), out, Options{SysRoot: sys, Store: st})
	stop(t, first)
	if n := len(out.messages()); n != 0 {
		t.Fatalf("first run sent %d notifications: %+v", n, out.messages())
	}
	plug(t, sys, "devices/platform/scb/fd500000.pcie/pci0000:00/0000:00:00.0/0000:01:00.0/usb1/1-1/1-1.4", false)
	plug(t, sys, "devices/platform/scb/fd500000.pcie/pci0000:00/0000:00:00.0/0000:01:00.0/usb1/1-1/1-1.3", true)
	start(t, newFakeListener(), out, Options{SysRoot: sys, Store: st})
	msgs := out.waitFor(t, 1)
	want := "USB devices changed (2):\n" +
		"- disconnected while Perch was stopped: USB SanDisk 3.2Gen1 [0781:5583, serial 0401a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6e7f8, port 1-1.4]\n" +
		"+ connected while Perch was stopped: Logitech USB Keyboard [046d:c31c, port 1-1.3]"
	if msgs[0].Text != want {
		t.Errorf("notification\n%s\nwant\n%s", msgs[0].Text, want)
	}
}

// TestOverflowRereadsTheDeviceList: events lost to a full socket buffer are
// recovered by comparing the list with sysfs.
func TestOverflowRereadsTheDeviceList(t *testing.T) {
	sys, l, out := copySys(t), newFakeListener(), &outbox{}
	s := start(t, l, out, Options{SysRoot: sys})
	plug(t, sys, "devices/platform/scb/fd500000.pcie/pci0000:00/0000:00:00.0/0000:01:00.0/usb1/1-1/1-1.3", true)
	l.fail(usb.ErrOverflow)
	msgs := out.waitFor(t, 1)
	if msgs[0].Text != "USB device connected: Logitech USB Keyboard [046d:c31c, port 1-1.3]" {
		t.Errorf("notification %+v", msgs[0])
	}
	if len(s.Devices()) != 3 {
		t.Errorf("devices %v", ports(s.Devices()))
	}
}

func TestListenerFailureIsReportedByCheck(t *testing.T) {
	l, out := newFakeListener(), &outbox{}
	s := start(t, l, out, Options{})
	l.fail(errors.New("netlink: boom"))
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok, msg := s.Check()
		if !ok {
			t.Fatal("Check failed; devices never fail readiness")
		}
		if strings.HasPrefix(msg, "USB monitoring stopped: netlink: boom") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Check message %q", msg)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestDisabledOrUnavailable(t *testing.T) {
	tests := []struct {
		name    string
		opts    Options
		want    string
		devices int
	}{
		{"disabled", Options{Enabled: false, MonitorUSB: true}, "device monitoring is off (devices.enabled is false)", 0},
		{"usb off", Options{Enabled: true, MonitorUSB: false}, "device monitoring is on, USB monitoring is off (devices.monitor_usb is false)", 0},
		{"no event source", Options{Enabled: true, MonitorUSB: true,
			Listen: func() (usb.Listener, error) { return nil, errors.New("socket: permission denied") }},
			"USB hot-plug events unavailable (socket: permission denied); 2 USB devices at start; 2 USB devices connected", 2},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.opts.Listen == nil {
				tt.opts.Listen = func() (usb.Listener, error) {
					t.Error("Listen called although monitoring is off")
					return nil, errors.New("unexpected")
				}
			}
			tt.opts.SysRoot = piSys
			s := New(tt.opts)
			if err := s.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			defer stop(t, s)
			ok, msg := s.Check()
			if !ok || msg != tt.want {
				t.Errorf("Check() = %v, %q\nwant true, %q", ok, msg, tt.want)
			}
			if n := len(s.Devices()); n != tt.devices {
				t.Errorf("%d devices, want %d", n, tt.devices)
			}
		})
	}
}

// TestRealNetlinkStartsAndStops: with the default event source (the
// kernel's netlink socket here) the service starts, says so, and stops at
// once.
func TestRealNetlinkStartsAndStops(t *testing.T) {
	s := New(Options{Enabled: true, MonitorUSB: true, SysRoot: piSys, Notify: (&outbox{}).notify})
	if err := s.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	ok, msg := s.Check()
	if !ok || !strings.HasPrefix(msg, "monitoring USB hot-plug via ") || !strings.HasSuffix(msg, "; 2 USB devices connected") {
		t.Errorf("Check() = %v, %q", ok, msg)
	}
	if err := s.Start(context.Background()); err == nil {
		t.Error("second Start succeeded")
	}
	begin := time.Now()
	stop(t, s)
	if d := time.Since(begin); d > 5*time.Second {
		t.Errorf("Stop took %v", d)
	}
	if _, msg := s.Check(); !strings.HasPrefix(msg, "USB monitoring stopped") {
		t.Errorf("Check after Stop: %q", msg)
	}
}

func TestBatchIsDueAfterQuietOrMaxWait(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)
	b := &batch{quiet: 2 * time.Second, maxWait: 5 * time.Second}
	b.add(change{connected: true}, t0)
	if got := b.due(); !got.Equal(t0.Add(2 * time.Second)) {
		t.Errorf("due %v, want t0+2s", got.Sub(t0))
	}
	// A change every second keeps it gathering, but only up to maxWait.
	for i := 1; i <= 4; i++ {
		b.add(change{connected: true}, t0.Add(time.Duration(i)*time.Second))
	}
	if got := b.due(); !got.Equal(t0.Add(5 * time.Second)) {
		t.Errorf("due %v, want t0+5s (maxWait)", got.Sub(t0))
	}
	cs := b.take()
	if len(cs) != 5 || !b.empty() {
		t.Errorf("took %d, empty %v", len(cs), b.empty())
	}
	t1 := t0.Add(time.Minute)
	b.add(change{connected: false}, t1)
	b.putBack(cs, t1)
	if got := b.take(); len(got) != 6 || !got[0].connected || got[5].connected {
		t.Errorf("after putBack: %d changes, order %v…%v", len(got), got[0].connected, got[5].connected)
	}
}

// TestMessageGolden: the texts users receive.
func TestMessageGolden(t *testing.T) {
	kb := usb.Device{Path: piPCI + "/usb1/1-1/1-1.3", Port: "1-1.3", VendorID: "046d", ProductID: "c31c",
		Manufacturer: "Logitech", Product: "USB Keyboard"}
	uno := usb.Device{Port: "1-1.2.1", VendorID: "2341", ProductID: "0043", Manufacturer: "Arduino (www.arduino.cc)",
		Serial: "85736323838351F0B1C1"}
	many := make([]change, 25)
	for i := range many {
		many[i] = change{connected: i%2 == 0, dev: usb.Device{Port: "1-1." + string(rune('a'+i)), VendorID: "1a86", ProductID: "7523"}}
	}
	got := strings.Join([]string{
		message([]change{{connected: true, dev: kb}}),
		message([]change{{connected: false, dev: kb}}),
		message([]change{{connected: true, dev: kb}, {connected: false, dev: uno}, {connected: true, offline: true, dev: uno}}),
		message(many),
	}, "\n\n") + "\n"
	path := filepath.Join("testdata", "notifications.golden")
	if *update {
		os.MkdirAll("testdata", 0o755)
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test -update creates it)", err)
	}
	if got != string(want) {
		t.Errorf("notifications differ (go test -update rewrites)\ngot:\n%s\nwant:\n%s", got, want)
	}
}

// TestStartWithTheSameDevicesWritesNothing: the list is written when it
// changes (the first start, a device plugged in while stopped), not at
// every start, which would cost a board two synced writes before it is
// ready.
func TestStartWithTheSameDevicesWritesNothing(t *testing.T) {
	sys, st, out := copySys(t), &memStore{}, &outbox{}
	stop(t, start(t, newFakeListener(), out, Options{SysRoot: sys, Store: st}))
	if n := st.saved(); n != 1 {
		t.Fatalf("first start: %d saves, want 1", n)
	}
	stop(t, start(t, newFakeListener(), out, Options{SysRoot: sys, Store: st}))
	if n := st.saved(); n != 1 {
		t.Errorf("a start with the same devices saved the list again (%d saves)", n)
	}
	plug(t, sys, "devices/platform/scb/fd500000.pcie/pci0000:00/0000:00:00.0/0000:01:00.0/usb1/1-1/1-1.3", true)
	stop(t, start(t, newFakeListener(), out, Options{SysRoot: sys, Store: st}))
	if n := st.saved(); n != 2 {
		t.Errorf("a start with a device plugged while stopped: %d saves, want 2", n)
	}
	var saved storedState
	if err := json.Unmarshal(st.data, &saved); err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(ports(saved.Devices), " "); got != "1-1 1-1.3 1-1.4" {
		t.Errorf("saved ports %q", got)
	}
}
