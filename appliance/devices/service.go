package devices

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"sync"
	"time"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/drivers/usb"
)

// Store keeps the device list between runs, so that devices plugged or
// unplugged while Perch was stopped are reported at the next start. The
// service owns the encoding; the store keeps the bytes.
type Store interface {
	// LoadDevices returns what SaveDevices stored last, or nil and no error
	// when nothing was stored yet.
	LoadDevices() ([]byte, error)
	// SaveDevices replaces the stored bytes.
	SaveDevices(data []byte) error
}

// Options configure the service. Zero values are the defaults.
type Options struct {
	// Enabled and MonitorUSB are the config's devices.enabled and
	// devices.monitor_usb.
	Enabled    bool
	MonitorUSB bool
	// Notify sends a notification (bus.PublishOutbound). Required when
	// monitoring.
	Notify func(bus.Outbound) error
	// LastActive names the chat that spoke last; "" means none, and the
	// notification is skipped (the device list is still kept).
	LastActive func() (channel, chatID string)
	// Store persists the device list; nil keeps it in memory only.
	Store Store
	// Log receives the service's log lines; nil means slog.Default().
	Log *slog.Logger
	// SysRoot is where sysfs is mounted (default "/sys").
	SysRoot string
	// Listen opens the event source; nil means usb.Listen.
	Listen func() (usb.Listener, error)
	// Quiet is how long a burst must be silent before its notification goes
	// out (default 2 s); MaxWait bounds the wait from the burst's first
	// change (default 10 s).
	Quiet, MaxWait time.Duration
	// RetryDelay is the first wait after a failed Notify (default 2 s,
	// doubling to a minute).
	RetryDelay time.Duration
}

// Service watches USB devices come and go and tells the last active chat.
type Service struct {
	opts Options
	log  *slog.Logger

	mu      sync.Mutex
	devices map[string]usb.Device // by sysfs path
	status  string
	running bool

	observers []func(Event)

	// saved is what the store holds: a list that has not changed is not
	// written again (a start with the same devices plugged writes nothing,
	// which spares the SD card two synced writes and the start their time).
	saved []byte

	// Set by Start, used by Stop.
	listener usb.Listener
	stop     chan struct{}
	done     chan struct{}
}

// New returns a service; nothing runs until Start.
func New(opts Options) *Service {
	if opts.Log == nil {
		opts.Log = slog.Default()
	}
	if opts.SysRoot == "" {
		opts.SysRoot = usb.DefaultSysRoot
	}
	if opts.Listen == nil {
		opts.Listen = usb.Listen
	}
	if opts.Quiet <= 0 {
		opts.Quiet = 2 * time.Second
	}
	if opts.MaxWait <= 0 {
		opts.MaxWait = 10 * time.Second
	}
	if opts.MaxWait < opts.Quiet {
		opts.MaxWait = opts.Quiet
	}
	if opts.RetryDelay <= 0 {
		opts.RetryDelay = 2 * time.Second
	}
	return &Service{
		opts:    opts,
		log:     opts.Log.With("service", "devices"),
		devices: map[string]usb.Device{},
		status:  "device service not started",
	}
}

// storedState is the Store's content.
type storedState struct {
	Version int          `json:"version"`
	Devices []usb.Device `json:"devices"`
}

const stateVersion = 1

// Start lists the devices present and starts listening for changes. It
// never fails the gateway's start: a disabled service or a missing event
// source is reported by Check instead.
func (s *Service) Start(ctx context.Context) error {
	switch {
	case runtime.GOOS != "linux":
		s.setStatus("device monitoring is Linux only")
		return nil
	case !s.opts.Enabled:
		s.setStatus("device monitoring is off (devices.enabled is false)")
		return nil
	case !s.opts.MonitorUSB:
		s.setStatus("device monitoring is on, USB monitoring is off (devices.monitor_usb is false)")
		return nil
	}
	if s.done != nil {
		return errors.New("devices: service already started")
	}
	// Listen before enumerating: a device plugged in between is then seen
	// twice (once by each), which the list absorbs, rather than not at all.
	l, lerr := s.opts.Listen()
	present, err := usb.Enumerate(s.opts.SysRoot)
	if err != nil {
		s.log.Warn("cannot list USB devices", "err", err)
	}
	var offline []change
	s.mu.Lock()
	for _, d := range present {
		s.devices[d.Path] = d
	}
	s.mu.Unlock()
	offline = s.diffWithStored(present)
	s.save()
	if lerr != nil {
		s.setStatus(fmt.Sprintf("USB hot-plug events unavailable (%v); %s at start", lerr, countDevices(len(present))))
		s.log.Warn("USB hot-plug monitoring unavailable", "err", lerr)
		return nil
	}
	s.listener = l
	s.stop = make(chan struct{})
	s.done = make(chan struct{})
	s.mu.Lock()
	s.running = true
	s.status = fmt.Sprintf("monitoring USB hot-plug via %s", l.Source())
	s.mu.Unlock()
	events := make(chan usb.Event)
	readerDone := make(chan struct{})
	go s.read(l, events, readerDone)
	go s.loop(events, readerDone, offline)
	return nil
}

