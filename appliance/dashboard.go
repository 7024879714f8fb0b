package appliance

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/perchhq/perch/appliance/boardapi"
	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/channel"
	webchan "github.com/perchhq/perch/appliance/channel/web"
	"github.com/perchhq/perch/appliance/devices"
	"github.com/perchhq/perch/appliance/gateway"
	"github.com/perchhq/perch/appliance/sampler"
	"github.com/perchhq/perch/appliance/tools"
	"github.com/perchhq/perch/appliance/version"
	"github.com/perchhq/perch/drivers/usb"
)

// register adds a channel to the manager and to the outlets jobs deliver
// through.
func (s *System) register(c channel.Channel) {
	s.Channels.Register(c)
	if s.outlets == nil {
		s.outlets = map[string]channel.Channel{}
	}
	s.outlets[c.Name()] = c
}

// buildWeb makes the page's channel and the sensor sampler. It runs after
// the chat channels are added, before the device service.
func (s *System) buildWeb() {
	cfg := s.Cfg
	s.Web = webchan.New(webchan.Options{
		Store: s.Store, HistoryLimit: cfg.Agents.Defaults.HistoryLimit,
		Status: s.pageStatus, Log: s.Log.With("channel", webchan.Name),
	})
	s.register(s.Web)
	s.Sampler = sampler.New(sampler.Options{
		Sensors: s.Sensors, Store: s.Store, Log: s.Log,
		Every:    time.Duration(cfg.Sensors.SampleSeconds) * time.Second,
		OnSample: func(l []sampler.Latest) { s.Web.Publish("sensors", l) },
	})
}

// USBEvent is the page's "usb" event: one device came or went, and the
// list as it is now.
type USBEvent struct {
	Connected bool         `json:"connected"`
	Offline   bool         `json:"offline,omitempty"`
	Device    usb.Device   `json:"device"`
	Name      string       `json:"name"`
	Devices   []usb.Device `json:"devices"`
}

// connectPage feeds the page's event stream from the device service and
// adds the page's routes; it runs once the HTTP server exists.
func (s *System) connectPage() {
	s.Devices.Observe(func(e devices.Event) {
		list := s.Devices.Devices()
		if list == nil {
			list = []usb.Device{}
		}
		s.Web.Publish("usb", USBEvent{Connected: e.Connected, Offline: e.Offline, Device: e.Device, Name: e.Device.Name(), Devices: list})
	})
	s.Web.Register(s.HTTP)
	loc, _ := s.Cfg.Location() // NewCore checked it
	boardapi.Register(s.HTTP, boardapi.Deps{Sensors: s.Sensors, Sampler: s.Sampler, History: s.Store, ScanReport: tools.ScanReport, Location: loc})
}

// jobsChanged tells open pages that the schedules changed (the scheduler
// calls it with its lock held: publishing never blocks).
func (s *System) jobsChanged() {
	if w := s.Web; w != nil {
		w.Publish("jobs", struct{}{})
	}
}

// chatAnswered shows an exchange of a page's chat in the other pages open
// on it.
func (s *System) chatAnswered(in bus.Inbound, asked time.Time, reply string, answered time.Time, page string) {
	if w := s.Web; w != nil {
		w.Exchange(in, asked, reply, answered, page)
	}
}

// checkPageChat refuses a page chat id no page can open.
func checkPageChat(channel, chatID string) error {
	if channel == webchan.Name && !webchan.ValidChat(chatID) {
		return fmt.Errorf("%q is not a page chat (1-64 letters, digits, '_', '.' or '-')", chatID)
	}
	return nil
}

// deliveryChannels are the channels a job may deliver to: the running
// gateway's, else those the config enables.
func (s *System) deliveryChannels() []string {
	if s.Channels != nil {
		return s.Channels.Names()
	}
	return s.Cfg.DeliveryChannels()
}

// deliveryTarget is where a job added from a conversation nobody reads
// later (/chat without a channel, perch agent) delivers: the trusted
// one-to-one chat on a chat platform that spoke last, else the web page
// chat used last, else the page's default chat, which every browser opens
// first. A channel open to anyone is passed over: who spoke there is
// nobody the owner chose, and an owner's reminder (a command's output with
// it) went to a stranger. So is a group, whose members would read it.
func (s *System) deliveryTarget() (channelName, chatID string) {
	avail := s.deliveryChannels()
	web := ""
	if routes := s.Agent.Routes(); len(routes) > 0 {
		// The trusted one-to-one chats, newest first: never a group, whose
		// other members would read the owner's job.
		for _, r := range routes {
			if !slices.Contains(avail, r[0]) || s.openToStrangers(r[0]) {
				continue
			}
			if r[0] != webchan.Name {
				return r[0], r[1]
			}
			if web == "" && webchan.ValidChat(r[1]) {
				web = r[1]
			}
		}
		if web == "" {
			web = webchan.DefaultChat
		}
		return webchan.Name, web
	}
	// A database from before the chats were kept: the newest sessions.
	if sessions, err := s.Store.Sessions(); err == nil { // most recent first
		for _, ss := range sessions {
			if ss.ChatID == "" || bus.IsInternal(ss.Channel) || !slices.Contains(avail, ss.Channel) || s.openToStrangers(ss.Channel) {
				continue // the owner's job must not go to a stranger
			}
			if ss.Channel != webchan.Name {
				return ss.Channel, ss.ChatID
			}
			if web == "" && webchan.ValidChat(ss.ChatID) {
				web = ss.ChatID
			}
		}
	}
	if web == "" {
		web = webchan.DefaultChat
	}
	return webchan.Name, web
}

