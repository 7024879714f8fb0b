package cli

import (
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
)

func gatewayCommand() *Command {
	var debug bool
	return &Command{
		Name:     "gateway",
		Synopsis: "[--debug]",
		Summary:  "run the gateway: HTTP API, web page, chat channels, cron",
		Help: `Runs until interrupted (SIGINT, SIGTERM, or SIGHUP when its terminal goes away; run it under nohup to
keep it past that), then stops cleanly and exits 0. A signal in its first millisecond, before it
opens the database, ends it at once, with nothing open to close.
It exits 1 when it cannot start: a config error, a provider that cannot be created, a channel whose
credential the platform rejects, or a busy port; the one line on stderr names the key to fix.

Without a provider key the gateway still starts: offline chat commands work, /ready says what to set,
and the web page offers first-run setup with the one-time code printed at start.`,
		ListensItself: true,
		Flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&debug, "debug", false, "log every tool and provider call (never a secret)")
		},
		Run: func(ctx context.Context, e *Env, args []string) error {
			if len(args) > 0 {
				return usageError("gateway", "unexpected argument %q", args[0])
			}
			if e.Runtime.Gateway == nil {
				return errors.New("gateway: this build has no gateway")
			}
			// The runtime's signal thread starts beside the config's
			// read and the bind; the gateway waits for it before it
			// opens the database.
			listening := make(chan struct{})
			go func() {
				e.ListenForStop()
				close(listening)
			}()
			cfg, err := e.loadConfig()
			if err != nil {
				return err
			}
			level := slog.LevelInfo
			if debug {
				level = slog.LevelDebug
			}
			log := newLogger(e.Stderr, level)
			var banner io.Writer
			// The banner carries the token: print it to a person at a terminal
			// (or to `make run`, which asks for it), never into a journal.
			if v, _ := e.lookupEnv("PERCH_SHOW_TOKEN"); v == "1" || isTerminal(e.Stdout) {
				banner = e.Stdout
			}
			return e.Runtime.Gateway(ctx, cfg, log, banner, func() { <-listening })
		},
	}
}

func (e *Env) lookupEnv(name string) (string, bool) {
	if e.Getenv != nil {
		return e.Getenv(name)
	}
	return os.LookupEnv(name)
}
