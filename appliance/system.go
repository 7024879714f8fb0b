package appliance

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"strings"
	"time"

	"github.com/perchhq/perch/appliance/agent"
	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/channel"
	"github.com/perchhq/perch/appliance/channel/discord"
	"github.com/perchhq/perch/appliance/channel/line"
	"github.com/perchhq/perch/appliance/channel/slack"
	"github.com/perchhq/perch/appliance/channel/telegram"
	webchan "github.com/perchhq/perch/appliance/channel/web"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/devices"
	"github.com/perchhq/perch/appliance/gateway"
	"github.com/perchhq/perch/appliance/mqtt"
	"github.com/perchhq/perch/appliance/pidfile"
	"github.com/perchhq/perch/appliance/provider"
	"github.com/perchhq/perch/appliance/sampler"
	"github.com/perchhq/perch/appliance/sandbox"
	"github.com/perchhq/perch/appliance/schedule"
	"github.com/perchhq/perch/appliance/tools"
	"github.com/perchhq/perch/drivers/sensor"
	"github.com/perchhq/perch/drivers/usb"
	"github.com/perchhq/perch/store"
	"github.com/perchhq/perch/systemd"
	"github.com/perchhq/perch/web"
)

// System holds every service of a running Perch; fields are nil for the
// parts a command does not need.
type System struct {
	Cfg   *config.Config
	Log   *slog.Logger
	Store *store.DB
	Bus   *bus.Bus
	Tools *tools.Registry
	// NoProv says why no provider was configured at start (nil when one
	// was). The provider in use is the agent's: the first-run setup can
	// replace it, so it is not kept here.
	NoProv    error
	Agent     *agent.Loop
	Cron      *schedule.Service
	Channels  *channel.Manager
	Heartbeat *schedule.Heartbeat
	HTTP      *gateway.Server
	Checks    *gateway.Checks
	Watchdog  *systemd.Watchdog
	Sensors   *sensor.Set
	Devices   *devices.Service
	Sandbox   *sandbox.Runner
	MQTT      *mqtt.Link // nil unless mqtt.enabled
	// Web is the page's channel and event stream; Sampler reads the
	// sensors into the history. Both exist in the gateway only.
	Web     *webchan.Channel
	Sampler *sampler.Sampler
	// USBListen and USBSysRoot, when set before BuildGateway, replace the
	// kernel's USB events and sysfs for the device service (a test's
	// recorded uevents and sysfs tree).
	USBListen  func() (usb.Listener, error)
	USBSysRoot string
	// Listener, when set before BuildGateway, is the socket the HTTP
	// server takes (gateway.Bind, opened before the rest was built);
	// otherwise BuildGateway binds gateway.host and gateway.port itself.
	Listener net.Listener
	// SetupCode is the first-run setup code the page asks for ("" when a
	// provider is configured), repeated in the start-up banner.
	SetupCode string

	// outlets are the registered channels by name: jobs deliver through
	// them directly, so a failed delivery is a failed run.
	outlets map[string]channel.Channel

	// webhooks are the platforms' routes for the gateway's listener,
	// registered on it once it exists.
	webhooks webhookRoutes

	pidKey     string
	pidWritten bool
	failed     chan error // see Failed
	stopTrim   context.CancelFunc
	probeTimer *time.Timer // starts the sandbox's cgroup probe (Start)
	trimDone   chan struct{}
}

// answerFirstFor bounds how long the gateway's announcement (pid file,
// systemd) waits for the first answer to a client that connected during
// the start: one that sends nothing does not hold it up longer.
const answerFirstFor = 100 * time.Millisecond

// sandboxProbeDelay is how long after the gateway serves the sandbox looks
// for where commands get their cgroups.
const sandboxProbeDelay = 200 * time.Millisecond

