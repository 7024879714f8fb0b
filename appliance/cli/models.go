package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/perchhq/perch/appliance/provider"
)

// modelsTimeout bounds the wait for the model list: a long one (hundreds of
// models, with prices) takes a few seconds on a slow link.
var modelsTimeout = 30 * time.Second

func modelsCommand() *Command {
	var (
		name   string
		asJSON bool
	)
	return &Command{
		Name:     "models",
		Synopsis: "[FILTER] [--provider NAME] [--json]",
		Summary:  "list the provider's models, with pricing where it gives one",
		Help: `Asks GET {api_base}/models of the configured provider (or --provider). With FILTER, only the models
whose id contains it (ignoring case), as the chat's /models FILTER does: perch models claude.`,
		Flags: func(fs *flag.FlagSet) {
			fs.StringVar(&name, "provider", "", "list this `provider`'s models instead of the configured one's")
			fs.BoolVar(&asJSON, "json", false, "print JSON")
		},
		Run: func(ctx context.Context, e *Env, args []string) error {
			if len(args) > 1 {
				return usageError("models", "unexpected argument %q (one FILTER at most)", args[1])
			}
			filter := ""
			if len(args) == 1 {
				filter = args[0]
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
			// The page's setup gives up on a silent provider; so does
			// the command, naming what it waited for.
			mctx, cancel := context.WithTimeout(ctx, modelsTimeout)
			defer cancel()
			all, err := cl.Models(mctx)
			if err != nil && ctx.Err() == nil && errors.Is(mctx.Err(), context.DeadlineExceeded) {
				return fmt.Errorf("models: %s did not answer its model list within %v; check providers.%s.api_base and the network", cl.Name(), modelsTimeout, cl.Name())
			}
			if err != nil {
				return err
			}
			models := provider.MatchModels(all, filter)
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
			switch {
			case len(all) == 0:
				fmt.Fprintf(w, "%s lists no models\n", cl.Name())
			case len(models) == 0:
				fmt.Fprintf(w, "%s lists no models matching %q (of %d)\n", cl.Name(), filter, len(all))
			}
			return w.Flush()
		},
	}
}
