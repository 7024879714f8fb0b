package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/perchhq/perch/appliance/api"
	"github.com/perchhq/perch/appliance/channel"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/gateway/client"
)

func channelsCommand() *Command {
	return &Command{
		Name:     "channels",
		Synopsis: "approve CODE\n       perch channels pending",
		Summary:  "let a new chat sender in with the pairing code the bot sent them",
		Help: `When a chat channel has allow_from set, a stranger who writes to the bot gets one short answer with a
pairing code (at most once a day). 'perch channels approve CODE' adds that sender's id to
channels.<platform>.allow_from in the config file; a running gateway admits them at once and tells them
so. Codes are valid for 24 hours. 'perch channels pending' lists the codes waiting.
Works whether or not the gateway runs (through its API when it does).`,
		Subcommands: []string{"approve", "pending"},
		Run: func(ctx context.Context, e *Env, args []string) error {
			if len(args) == 0 {
				return usageError("channels", "say what to do: approve CODE or pending")
			}
			cfg, err := e.loadConfig()
			if err != nil {
				return err
			}
			switch args[0] {
			case "approve":
				if len(args) != 2 {
					return usageError("channels", "approve takes the pairing code the bot sent, e.g. perch channels approve K7M2QX")
				}
				return approve(ctx, e.Stdout, cfg, args[1])
			case "pending":
				if len(args) != 1 {
					return usageError("channels", "pending takes no argument")
				}
				return pending(ctx, e.Stdout, cfg)
			}
			return usageError("channels", "unknown action %q; use approve or pending", args[0])
		},
	}
}

// approve goes through the running gateway (which holds the database and
// admits the sender at once), else works on the database and config file.
func approve(ctx context.Context, w io.Writer, cfg *config.Config, code string) error {
	if c, err := client.Find(ctx, cfg.PIDPath(), cfg.Gateway.APIToken.Value()); err == nil {
		a, err := c.ApprovePairing(ctx, code)
		if err != nil {
			return fmt.Errorf("channels approve: %w", err)
		}
		fmt.Fprintf(w, "Approved %s on %s: added to %s. They can talk to the bot now.\n", who(a.Pairing), a.Channel, a.Key)
		return nil
	}
	if noDatabase(cfg) {
		return fmt.Errorf("channels approve: %w", channel.ErrNoPairing)
	}
	db, err := openStore(cfg)
	if err != nil {
		return err
	}
	defer db.Close()
	a, err := channel.Approve(db, code, time.Now(), func(ch, id string) error {
		return config.AddAllowFrom(cfg.Path(), ch, id)
	})
	if err != nil {
		if errors.Is(err, channel.ErrNoPairing) {
			return fmt.Errorf("channels approve: %w", err)
		}
		return err
	}
	fmt.Fprintf(w, "Approved %s on %s: added to %s in %s. The gateway admits them when it starts.\n", who(a.Pairing), a.Channel, a.Key, cfg.Path())
	return nil
}

func pending(ctx context.Context, w io.Writer, cfg *config.Config) error {
	var list []api.Pairing
	if c, err := client.Find(ctx, cfg.PIDPath(), cfg.Gateway.APIToken.Value()); err == nil {
		if list, err = c.Pairings(ctx); err != nil {
			return fmt.Errorf("channels pending: %w", err)
		}
	} else if !noDatabase(cfg) {
		db, err := openStore(cfg)
		if err != nil {
			return err
		}
		defer db.Close()
		if list, err = channel.Pairings(db, time.Now()); err != nil {
			return err
		}
	}
	if len(list) == 0 {
		fmt.Fprintln(w, "No pairing codes wait for approval.")
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "CODE\tCHANNEL\tSENDER\tASKED")
	for _, p := range list {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", p.Code, p.Channel, who(p), p.Created.Local().Format("2006-01-02 15:04"))
	}
	return tw.Flush()
}

// who names a sender for people: "Bob (@bob, id 99)".
func who(p api.Pairing) string {
	var parts []string
	if p.Username != "" {
		parts = append(parts, "@"+strings.TrimPrefix(p.Username, "@"))
	}
	parts = append(parts, "id "+p.SenderID)
	name := p.Name
	if name == "" {
		name = "the sender"
	}
	return name + " (" + strings.Join(parts, ", ") + ")"
}