// NewCore opens the store and builds the provider, tools, agent loop and
// scheduler: everything a turn needs, without listeners. A provider that
// cannot be created is an error; one that is merely not configured leaves
// the system degraded (NoProv says why).
func NewCore(ctx context.Context, cfg *config.Config, log *slog.Logger) (*System, error) {
	s := &System{Cfg: cfg, Log: log, Bus: bus.New(128)}
	// The config dir first: the workspace usually lies inside it, and
	// making the workspace first would create the config dir 0755.
	if err := os.MkdirAll(cfg.Dir(), 0o700); err != nil {
		return nil, fmt.Errorf("config dir %s: %w", cfg.Dir(), err)
	}
	ws := cfg.WorkspaceDir()
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return nil, fmt.Errorf("workspace %s: %w; check agents.defaults.workspace", ws, err)
	}
	// The provider and the sandbox need neither the database nor anything
	// else built here: build them while the store opens, on the other core
	// of a board.
	type built struct {
		prov *provider.Client
		err  error
	}
	provDone := make(chan built, 1)
	go func() {
		p, err := provider.FromConfig(ctx, cfg, log)
		provDone <- built{p, err}
	}()
	type confined struct {
		runner *sandbox.Runner
		err    error
	}
	sandboxDone := make(chan confined, 1)
	go func() {
		// Every shell command (exec tool, cron command jobs) runs confined;
		// the config file and the database are never readable from it.
		r, err := sandbox.New(sandbox.Options{
			Workspace:      ws,
			Timeout:        time.Duration(cfg.Tools.Exec.TimeoutSeconds) * time.Second,
			RequireSandbox: cfg.Tools.Exec.RequireSandbox,
			User:           cfg.Tools.Exec.User,
			Secrets:        []string{cfg.Path(), cfg.DBPath(), store.JournalPath(cfg.DBPath()), cfg.PIDPath()},
			Log:            log,
		})
		sandboxDone <- confined{r, err}
	}()
	db, err := store.Open(cfg.DBPath(), store.Options{LockHolder: func() string {
		if p, err := pidfile.Read(cfg.PIDPath()); err == nil {
			return fmt.Sprintf("pid %d", p.PID)
		}
		return ""
	}, SessionTTL: time.Duration(cfg.Agents.Defaults.SessionTTLDays) * 24 * time.Hour,
		OnWriteError: func(err error) {
			if store.DiskFull(err) {
				log.Error("the database cannot take anything new; chat turns go on while the journal has room: free space on the disk", "err", err)
				return
			}
			if err != nil {
				log.Error("the database cannot take anything new; chat turns go on while the journal has room, and it is tried again every second", "err", err)
				return
			}
			log.Info("the database takes writes again; what waited in the journal is in")
		}})
	pb := <-provDone // before any return: the goroutines end here
	sb := <-sandboxDone
	if err != nil {
		return nil, err
	}
	s.Store = db
	if r := db.Recovered(); r != nil {
		log.Warn("the database was damaged and set aside; a fresh one holds what could be read",
			"damaged_copy", r.DamagedPath, "when", r.At, "reason", r.Reason, "salvaged", r.Salvaged.String())
	}
	if n := db.Replayed(); n > 0 {
		log.Info("the last run stopped before the database took its latest messages; they were applied from the journal", "appends", n)
	}
	if err := db.WriteError(); err != nil {
		log.Error("the database cannot take anything new; the gateway serves, and chat turns go on while the journal has room: free space on the disk", "err", err)
	}
	if c := db.Compaction(); c != nil {
		log.Info("database compacted", "before_bytes", c.Before, "after_bytes", c.After, "took", c.Duration, "error", c.Error)
	}
	prov, err := pb.prov, pb.err
	switch {
	case err == nil:
	case errors.Is(err, provider.ErrNoProvider):
		s.NoProv = err
	default:
		db.Close()
		return nil, err
	}
	s.Tools = tools.NewRegistry(log)
	d := cfg.Agents.Defaults
	opts := agent.Options{
		Store: db, Tools: s.Tools, Bus: s.Bus, Log: log, Workspace: ws, NoProvider: s.NoProv,
		MaxToolIterations:  d.MaxToolIterations,
		MaxConcurrentTurns: d.MaxConcurrentTurns,
		MaxQueuedTurns:     d.MaxQueuedTurns,
		TurnTimeout:        time.Duration(d.TurnTimeoutSeconds) * time.Second,
		HistoryLimit:       d.HistoryLimit,
	}
	if prov != nil {
		opts.Provider = prov
	}
	s.Agent = agent.New(opts)
	loc, err := cfg.Location()
	if err != nil {
		db.Close()
		return nil, err
	}
	s.Cron = schedule.New(schedule.Options{Store: db, Location: loc, Run: s.runJob, Log: log, CheckCommand: sandbox.CheckCommand,
		CheckChannel: schedule.ChannelCheck(s.deliveryChannels), OnChange: s.jobsChanged})
	if sb.err != nil {
		db.Close()
		return nil, sb.err
	}
	s.Sandbox = sb.runner
	// Validation only: no bus is opened until a sensor is read.
	s.Sensors, err = sensor.NewSet(cfg.Sensors.Parts, sensor.Options{})
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("config: %w", err)
	}
	s.registerTools()
	s.registerChatCommands()
	return s, nil
}

