package firstboot

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/perchhq/perch/appliance/config"
)

// Usage is the command's help text.
const Usage = `perch firstboot [--console] [--boot DIR] [--root DIR] [--config PATH]

Applies the settings on the boot partition (perch-setup.json, and the
user-data and network-config files Raspberry Pi Imager writes) and removes
them from it; on the board's first start it also creates the config with an
API token of the board's own. Run by perch-firstboot.service at every boot;
with no settings files it changes nothing.

--console prints where to find Perch (and, the first time, the setup code
and the board's API token) on the consoles and the login prompt; the image
runs it (perch-console.service) after every start of perch.service.
`

// Main runs `perch firstboot` with args (the words after "firstboot") and
// returns the process's exit code; SIGINT and SIGTERM cancel it.
func Main(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := CLI(ctx, args, os.Stdout, os.Stderr); err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(os.Stderr, "perch: %s\n", strings.ReplaceAll(err.Error(), "\n", "; "))
		}
		return 1
	}
	return 0
}

// CLI runs `perch firstboot` with args (the words after "firstboot").
func CLI(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("perch firstboot", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, Usage) }
	console := fs.Bool("console", false, "print the console banner instead of applying settings")
	root := fs.String("root", "/", "the system to configure")
	boot := fs.String("boot", DefaultBoot, "the boot partition's mount point (inside --root)")
	cfgPath := fs.String("config", DefaultConfig, "Perch's config file (inside --root)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("perch firstboot: unexpected argument %q; see 'perch firstboot --help'", fs.Arg(0))
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
	if *console {
		return showConsole(ctx, *root, *cfgPath, log)
	}
	rep, err := Run(ctx, Options{Root: *root, Boot: *boot, Config: *cfgPath, Log: log})
	if rep != nil {
		if rep.FirstBoot {
			log.Info("first boot of this board")
		}
		if len(rep.Found) > 0 {
			log.Info("settings found on the boot partition", "files", strings.Join(rep.Found, ", "))
		}
		for _, a := range rep.Applied {
			log.Info("applied: " + a)
		}
		for _, i := range rep.Ignored {
			log.Info("not applied: " + i)
		}
		if len(rep.Found) == 0 && !rep.FirstBoot {
			log.Info("nothing to do: no settings on the boot partition")
		}
	}
	if err != nil {
		if errors.Is(err, ErrSetup) {
			log.Error("the boot partition's settings were not applied; fix the file and restart", "problem", err.Error())
		}
		return err
	}
	return nil
}

func showConsole(ctx context.Context, root, cfgPath string, log *slog.Logger) error {
	noEnv := func(string) (string, bool) { return "", false }
	cfg, err := config.Load(config.Options{Path: filepath.Join(root, cfgPath), Env: noEnv})
	if err != nil {
		return err
	}
	st, err := LoadState(root)
	if err != nil {
		return err
	}
	host, _ := os.Hostname()
	b := Banner{Hostname: host, Port: cfg.Gateway.Port, Addrs: LANAddrs(), Problem: st.Problem}
	if st.TokenGenerated {
		b.Token = cfg.Gateway.APIToken.Value()
	}
	b.SetupCode = SetupCode(gatewayLog(ctx))
	issue := filepath.Join(root, "run/perch-firstboot/console.issue")
	if err := writeFile(issue, []byte(b.Issue()), 0o600); err != nil {
		return err
	}
	// Running gettys redraw their prompt with the new text.
	if err := exec.CommandContext(ctx, "agetty", "--reload").Run(); err != nil {
		log.Debug("agetty --reload", "err", err)
	}
	for _, tty := range activeConsoles(root) {
		f, err := os.OpenFile(tty, os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			log.Warn("cannot write to the console", "tty", tty, "err", err)
			continue
		}
		_, err = io.WriteString(f, strings.ReplaceAll(b.Text(), "\n", "\r\n"))
		f.Close()
		if err != nil {
			log.Warn("cannot write to the console", "tty", tty, "err", err)
		}
	}
	return nil
}

// gatewayLog returns the log of perch.service's current start. Run from
// perch-console.service (ordered after Perch is ready), it reads the lines
// of Perch's running invocation, waiting a moment for the "ready" line,
// which comes after the setup code.
func gatewayLog(ctx context.Context) string {
	args := []string{"--no-pager", "-o", "cat", "-u", "perch.service", "-b", "-n", "200"}
	if id, err := exec.CommandContext(ctx, "systemctl", "show", "-p", "InvocationID", "--value", "perch.service").Output(); err == nil && len(bytes.TrimSpace(id)) > 0 {
		args = []string{"--no-pager", "-o", "cat", "_SYSTEMD_INVOCATION_ID=" + string(bytes.TrimSpace(id))}
	}
	tries := 1
	if os.Getenv("INVOCATION_ID") != "" {
		tries = 30 // from a unit: the gateway's lines may still be on their way
	}
	var out []byte
	for range tries {
		out, _ = exec.CommandContext(ctx, "journalctl", args...).Output()
		if strings.Contains(string(out), "perch gateway ready") {
			break
		}
		select {
		case <-ctx.Done():
			return string(out)
		case <-time.After(100 * time.Millisecond):
		}
	}
	return string(out)
}

// activeConsoles are the kernel's consoles (screen and serial), as device
// paths.
func activeConsoles(root string) []string {
	data, err := os.ReadFile(filepath.Join(root, "sys/class/tty/console/active"))
	if err != nil {
		return []string{filepath.Join(root, "dev/console")}
	}
	var out []string
	for _, name := range strings.Fields(string(data)) {
		out = append(out, filepath.Join(root, "dev", name))
	}
	return out
}
