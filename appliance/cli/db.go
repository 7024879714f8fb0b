package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/store"
)

func dbCommand() *Command {
	var (
		asJSON   bool
		from, to string
	)
	return &Command{
		Name:     "db",
		Synopsis: "check [--from FILE] [--json] | salvage [--from FILE] [--to FILE]",
		Summary:  "check the database, or copy what is readable out of a damaged one",
		Help: `check reads every page and record of perch.db (or --from FILE, such as a salvaged file before
you move it in) without changing it and exits 1 when it is damaged.

salvage copies every session, message, cron job, device record and sensor reading still readable
from a damaged database into a new file, then the latest turns that only the journal beside it
(FILE.journal) holds. By default it reads the newest damaged copy the gateway set aside
(perch.db.damaged-<time>) and writes perch.db.salvaged-<time>. To use the result: stop the gateway,
move perch.db away, move the salvaged file to perch.db, start the gateway.

Both read the file under a shared lock: stop the gateway before checking perch.db itself.`,
		Subcommands: []string{"check", "salvage"},
		Flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&asJSON, "json", false, "check: print the report as JSON")
			fs.StringVar(&from, "from", "", "the `file` to read (check: default perch.db; salvage: default the newest damaged copy, else perch.db)")
			fs.StringVar(&to, "to", "", "salvage: the new `file` to write (default: perch.db.salvaged-<time> beside perch.db)")
		},
		Run: func(_ context.Context, e *Env, args []string) error {
			switch {
			case len(args) == 0:
				return usageError("db", "say what to do: check or salvage")
			case args[0] != "check" && args[0] != "salvage":
				return usageError("db", "unknown subcommand %q: say check or salvage", args[0])
			case len(args) > 1:
				return usageError("db", "unexpected argument %q after %s", args[1], args[0])
			}
			// The database's place is the home's, whatever the config
			// file holds: the tools that rescue a board must work when
			// its config does not load (a bad key is no reason to be
			// unable to copy out its chats).
			home := config.Dir()
			if _, err := actAsHomeOwner(home); err != nil {
				return err
			}
			path := filepath.Join(home, "perch.db")
			if args[0] == "check" {
				target := path
				if from != "" {
					target = from
				}
				rep, err := store.CheckFile(target)
				if errors.Is(err, store.ErrLocked) {
					return fmt.Errorf("db check: %s is open in a running gateway, which checked it when it started; to check it now, stop the gateway first (sudo systemctl stop perch, or Ctrl-C in its terminal)", target)
				}
				if errors.Is(err, fs.ErrNotExist) && from != "" {
					return fmt.Errorf("db check: --from %s: no such file", from)
				}
				if errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("db check: there is no database at %s yet; the gateway makes it when it first starts", path)
				}
				if err != nil {
					return fmt.Errorf("db check: %w", err)
				}
				if asJSON {
					if rep.Problems == nil {
						rep.Problems = []string{} // a list, as when there are some
					}
					enc := json.NewEncoder(e.Stdout)
					enc.SetIndent("", "  ")
					enc.Encode(rep)
				} else {
					fmt.Fprint(e.Stdout, rep.String())
					if !rep.OK() && from == "" {
						// What the gateway does with it concerns the
						// home's database, not a file named by --from.
						fmt.Fprint(e.Stdout, rep.GatewayAdvice())
					}
					fmt.Fprintln(e.Stdout)
				}
				if !rep.OK() && rep.Size == 0 {
					return fmt.Errorf("db check: %s is empty; there is nothing in it to salvage", target)
				}
				if !rep.OK() {
					return fmt.Errorf("db check: %s is damaged; 'perch db salvage --from %s' copies out what is readable", target, target)
				}
				return nil
			}
			src := from
			if src == "" {
				src = path
				if copies := store.DamagedCopies(path); len(copies) > 0 {
					src = copies[len(copies)-1]
				}
			}
			if _, err := os.Stat(src); errors.Is(err, fs.ErrNotExist) && from != "" {
				return fmt.Errorf("db salvage: --from %s: no such file", src)
			} else if errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("db salvage: there is no database at %s and no damaged copy beside it; nothing to salvage (name one with --from)", src)
			}
			dst := to
			if dst == "" {
				dst = filepath.Join(filepath.Dir(path), "perch.db.salvaged-"+time.Now().UTC().Format("20060102T150405Z"))
			}
			rep, err := store.Salvage(src, dst)
			if errors.Is(err, store.ErrLocked) {
				return fmt.Errorf("db salvage: %s is open in a running gateway; stop it first (sudo systemctl stop perch, or Ctrl-C in its terminal), or salvage a damaged copy with --from", src)
			}
			if err != nil {
				return fmt.Errorf("db salvage: %w", err)
			}
			fmt.Fprintf(e.Stdout, "Read %s, wrote %s: %s\n", src, dst, rep.String())
			fmt.Fprintf(e.Stdout, "To use it: stop the gateway, move %s away, move %s to %s, start the gateway.\n", path, dst, path)
			return nil
		},
	}
}