// registerTools offers the model every tool this build has.
func (s *System) registerTools() {
	r := s.Tools
	cfg := s.Cfg
	for _, t := range tools.NewFS(tools.FSOptions{Dir: cfg.WorkspaceDir(), Restrict: cfg.Agents.Defaults.RestrictToWorkspace}) {
		r.Register(t)
	}
	web := cfg.Tools.Web
	r.Register(tools.NewWebSearch(tools.WebSearchOptions{
		APIKey: web.Search.APIKey.Value(), APIBase: web.Search.APIBase, HTMLBase: web.Search.HTMLBase,
	}))
	r.Register(tools.NewWebFetch(tools.WebFetchOptions{AllowPrivate: web.Fetch.AllowPrivate}))
	r.Register(tools.NewMessage(tools.MessageOptions{Send: s.Bus.PublishOutbound, Channels: s.deliveryChannels, CheckChat: checkPageChat}))
	r.Register(tools.NewCanvas())
	r.Register(tools.NewImage(tools.ImageOptions{Generator: currentImages{s}}))
	r.Register(tools.NewSubagent(s.Agent.Subagents()))
	r.Register(tools.NewSpawn(s.Agent.Subagents()))
	r.Register(tools.NewCron(s.Cron, s.deliveryTarget))
	r.Register(tools.NewExec(s.Sandbox))
	loc, _ := cfg.Location() // NewCore checked it
	for _, t := range tools.NewHardware(s.Sensors, s.Store, loc) {
		r.Register(t)
	}
}

// Close releases what NewCore opened (for commands that do not Start).
func (s *System) Close() error {
	if s.Sandbox != nil {
		s.Sandbox.EndProbe()
	}
	if s.Store != nil {
		return s.Store.Close()
	}
	return nil
}