// noticeTarget is where device notices and heartbeat results go: the
// trusted one-to-one chat that spoke last, else the page's default chat,
// where they wait unread.
func (s *System) noticeTarget() (channelName, chatID string) {
	if ch, chat := s.Agent.LastActive(s.openToStrangers); ch != "" {
		return ch, chat
	}
	return webchan.Name, webchan.DefaultChat
}

// openToStrangers reports whether anyone may talk on the channel with the
// restricted tools (allow_from empty, allow_all_tools off): who spoke
// there last is nobody the owner chose.
func (s *System) openToStrangers(ch string) bool {
	if s.Channels != nil {
		return s.Channels.Hub().Restricted(ch)
	}
	// No gateway here (perch agent, cron add): the config says.
	sec, ok := s.Cfg.Channels.Section(ch)
	return ok && sec.Enabled && len(sec.AllowFrom) == 0 && !sec.AllowAllTools
}

// sendTo delivers a job's result on its channel and reports whether it
// arrived, so a failed delivery is recorded as a failed run. When the
// platform does not take it for now (down, rate limiting) the message is
// kept and sent when the platform answers again, as replies are: waiting
// is true. A reminder was lost to an outage of a few seconds. Without a
// gateway (tests of the core) it can only queue it for a dispatcher.
func (s *System) sendTo(ctx context.Context, out bus.Outbound) (waiting bool, err error) {
	if s.Channels == nil {
		return false, s.Bus.PublishOutbound(out)
	}
	c, ok := s.outlets[out.Channel]
	if !ok {
		return false, fmt.Errorf("channel %s is not enabled now (enabled: %s)", out.Channel, strings.Join(s.Channels.Names(), ", "))
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	err = c.Send(sctx, out)
	if k := channel.KindOf(err); err != nil && (k == channel.Transient || k == channel.RateLimited) && s.Channels.Hub().Keep(out, err) {
		return true, nil
	}
	return false, err
}

// pageStatus is the page's "status" event: readiness with every check's
// message (the stream is authenticated), the figures of /admin/status that
// change, and the state of the channels and the MQTT link.
func (s *System) pageStatus(ctx context.Context) any {
	checks, ok := s.Checks.Run(ctx)
	list := make([]gateway.CheckResult, 0, len(checks))
	for _, c := range checks {
		list = append(list, c)
	}
	slices.SortFunc(list, func(a, b gateway.CheckResult) int { return strings.Compare(a.Name, b.Name) })
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	out := map[string]any{
		"ready":          ok && s.HTTP.IsReady(),
		"checks":         list,
		"version":        version.Get().Version,
		"uptime":         gateway.FormatUptime(s.HTTP.Uptime()),
		"uptime_seconds": int64(s.HTTP.Uptime() / time.Second),
		"memory_mb":      rssMB(),
		"heap_mb":        float64(ms.HeapInuse*10/(1<<20)) / 10,
		"goroutines":     runtime.NumGoroutine(),
		"database_bytes": s.Store.Size(),
		"pages":          s.Web.Pages(),
	}
	if p, err := s.Agent.Provider(); p != nil {
		out["provider"], out["model"] = p.Name(), p.Model()
	} else {
		out["provider_error"] = err.Error()
	}
	s.statusExtra(ctx, out)
	return out
}

// dashboardStatus adds to /admin/status what the page's System panel
// shows besides the core figures.
func (s *System) dashboardStatus(out map[string]any) {
	if d, err := diskSpace(s.Cfg.Dir()); err == nil {
		out["disk"] = d
	}
	if r := s.Store.Recovered(); r != nil {
		out["database_recovered"] = map[string]string{"message": r.Message(), "detail": r.Detail()}
	}
	if s.Sampler != nil {
		out["sample_seconds"] = int(s.Sampler.Every() / time.Second)
	}
	if s.Web != nil {
		out["pages"] = s.Web.Pages()
	}
}

// Disk is the space of the partition holding the data directory.
type Disk struct {
	Path       string `json:"path"`
	FreeBytes  uint64 `json:"free_bytes"`
	TotalBytes uint64 `json:"total_bytes"`
}

// rssMB is the resident set size in MiB, one decimal.
func rssMB() float64 {
	data, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(data))
	if len(f) < 2 {
		return 0
	}
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return float64(pages*int64(os.Getpagesize())*10/(1<<20)) / 10
}
