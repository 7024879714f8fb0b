package cli

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/perchhq/perch/appliance/config"
)

func onboardCommand() *Command {
	var force bool
	return &Command{
		Name:     "onboard",
		Synopsis: "[--force]",
		Summary:  "create the config file and the workspace",
		Help: `Writes a complete config (every key with its default, channels off, the gateway on 0.0.0.0 behind a
fresh random API token) and the workspace with starter files. It never replaces a config without
--force, and then keeps the old one beside it as config.json.bak; workspace files are never replaced.`,
		Flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&force, "force", false, "replace an existing config (the old one is kept as .bak; the workspace is kept)")
		},
		Run: func(_ context.Context, e *Env, args []string) error {
			if len(args) > 0 {
				return usageError("onboard", "unexpected argument %q", args[0])
			}
			if _, err := actAsHomeOwner(config.Dir()); err != nil {
				return err
			}
			res, err := config.Onboard(e.ConfigPath, force)
			if err != nil {
				return err
			}
			w := e.Stdout
			if res.Backup != "" {
				fmt.Fprintf(w, "Replaced %s; the previous config is kept as %s (its keys and token are not in the new one).\n", res.ConfigPath, res.Backup)
			} else {
				fmt.Fprintf(w, "Wrote %s (mode 0600).\n", res.ConfigPath)
			}
			fmt.Fprintf(w, "Workspace: %s", res.Workspace)
			if len(res.Created) > 0 {
				fmt.Fprintf(w, " (created %s)", strings.Join(res.Created, ", "))
			}
			fmt.Fprintln(w)
			// Say where the gateway will really listen: environment overrides
			// (PERCH_GATEWAY_HOST, make run's loopback) win over the file.
			cfg, err := config.Load(config.Options{Path: res.ConfigPath, Env: e.Getenv, Environ: e.Environ})
			if err != nil {
				return err
			}
			host, port := cfg.Gateway.Host, cfg.Gateway.Port
			fmt.Fprintf(w, "The gateway will listen on %s", net.JoinHostPort(host, strconv.Itoa(port)))
			if config.IsLoopbackHost(host) {
				fmt.Fprint(w, " (this machine only)")
			} else {
				fmt.Fprint(w, " (the LAN)")
			}
			fmt.Fprintf(w, ". API token: %s\n\nNext:\n", res.Token)
			hint := startHint(res.ConfigPath)
			if hint == "make run" {
				// make run listens on loopback whatever the file says.
				host = "127.0.0.1"
			}
			fmt.Fprintf(w, "  1. Start it: %s\n", hint)
			fmt.Fprintf(w, "  2. Open %s and fill in the setup form (provider, model, key) with the\n"+
				"     one-time setup code the gateway prints when it starts,\n", pageURL(host, port))
			fmt.Fprintf(w, "     or set providers.<name>.api_key and agents.defaults.model in %s.\n", res.ConfigPath)
			return nil
		},
	}
}

// startHint says how the person starts a gateway on configPath: the
// service when the config is the package's, make run when it is a source
// checkout's own .perch (the only home make run starts), else the binary,
// told where the config is unless it would find it by itself.
func startHint(configPath string) string {
	if strings.HasPrefix(configPath, "/etc/perch/") {
		return "sudo systemctl restart perch   (logs: journalctl -u perch -f)"
	}
	if b, err := os.ReadFile("Makefile"); err == nil && strings.Contains(string(b), "\nrun:") {
		runHome, _ := filepath.Abs(".perch")
		if _, err := os.Stat(filepath.Join("cmd", "perch")); err == nil && filepath.Dir(configPath) == runHome {
			return "make run"
		}
	}
	if def, err := filepath.Abs(config.DefaultPath()); err == nil && def == configPath {
		return "perch gateway"
	}
	return "perch gateway --config " + configPath
}

func pageURL(host string, port int) string {
	if host == "" || host == "0.0.0.0" || host == "::" {
		if h, err := os.Hostname(); err == nil && h != "" {
			host = h + ".local"
		} else {
			host = "127.0.0.1"
		}
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(port)) + "/"
}