// BuildGateway adds the channels, heartbeat and HTTP server and binds the
// listener (unless Listener is set), so a busy port fails before anything
// starts.
func (s *System) BuildGateway() error {
	cfg := s.Cfg
	s.Channels = channel.NewManager(s.Bus, s.Log)
	s.Channels.UseHub(s.newHub())
	if err := s.addChannels(); err != nil {
		return err
	}
	s.buildWeb()
	if cfg.Heartbeat.Enabled {
		s.Heartbeat = schedule.NewHeartbeat(schedule.HeartbeatOptions{
			Interval:  time.Duration(cfg.Heartbeat.Interval) * time.Millisecond,
			Workspace: cfg.WorkspaceDir(),
			Ask: func(ctx context.Context, prompt string) (string, error) {
				return s.Agent.Ask(ctx, "heartbeat", prompt)
			},
			Deliver: func(text string) {
				ch, chat := s.noticeTarget()
				s.Bus.PublishOutbound(bus.Outbound{Channel: ch, ChatID: chat, Text: text})
			},
			Log: s.Log,
		})
	}
	s.Devices = devices.New(devices.Options{
		Enabled: cfg.Devices.Enabled, MonitorUSB: cfg.Devices.MonitorUSB,
		Notify: s.Bus.PublishOutbound, LastActive: s.noticeTarget, Store: s.Store, Log: s.Log,
		Listen: s.USBListen, SysRoot: s.USBSysRoot,
	})
	if err := s.addMQTT(); err != nil {
		return err
	}
	s.Checks = gateway.NewChecks()
	s.registerChecks()
	s.pidKey = pidfile.NewKey()
	s.HTTP = gateway.New(gateway.Options{
		Host: cfg.Gateway.Host, Port: cfg.Gateway.Port, Token: cfg.Gateway.APIToken, Log: s.Log, ProofKey: s.pidKey,
		AllowedHosts: cfg.Gateway.AllowedHosts,
		WriteTimeout: time.Duration(cfg.Agents.Defaults.TurnTimeoutSeconds)*time.Second + 30*time.Second,
		NotFoundHint: s.webhookHint,
	})
	s.webhooks.attach(s.HTTP)
	s.HTTP.RegisterCore(gateway.Deps{
		Agent: s.Agent, Store: s.Store, Checks: s.Checks, Workspace: cfg.WorkspaceDir(),
		StatusExtra: s.statusExtra,
		Answered:    s.chatAnswered,
		ServiceStatus: func(ctx context.Context) (string, error) {
			return systemd.UnitStatus(ctx, systemd.UnitName)
		},
		Logs: func(ctx context.Context) (string, error) {
			out, err := systemd.Logs(ctx, systemd.UnitName, systemd.DefaultLogEntries)
			return offSystemdNote(os.LookupEnv) + out, err
		},
	})
	// systemd restarts a gateway whose store stops answering.
	s.Watchdog = systemd.NewWatchdog(func() bool { return s.Store.Ping() == nil })
	s.registerAdminAPI()
	s.registerChannelsAPI()
	s.connectPage()
	page := web.Register(s.HTTP, web.Deps{Setup: pageSetup{s}, Log: s.Log, Token: cfg.Gateway.APIToken.Value,
		CodeWhere: web.CodeWhere(os.LookupEnv, os.Stderr), OnSetup: s.Web.RefreshStatus})
	s.SetupCode = page.SetupCode()
	if s.Listener != nil {
		s.HTTP.ListenOn(s.Listener)
		return nil
	}
	return s.HTTP.Listen()
}

// platforms are the chat platforms this build runs.
var platforms = []channel.Platform{
	discord.Platform,
	line.Platform,
	slack.Platform,
	telegram.Platform,
}

// addChannels registers the enabled channels of the platform table. A
// channel enabled with an empty credential is skipped with a warning: a
// half-filled section must not keep the appliance from starting.
func (s *System) addChannels() error {
	for _, sec := range s.Cfg.Channels.Sections() {
		if !sec.Enabled {
			continue
		}
		if !sec.Ready() {
			s.Log.Warn("channel enabled without credentials; skipped", "channel", sec.Name, "set", strings.Join(sec.Missing(), " and "))
			continue
		}
		warnOpen(s.Log, sec)
		p, ok := channel.Lookup(platforms, sec.Name)
		if !ok {
			s.Channels.Unavailable(sec.Name, fmt.Sprintf("this build of perch has no %s channel; disable channels.%s.enabled or upgrade perch", sec.Name, sec.Name))
			s.Log.Warn("channel not available in this build", "channel", sec.Name)
			continue
		}
		c, err := p.New(channel.Deps{
			Section: sec, Bus: s.Bus, Store: s.Store, Log: s.Log.With("channel", sec.Name), Workspace: s.Cfg.WorkspaceDir(),
			Hub: s.Channels.Hub(), Routes: &s.webhooks, GatewayHost: s.Cfg.Gateway.Host, GatewayPort: s.Cfg.Gateway.Port,
			TurnTimeout: time.Duration(s.Cfg.Agents.Defaults.TurnTimeoutSeconds) * time.Second,
			IsCommand:   s.Agent.IsChatCommand,
		})
		if err != nil {
			return fmt.Errorf("channel %s: %w; fix the channels.%s section of the config", sec.Name, err, sec.Name)
		}
		s.register(c)
	}
	return nil
}

