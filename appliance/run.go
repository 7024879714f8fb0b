package appliance

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"syscall"
	"time"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/gateway"
	"github.com/perchhq/perch/appliance/pidfile"
	"github.com/perchhq/perch/appliance/version"
)

// RunGateway builds the gateway from cfg, starts it, serves until ctx ends
// (SIGINT, SIGTERM, SIGHUP) and stops it cleanly. banner, when set, receives the
// lines a person needs: the URL and the API token. listening, when set, is
// called before the database is opened and returns once a stop signal
// cancels ctx, so a stop from then on closes the database cleanly. An
// error means start-up
// failed, or the HTTP server failed while running (exit 1 either way, so
// systemd restarts it).
func RunGateway(ctx context.Context, cfg *config.Config, log *slog.Logger, banner io.Writer, listening func()) error {
	if cfg.Absent() {
		log.Warn("no config file; running on built-in defaults", "path", cfg.Path(), "create it with", "perch onboard")
	}
	for _, w := range cfg.Warnings() {
		log.Warn(w)
	}
	if !cfg.Gateway.APIToken.IsSet() {
		// Without a token the API trusts every process on this machine,
		// and the commands the agent runs are processes on this machine:
		// through it they could add jobs, read other sessions' replies or
		// admit a chat sender. With one, they cannot read it.
		log.Warn("gateway.api_token is empty: every process on this machine can use the API, the commands the agent runs included",
			"fix", "set gateway.api_token (perch onboard makes one)")
	}
	start := time.Now()
	// The socket first: a busy port is reported before the database is
	// touched, and a client that connects while the gateway starts (a
	// health probe, the page reloading after an upgrade) waits in the
	// listen queue for its answer instead of being refused.
	ln, err := gateway.Bind(cfg.Gateway.Host, cfg.Gateway.Port)
	if err != nil {
		return portHolder(cfg, err)
	}
	if listening != nil {
		listening()
	}
	sys, err := NewCore(ctx, cfg, log)
	if err != nil {
		ln.Close()
		return err
	}
	sys.Listener = ln
	if sys.NoProv != nil {
		log.Warn("no provider: only offline commands are answered until one is configured", "fix", sys.NoProv.Error())
	}
	if err := sys.BuildGateway(); err != nil {
		ln.Close()
		sys.Close()
		return err
	}
	if err := sys.Start(ctx); err != nil {
		return err
	}
	// Start-up is done: give its pages back (see trimWorkingSet), a
	// moment later, so the trim does not compete with the first requests
	// for the CPU (a board is usually asked at once whether it is ready).
	// Once a turn has run, the pages are in use again: the idle trimmer
	// decides then.
	turns := sys.Agent.Activity()
	go func() {
		select {
		case <-ctx.Done():
		case <-time.After(startTrimDelay):
			if sys.Agent.Activity() == turns && sys.Agent.Stats().Running == 0 {
				if _, err := trimWorkingSet(); err != nil {
					log.Debug("memory: the binary stays mapped in 64 KB chunks", "reason", err)
				}
			}
		}
	}()
	url := "http://" + pidfile.DialAddr(sys.HTTP.Addr())
	log.Info("perch gateway ready", "version", version.Get().Version, "url", url, "took", time.Since(start).Round(time.Microsecond))
	if banner != nil {
		fmt.Fprintf(banner, "\nPerch is running: %s\n", url)
		if t := cfg.Gateway.APIToken.Value(); t != "" {
			fmt.Fprintf(banner, "API token: %s  (send it as: Authorization: Bearer <token>)\n\n", t)
		} else {
			fmt.Fprintf(banner, "No API token: only this machine may use /chat (set gateway.api_token for the LAN).\n\n")
		}
		if code := sys.SetupCode; code != "" {
			fmt.Fprintf(banner, "No language model is connected yet. Open the page and enter the setup code %s to connect one.\n\n", code)
		}
	}
	var failed error
	select {
	case <-ctx.Done():
		log.Info("stopping")
	case failed = <-sys.Failed():
		log.Error("stopping: the HTTP server failed", "err", failed)
	}
	sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := sys.Stop(sctx); err != nil {
		log.Warn("unclean stop", "err", err)
	}
	log.Info("stopped")
	return failed
}

// portHolder names the gateway of this home when it is what holds the
// port, which a second `perch gateway` (a forgotten terminal beside the
// service) would otherwise only learn as "in use".
func portHolder(cfg *config.Config, err error) error {
	if !errors.Is(err, syscall.EADDRINUSE) {
		return err
	}
	p, perr := pidfile.Read(cfg.PIDPath())
	if perr != nil || p.PID == os.Getpid() {
		return err
	}
	if _, port, serr := net.SplitHostPort(p.Addr); serr != nil || port != strconv.Itoa(cfg.Gateway.Port) {
		return err
	}
	return fmt.Errorf("gateway: port %d is already in use by the perch gateway of this home (pid %d, %s); stop it first (systemctl stop perch, or Ctrl-C in its terminal) or change gateway.port", cfg.Gateway.Port, p.PID, cfg.Dir())
}

// LocalAgent builds the agent in this process, for `perch agent` when no
// gateway runs: ask answers one message of a session; closeFn stops the
// agent and closes the database.
func LocalAgent(ctx context.Context, cfg *config.Config, log *slog.Logger) (ask func(ctx context.Context, session, text string) (string, error), closeFn func() error, err error) {
	sys, err := NewCore(ctx, cfg, log)
	if err != nil {
		return nil, nil, err
	}
	ask = func(ctx context.Context, session, text string) (string, error) {
		rep, err := sys.Agent.Process(ctx, bus.Inbound{Channel: bus.ChannelCLI, ChatID: "terminal", SessionKey: session, Text: text})
		if err != nil {
			return "", err
		}
		return rep.Text, nil
	}
	closeFn = func() error {
		sys.Agent.Stop(context.WithoutCancel(ctx))
		return sys.Close()
	}
	return ask, closeFn, nil
}