// Stop ends monitoring, sends any notification still gathering, and saves
// the device list. It waits for the service's goroutines until ctx ends.
func (s *Service) Stop(ctx context.Context) error {
	if s.done == nil {
		return nil
	}
	select {
	case <-s.stop:
	default:
		close(s.stop)
	}
	s.listener.Close() // unblocks the reader
	select {
	case <-s.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("devices: stop: %w", ctx.Err())
	}
}

// Devices returns the USB devices connected now, sorted by bus and port.
func (s *Service) Devices() []usb.Device {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]usb.Device, 0, len(s.devices))
	for _, d := range s.devices {
		out = append(out, d)
	}
	usb.SortDevices(out)
	return out
}

// Check is the readiness check: always ok (devices never stop the gateway
// serving chat); the message says what is monitored, or why not.
func (s *Service) Check() (bool, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	msg := s.status
	if s.running || len(s.devices) > 0 {
		msg += "; " + countDevices(len(s.devices)) + " connected"
	}
	return true, msg
}

func countDevices(n int) string {
	if n == 1 {
		return "1 USB device"
	}
	return fmt.Sprintf("%d USB devices", n)
}

func (s *Service) setStatus(msg string) {
	s.mu.Lock()
	s.status = msg
	s.mu.Unlock()
}

// read forwards the listener's events to the loop until the listener is
// closed. An overflow becomes a zero Event with Action "resync".
func (s *Service) read(l usb.Listener, out chan<- usb.Event, done chan<- struct{}) {
	defer close(done)
	for {
		ev, err := l.Receive()
		switch {
		case errors.Is(err, usb.ErrClosed):
			return
		case errors.Is(err, usb.ErrOverflow):
			s.log.Warn("USB events were lost; re-reading the device list")
			ev = usb.Event{Action: actionResync}
		case err != nil:
			s.log.Error("USB monitoring stopped", "err", err)
			s.mu.Lock()
			s.running = false
			s.status = fmt.Sprintf("USB monitoring stopped: %v; the device list is as of then", err)
			s.mu.Unlock()
			return
		case ev.Subsystem != "usb" || ev.DevType != "usb_device" || (ev.Action != "add" && ev.Action != "remove"):
			continue // interfaces, driver binds, other subsystems
		}
		select {
		case out <- ev:
		case <-s.stop:
			return
		}
	}
}

const actionResync = "resync"

// loop applies events to the device list and sends the notifications. It
// owns the batch; at stop it sends what is pending once and saves.
func (s *Service) loop(events <-chan usb.Event, readerDone <-chan struct{}, initial []change) {
	defer close(s.done)
	b := &batch{quiet: s.opts.Quiet, maxWait: s.opts.MaxWait}
	now := time.Now()
	for _, c := range initial {
		b.add(c, now)
	}
	s.tell(initial)
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	retry := s.opts.RetryDelay
	var retryAt time.Time // zero: not waiting after a failure
	arm := func() {
		if b.empty() {
			return
		}
		at := b.due()
		if !retryAt.IsZero() && retryAt.After(at) {
			at = retryAt
		}
		timer.Reset(time.Until(at))
	}
	arm()
	for {
		select {
		case ev := <-events:
			cs := s.apply(ev)
			for _, c := range cs {
				b.add(c, time.Now())
			}
			s.tell(cs)
			timer.Stop()
			arm()
		case <-timer.C:
			cs := b.take()
			if err := s.notify(cs); err != nil {
				s.log.Warn("device notification not sent; will retry", "err", err, "retry_in", retry)
				b.putBack(cs, time.Now())
				retryAt = time.Now().Add(retry)
				retry = min(retry*2, time.Minute)
			} else {
				retryAt, retry = time.Time{}, s.opts.RetryDelay
			}
			s.save()
			arm()
		case <-s.stop:
			<-readerDone
			if !b.empty() {
				if err := s.notify(b.take()); err != nil {
					s.log.Warn("device notification lost at shutdown", "err", err)
				}
			}
			s.save()
			s.mu.Lock()
			s.running = false
			s.status = "USB monitoring stopped"
			s.mu.Unlock()
			return
		}
	}
}

