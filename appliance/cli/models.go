package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"text/tabwriter"

	"github.com/perchhq/perch/appliance/provider"
)

func modelsCommand() *Command {
	var (
		name   string
		asJSON bool
	)
	return &Command{
		Name:     "models",
		Synopsis: "[--provider NAME] [--json]",
		Summary:  "list the provider's models, with pricing where it gives one",
		Help:     `Asks GET {api_base}/models of the configured provider (or --provider).`,
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&name, "provider", "", "list this `provider`'s models instead of the configured one's")
			fs.BoolVar(&asJSON, "json", false, "print JSON")
		},
		Run: func(ctx context.Context, e *Env, args []string) error {
			if len(args) > 0 {
				return usageError("models", "unexpected argument %q", args[0])
			}
			cfg, err := e.loadConfig()
			if err != nil {
				return err
			}
			choice := provider.Choice{Name: name}
			if name == "" {
				if choice, err = provider.Select(cfg); err != nil {
					return err
				}
			}
			po, err := provider.OptionsFor(cfg, choice, nil)
			if err != nil {
				return err
			}
			cl, err := provider.New(ctx, po)
			if err != nil {
				return err
			}
			models, err := cl.Models(ctx)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(e.Stdout)
				enc.SetIndent("", "  ")
				if models == nil {
					models = []provider.Model{}
				}
				return enc.Encode(models)
			}
			w := tabwriter.NewWriter(e.Stdout, 0, 4, 2, ' ', 0)
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
		},
	}
}