func (s *System) registerChecks() {
	// A database that was damaged and replaced still serves: the check is
	// ok and says so, until the owner deletes the damaged copy.
	s.Checks.Register("store", func(context.Context) (bool, string) {
		ok, msg := s.Store.Health()
		if r := s.Store.Recovered(); ok && r != nil {
			msg = r.Detail()
		}
		return ok, msg
	}, gateway.PublicMessage(func(ok bool) string {
		if !ok && store.DiskFull(s.Store.WriteError()) {
			return "the database cannot store anything new: the disk is full"
		}
		if !ok && s.Store.WriteError() != nil {
			return "the database cannot store anything new"
		}
		if !ok {
			return "the database does not answer"
		}
		if r := s.Store.Recovered(); r != nil {
			return r.Message()
		}
		return "the database answers"
	}))
	s.Checks.Register("provider", func(context.Context) (bool, string) {
		p, err := s.Agent.Provider()
		if p == nil {
			return false, err.Error()
		}
		return true, fmt.Sprintf("%s, model %s", p.Name(), p.Model())
	}, gateway.PublicMessage(func(ok bool) string {
		if ok {
			return "a provider is configured"
		}
		return "no provider is configured; set one up on the web page or in the config file"
	}))
	for name, fn := range s.Channels.Checks() {
		s.Checks.Register(name, fn)
	}
	// The sandbox fails the check only under tools.exec.require_sandbox.
	s.Checks.Register("sandbox", func(context.Context) (bool, string) { return s.Sandbox.Status() })
	// Hardware informs; it never makes the gateway unready: a missing bus or
	// sensor must not stop the board answering chat.
	s.Checks.Register("sensors", func(context.Context) (bool, string) { return s.Sensors.Check() })
	s.Checks.Register("devices", func(context.Context) (bool, string) { return s.Devices.Check() })
	if s.Sampler != nil {
		s.Checks.Register("sensor history", func(context.Context) (bool, string) { return s.Sampler.Check() })
	}
}

// Start starts the services in order (agent, channels, cron, heartbeat,
// devices) and serves HTTP last, so a request never meets a half-built
// system.
func (s *System) Start(ctx context.Context) error {
	steps := []struct {
		name string
		fn   func(context.Context) error
	}{
		{"agent", s.Agent.Start},
		{"channels", s.Channels.Start},
		{"cron", s.Cron.Start},
	}
	if s.Heartbeat != nil {
		steps = append(steps, struct {
			name string
			fn   func(context.Context) error
		}{"heartbeat", s.Heartbeat.Start})
	}
	steps = append(steps, struct {
		name string
		fn   func(context.Context) error
	}{"devices", s.Devices.Start}, struct {
		name string
		fn   func(context.Context) error
	}{"sensor sampler", s.Sampler.Start})
	for _, st := range steps {
		if err := st.fn(ctx); err != nil {
			s.Stop(context.WithoutCancel(ctx))
			return err
		}
	}
	s.HTTP.SetReady(true)
	s.failed = make(chan error, 1)
	waiting := s.HTTP.Waiting()
	go func() { // ends when Serve does: at Stop, or when the listener fails
		if err := s.HTTP.Serve(); err != nil {
			s.failed <- err
		}
	}()
	// Clients that connected while the gateway started (a health probe
	// polling /ready, a page reloading after an upgrade) wait in the listen
	// queue: answer them first. The bookkeeping below (the pid file,
	// systemd), which nobody is waiting for, creates and renames a file
	// through the file system's journal; beside their first answer it
	// took a board's other core from it.
	if waiting {
		select {
		case <-s.HTTP.Answered():
		case <-time.After(answerFirstFor):
		case <-ctx.Done():
		}
	}
	// The pid file announces a gateway that is ready to take requests.
	if err := pidfile.Write(s.Cfg.PIDPath(), s.HTTP.Addr(), s.pidKey); err != nil {
		s.Log.Warn("cannot write the pid file; CLI commands will not find this gateway", "path", s.Cfg.PIDPath(), "err", err)
	} else {
		s.pidWritten = true
	}
	if _, err := systemd.Ready(); err != nil {
		s.Log.Warn("sd_notify READY failed", "err", err)
	}
	if err := s.Watchdog.Start(ctx); err != nil {
		s.Log.Warn("systemd watchdog not started", "err", err)
	}
	// Where commands get their cgroups is found a moment after the gateway
	// serves: the probe costs a board's cores a millisecond of the
	// kernel's time, which the first requests (a health probe, the page
	// reloading) need more. A command asked for sooner starts it itself.
	if s.Sandbox != nil {
		s.probeTimer = time.AfterFunc(sandboxProbeDelay, s.Sandbox.StartProbe)
	}
	tctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	s.stopTrim, s.trimDone = cancel, make(chan struct{})
	go func() { defer close(s.trimDone); s.trimWhenIdle(tctx) }()
	return nil
}

