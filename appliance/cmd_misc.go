package appliance

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/provider"
	"github.com/perchhq/perch/appliance/version"
)

// Onboard creates the config file and workspace (`perch onboard`).
func Onboard(configPath string, force bool, w io.Writer) error {
	res, err := config.Onboard(configPath, force)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "Wrote %s (mode 0600).\n", res.ConfigPath)
	fmt.Fprintf(w, "Workspace: %s", res.Workspace)
	if len(res.Created) > 0 {
		fmt.Fprintf(w, " (created %s)", strings.Join(res.Created, ", "))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "The gateway will listen on 0.0.0.0:8080 and needs this API token: %s\n", res.Token)
	fmt.Fprintln(w, "Next: set providers.openrouter.api_key (or another provider) and agents.defaults.model in the config, then run 'perch gateway'.")
	return nil
}

// Version prints the version line.
func Version(w io.Writer) { fmt.Fprintln(w, version.Get()) }

// StatusOptions are the flags of `perch status`.
type StatusOptions struct {
	ConfigPath string
	Stdout     io.Writer
}

// Status describes the installation without revealing any secret.
func Status(ctx context.Context, o StatusOptions) error {
	cfg, err := config.Load(config.Options{Path: o.ConfigPath})
	if err != nil {
		return err
	}
	w := tabwriter.NewWriter(o.Stdout, 0, 4, 2, ' ', 0)
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
	var enabled []string
	for name, on := range map[string]bool{"telegram": cfg.Channels.Telegram.Enabled, "discord": cfg.Channels.Discord.Enabled,
		"slack": cfg.Channels.Slack.Enabled, "line": cfg.Channels.LINE.Enabled} {
		if on {
			enabled = append(enabled, name)
		}
	}
	if len(enabled) == 0 {
		fmt.Fprintf(w, "Channels:\tnone enabled\n")
	} else {
		fmt.Fprintf(w, "Channels:\t%s\n", strings.Join(slices.Sorted(slices.Values(enabled)), ", "))
	}
	fmt.Fprintf(w, "Sensors:\t%d configured\n", len(cfg.Sensors))
	host, _ := os.Hostname()
	fmt.Fprintf(w, "MQTT:\t%s\n", cfg.MQTT.Summary(host))
	fmt.Fprintf(w, "Gateway:\t%s\n", gatewayState(ctx, cfg))
	fmt.Fprintf(w, "Secrets:\t\n")
	for _, s := range cfg.Secrets() {
		state := "not set"
		if s.Set {
			state = "set"
		}
		fmt.Fprintf(w, "  %s\t%s\n", s.Path, state)
	}
	return w.Flush()
}

func gatewayState(ctx context.Context, cfg *config.Config) string {
	if r, ok := findGateway(ctx, cfg); ok {
		var ready map[string]any
		state := "ready"
		if err := r.do(ctx, http.MethodGet, "/ready", nil, &ready); err != nil {
			state = "not ready"
		}
		return fmt.Sprintf("running (pid %d) at %s, %s", r.pid, r.base, state)
	}
	addr := net.JoinHostPort(cfg.Gateway.Host, fmt.Sprint(cfg.Gateway.Port))
	c, err := net.DialTimeout("tcp", dialAddr(addr), 300*time.Millisecond)
	if err == nil {
		c.Close()
		return fmt.Sprintf("not running from this config dir; something else answers on %s", dialAddr(addr))
	}
	return fmt.Sprintf("not running (would listen on %s)", addr)
}

// ModelsOptions are the flags of `perch models`.
type ModelsOptions struct {
	ConfigPath string
	Provider   string
	JSON       bool
	Stdout     io.Writer
}

// Models lists the provider's models: GET {api_base}/models.
func Models(ctx context.Context, o ModelsOptions) error {
	cfg, err := config.Load(config.Options{Path: o.ConfigPath})
	if err != nil {
		return err
	}
	choice := provider.Choice{Name: o.Provider}
	if o.Provider == "" {
		choice, err = provider.Select(cfg)
		if err != nil {
			return err
		}
	}
	cl, err := provider.NewNamed(ctx, cfg, choice, nil)
	if err != nil {
		return err
	}
	models, err := cl.Models(ctx)
	if err != nil {
		return err
	}
	if o.JSON {
		enc := json.NewEncoder(o.Stdout)
		enc.SetIndent("", "  ")
		if models == nil {
			models = []provider.Model{}
		}
		return enc.Encode(models)
	}
	w := tabwriter.NewWriter(o.Stdout, 0, 4, 2, ' ', 0)
	for _, m := range models {
		if m.Pricing != nil {
			fmt.Fprintf(w, "%s\tprompt %s\tcompletion %s\n", m.ID, m.Pricing["prompt"], m.Pricing["completion"])
		} else {
			fmt.Fprintf(w, "%s\n", m.ID)
		}
	}
	if len(models) == 0 {
		fmt.Fprintf(w, "%s lists no models\n", cl.Name())
	}
	return w.Flush()
}