// apply updates the device list with one event and returns the changes to
// report: one per device that came or went.
func (s *Service) apply(ev usb.Event) []change {
	if ev.Action == actionResync {
		return s.resync()
	}
	d, ok := usb.DeviceFromEvent(ev, s.opts.SysRoot)
	if !ok || d.IsRootHub() {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old, known := s.devices[d.Path]
	if ev.Action == "add" {
		s.devices[d.Path] = d
		if known && old.ID() == d.ID() {
			return nil // seen already by the enumeration at start
		}
		return []change{{connected: true, dev: d}}
	}
	if known {
		d = old // removal events carry no strings; the add's record has them
	}
	delete(s.devices, d.Path)
	return []change{{connected: false, dev: d}}
}

// resync re-reads the device list after events were lost and reports the
// differences.
func (s *Service) resync() []change {
	present, err := usb.Enumerate(s.opts.SysRoot)
	if err != nil {
		s.log.Warn("cannot list USB devices", "err", err)
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	old := make([]usb.Device, 0, len(s.devices))
	for _, d := range s.devices {
		old = append(old, d)
	}
	cs := diff(old, present, false)
	s.devices = map[string]usb.Device{}
	for _, d := range present {
		s.devices[d.Path] = d
	}
	return cs
}

// diff lists what changed from before to now: removals, then additions.
func diff(before, now []usb.Device, offline bool) []change {
	key := func(d usb.Device) string { return d.Path + "|" + d.ID() + "|" + d.Serial }
	in := map[string]bool{}
	for _, d := range now {
		in[key(d)] = true
	}
	was := map[string]bool{}
	var cs []change
	usb.SortDevices(before)
	for _, d := range before {
		was[key(d)] = true
		if !in[key(d)] {
			cs = append(cs, change{connected: false, offline: offline, dev: d})
		}
	}
	for _, d := range now {
		if !was[key(d)] {
			cs = append(cs, change{connected: true, offline: offline, dev: d})
		}
	}
	return cs
}

// diffWithStored compares the devices present at start with those saved at
// the last stop. Without a saved list (first run) nothing is reported.
func (s *Service) diffWithStored(present []usb.Device) []change {
	if s.opts.Store == nil {
		return nil
	}
	data, err := s.opts.Store.LoadDevices()
	if err != nil {
		s.log.Warn("cannot load the saved device list", "err", err)
		return nil
	}
	if data == nil {
		return nil
	}
	s.mu.Lock()
	s.saved = data
	s.mu.Unlock()
	var st storedState
	if err := json.Unmarshal(data, &st); err != nil || st.Version != stateVersion {
		s.log.Warn("ignoring a saved device list in an unknown format", "err", err, "version", st.Version)
		return nil
	}
	return diff(st.Devices, present, true)
}

func (s *Service) save() {
	if s.opts.Store == nil {
		return
	}
	s.mu.Lock()
	st := storedState{Version: stateVersion, Devices: make([]usb.Device, 0, len(s.devices))}
	for _, d := range s.devices {
		st.Devices = append(st.Devices, d)
	}
	s.mu.Unlock()
	usb.SortDevices(st.Devices)
	data, err := json.Marshal(st)
	s.mu.Lock()
	same := err == nil && bytes.Equal(data, s.saved)
	s.mu.Unlock()
	if same {
		return
	}
	if err == nil {
		err = s.opts.Store.SaveDevices(data)
	}
	if err != nil {
		s.log.Warn("cannot save the device list", "err", err)
		return
	}
	s.mu.Lock()
	s.saved = data
	s.mu.Unlock()
}

// notify sends one notification for cs to the last active chat; with none,
// it logs and drops it, as there is nobody to tell.
func (s *Service) notify(cs []change) error {
	if len(cs) == 0 {
		return nil
	}
	text := message(cs)
	var channel, chat string
	if s.opts.LastActive != nil {
		channel, chat = s.opts.LastActive()
	}
	if channel == "" || s.opts.Notify == nil {
		s.log.Info("USB devices changed; no active chat to tell", "changes", len(cs))
		return nil
	}
	if err := s.opts.Notify(bus.Outbound{Channel: channel, ChatID: chat, Text: text}); err != nil {
		if errors.Is(err, bus.ErrClosed) {
			s.log.Info("device notification dropped: the bus is closed", "changes", len(cs))
			return nil
		}
		return err
	}
	s.log.Info("device notification sent", "channel", channel, "changes", len(cs))
	return nil
}