// Failed delivers the HTTP server's error when it stops serving by itself
// (not through Stop); the caller must then Stop the system, which nobody
// can reach any more.
func (s *System) Failed() <-chan error { return s.failed }

// Stop shuts down from the outside in: stop accepting requests, cancel the
// agent's turns, stop the HTTP server, then heartbeat, cron, agent,
// channels; last the store.
func (s *System) Stop(ctx context.Context) error {
	var errs []error
	note := func(what string, err error) {
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", what, err))
		}
	}
	systemd.Stopping()
	if s.stopTrim != nil {
		s.stopTrim()
		<-s.trimDone
	}
	if s.probeTimer != nil {
		s.probeTimer.Stop()
	}
	if s.Watchdog != nil {
		note("watchdog", s.Watchdog.Stop(ctx))
	}
	var httpDone chan error
	if s.Web != nil {
		s.Web.CloseStreams()
	}
	if s.HTTP != nil {
		s.HTTP.SetReady(false)
		httpDone = make(chan error, 1)
		go func() { httpDone <- s.HTTP.Stop(ctx) }() // closes the listener at once
	}
	agentDone := make(chan error, 1)
	go func() { agentDone <- s.Agent.Stop(ctx) }() // cancels running turns
	if httpDone != nil {
		note("http", <-httpDone)
	}
	if s.Devices != nil {
		note("devices", s.Devices.Stop(ctx))
	}
	if s.Sampler != nil {
		note("sensor sampler", s.Sampler.Stop(ctx))
	}
	if s.Heartbeat != nil {
		note("heartbeat", s.Heartbeat.Stop(ctx))
	}
	note("cron", s.Cron.Stop(ctx))
	note("agent", <-agentDone)
	if s.Channels != nil {
		note("channels", s.Channels.Stop(ctx))
	}
	if s.pidWritten {
		os.Remove(s.Cfg.PIDPath())
	}
	if s.Sandbox != nil {
		s.Sandbox.EndProbe()
	}
	note("store", s.Store.Close())
	return errors.Join(errs...)
}

// offSystemdNote heads /admin/logs for a gateway systemd did not start
// (`make run`, `perch gateway` in a terminal): the journal then holds only
// what perch.service logged, if anything, and this gateway's own log is on
// its standard error.
func offSystemdNote(lookup func(string) (string, bool)) string {
	if systemd.LogsToJournal(lookup, os.Stderr) {
		return ""
	}
	return "This gateway's log does not go to the journal (systemd did not start it) but to its standard error: its terminal, unless redirected. Below is what the journal holds for " + systemd.UnitName + ".\n"
}

func (s *System) statusExtra(_ context.Context, out map[string]any) {
	if s.Channels != nil {
		out["channels"] = s.Channels.Status()
	}
	out["sensors"] = s.Sensors.Status()
	if s.Devices != nil {
		devs := s.Devices.Devices()
		if devs == nil {
			devs = []usb.Device{}
		}
		out["devices"] = devs
		_, out["devices_monitor"] = s.Devices.Check()
	}
	if s.MQTT != nil {
		out["mqtt"] = s.MQTT.Status()
	}
	s.dashboardStatus(out)
}
