package appliance

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/version"
)

// GatewayOptions are the flags of `perch gateway`.
type GatewayOptions struct {
	ConfigPath string
	Debug      bool
	Stdout     io.Writer
	Stderr     io.Writer
}

// Gateway runs the gateway until ctx ends (SIGINT/SIGTERM), then stops it
// cleanly. An error means start-up failed, or the HTTP server failed while
// running (exit 1 either way, so systemd restarts it).
func Gateway(ctx context.Context, o GatewayOptions) error {
	cfg, err := config.Load(config.Options{Path: o.ConfigPath})
	if err != nil {
		return err
	}
	log := NewLogger(o.Stderr, o.Debug)
	if cfg.Absent() {
		log.Warn("no config file; running on built-in defaults", "path", cfg.Path(), "create it with", "perch onboard")
	}
	start := time.Now()
	sys, err := NewCore(ctx, cfg, log)
	if err != nil {
		return err
	}
	if sys.NoProv != nil {
		log.Warn("no provider: only offline commands are answered until one is configured", "fix", sys.NoProv.Error())
	}
	if err := sys.BuildGateway(); err != nil {
		sys.Close()
		return err
	}
	if err := sys.Start(ctx); err != nil {
		return err
	}
	// Start-up is done: give its pages back (see trimWorkingSet).
	go trimWorkingSet()
	url := "http://" + dialAddr(sys.HTTP.Addr())
	log.Info("perch gateway ready", "version", version.Get().Version, "url", url, "took", time.Since(start).Round(time.Microsecond))
	if o.Stdout != nil && (os.Getenv("PERCH_SHOW_TOKEN") == "1" || isTerminalWriter(o.Stdout)) {
		fmt.Fprintf(o.Stdout, "\nPerch is running: %s\n", url)
		if t := cfg.Gateway.APIToken.Value(); t != "" {
			fmt.Fprintf(o.Stdout, "API token: %s  (send it as: Authorization: Bearer <token>)\n\n", t)
		} else {
			fmt.Fprintf(o.Stdout, "No API token: only this machine may use /chat (set gateway.api_token for the LAN).\n\n")
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

func isTerminalWriter(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && isTerminal(f)
}
