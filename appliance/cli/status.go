package cli

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/gateway/client"
	"github.com/perchhq/perch/appliance/pidfile"
	"github.com/perchhq/perch/appliance/provider"
	"github.com/perchhq/perch/appliance/version"
)

func statusCommand() *Command {
	return &Command{
		Name:    "status",
		Summary: "show the configuration, the gateway's state and which secrets are set",
		Help:    `Never prints a secret: each shows only as set or not set. Exits 0 whether or not a gateway runs.`,
		Run: func(ctx context.Context, e *Env, args []string) error {
			if len(args) > 0 {
				return usageError("status", "unexpected argument %q", args[0])
			}
			cfg, err := e.loadConfig()
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintf(w, "%s\n", version.Get())
			cfgState := "present"
			if cfg.Absent() {
				cfgState = "missing: run 'perch onboard'"
			}
			fmt.Fprintf(w, "Config:\t%s (%s)\n", cfg.Path(), cfgState)
			fmt.Fprintf(w, "Workspace:\t%s\n", cfg.WorkspaceDir())
			if st, err := os.Stat(cfg.DBPath()); err == nil {
				fmt.Fprintf(w, "Database:\t%s (%d KiB)\n", cfg.DBPath(), st.Size()>>10)
			} else {
				fmt.Fprintf(w, "Database:\t%s (not created yet)\n", cfg.DBPath())
			}
			if ch, err := provider.Select(cfg); err == nil {
				fmt.Fprintf(w, "Provider:\t%s, model %s\n", ch.Name, ch.Configured)
			} else {
				fmt.Fprintf(w, "Provider:\tnot ready: %v\n", err)
			}
			fmt.Fprintf(w, "Channels:\t%s\n", channelsLine(cfg))
			fmt.Fprintf(w, "Sensors:\t%d configured\n", len(cfg.Sensors.Parts))
			host, _ := os.Hostname()
			fmt.Fprintf(w, "MQTT:\t%s\n", cfg.MQTT.Summary(host))
			fmt.Fprintf(w, "Gateway:\t%s\n", gatewayState(ctx, cfg))
			fmt.Fprintf(w, "Secrets:\n")
			for _, s := range cfg.Secrets() {
				state := "not set"
				if s.Set {
					state = "set"
				}
				fmt.Fprintf(w, "  %s\t%s\n", s.Path, state)
			}
			return w.Flush()
		},
	}
}

// channelsLine says which platforms are enabled, and which of those lack a
// credential. The gateway's own page is always one way to chat, so a board
// without a platform is not shown as one nobody can talk to.
func channelsLine(cfg *config.Config) string {
	on := []string{"web page"}
	for _, s := range cfg.Channels.Sections() {
		switch {
		case !s.Enabled:
		case s.Ready():
			on = append(on, s.Name)
		default:
			on = append(on, fmt.Sprintf("%s (skipped: %s not set)", s.Name, strings.Join(s.Missing(), ", ")))
		}
	}
	if len(on) == 1 {
		return "web page only (no chat platform enabled)"
	}
	return strings.Join(on, ", ")
}

func gatewayState(ctx context.Context, cfg *config.Config) string {
	if c, err := client.Find(ctx, cfg.PIDPath(), cfg.Gateway.APIToken.Value()); err == nil {
		_, ready, err := c.Ready(ctx)
		var se *client.StatusError
		state := "ready"
		switch {
		case errors.As(err, &se) && se.Status == http.StatusUnauthorized:
			state = "but it refuses this config's gateway.api_token (changed since it started? restart it)"
		case err != nil:
			state = "not answering /ready: " + err.Error()
		case !ready:
			state = "not ready"
		}
		return fmt.Sprintf("running (pid %d) at %s, %s", c.PID, c.Base(), state)
	}
	addr := net.JoinHostPort(cfg.Gateway.Host, fmt.Sprint(cfg.Gateway.Port))
	conn, err := net.DialTimeout("tcp", pidfile.DialAddr(addr), 300*time.Millisecond)
	if err == nil {
		conn.Close()
		return fmt.Sprintf("not running from this config dir; something else answers on %s", pidfile.DialAddr(addr))
	}
	return fmt.Sprintf("not running (would listen on %s)", addr)
}
