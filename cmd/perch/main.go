// Command perch is the Perch appliance: a chat-driven AI agent gateway for
// small Linux boards. main parses the command line and calls one function of
// package appliance per command; it holds no logic of its own.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/perchhq/perch/appliance"
	"github.com/perchhq/perch/appliance/sandbox"
	"github.com/perchhq/perch/image/firstboot"
)

const usage = `perch — a chat-driven AI agent appliance

Usage:
  perch gateway [--debug]                   run the gateway (HTTP API, channels, cron)
  perch agent [-m MSG] [-s SESSION] [--debug]
                                            talk to the agent (one message with -m)
  perch onboard [--force]                   create the config file and workspace
  perch status                              show configuration and gateway state
  perch models [--provider P] [--json]      list the provider's models
  perch cron list [--json]
  perch cron add --message TEXT (--every SECONDS | --at SECONDS | --cron 'EXPR') [--tz ZONE]
                 [--deliver --channel C --to CHAT] [--command CMD]
  perch cron remove|enable|disable ID
  perch skills list | show NAME | install FOLDER [--name NAME] | remove NAME
  perch version
  perch firstboot [--console]                apply the boot partition's settings (board images)
  perch help

Every command accepts --config PATH (default: $PERCH_HOME/config.json or ~/.perch/config.json).
`

func main() {
	// The exec sandbox re-runs this binary as its launcher: confine, then
	// exec the shell. Nothing else may run first in that process.
	if len(os.Args) > 1 && os.Args[1] == sandbox.LauncherArg {
		os.Exit(sandbox.RunLauncher(os.Args[2:]))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if !errors.Is(err, flag.ErrHelp) {
			fmt.Fprintf(os.Stderr, "perch: %s\n", oneLine(err))
		}
		os.Exit(1)
	}
}

// oneLine joins a multi-error into one line: start-up failures must be one
// clear line on stderr.
func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

func run(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stdout, usage)
		return nil
	}
	cmd, args := args[0], args[1:]
	fs := flag.NewFlagSet("perch "+cmd, flag.ContinueOnError)
	fs.SetOutput(stderr)
	configPath := fs.String("config", "", "config file `path`")
	switch cmd {
	case "gateway":
		debug := fs.Bool("debug", false, "verbose logging: every tool and provider call")
		if _, err := parse(fs, args, 0); err != nil {
			return err
		}
		return appliance.Gateway(ctx, appliance.GatewayOptions{ConfigPath: *configPath, Debug: *debug, Stdout: stdout, Stderr: stderr})
	case "agent":
		msg := fs.String("m", "", "send one `message` and print the reply")
		session := fs.String("s", "", "session `key` (default cli:default)")
		debug := fs.Bool("debug", false, "verbose logging")
		if _, err := parse(fs, args, 0); err != nil {
			return err
		}
		return appliance.Agent(ctx, appliance.AgentOptions{ConfigPath: *configPath, Message: *msg, Session: *session,
			Debug: *debug, Stdin: stdin, Stdout: stdout, Stderr: stderr})
	case "onboard":
		force := fs.Bool("force", false, "replace an existing config file (the workspace is kept)")
		if _, err := parse(fs, args, 0); err != nil {
			return err
		}
		return appliance.Onboard(*configPath, *force, stdout)
	case "version", "--version", "-v":
		if _, err := parse(fs, args, 0); err != nil {
			return err
		}
		appliance.Version(stdout)
		return nil
	case "status":
		if _, err := parse(fs, args, 0); err != nil {
			return err
		}
		return appliance.Status(ctx, appliance.StatusOptions{ConfigPath: *configPath, Stdout: stdout})
	case "models":
		prov := fs.String("provider", "", "list this `provider`'s models instead of the configured one")
		asJSON := fs.Bool("json", false, "print JSON")
		if _, err := parse(fs, args, 0); err != nil {
			return err
		}
		return appliance.Models(ctx, appliance.ModelsOptions{ConfigPath: *configPath, Provider: *prov, JSON: *asJSON, Stdout: stdout})
	case "cron":
		return cronCmd(ctx, fs, configPath, args, stdout)
	case "skills":
		name := fs.String("name", "", "install under this `name`")
		pos, err := parse(fs, args, -1)
		if err != nil {
			return err
		}
		if len(pos) == 0 {
			return usageErr("perch skills list | show NAME | install FOLDER [--name NAME] | remove NAME")
		}
		o := appliance.SkillsOptions{ConfigPath: *configPath, Action: pos[0], Name: *name, Stdout: stdout}
		switch pos[0] {
		case "list":
			if len(pos) != 1 {
				return usageErr("perch skills list")
			}
		case "show", "install", "remove":
			if len(pos) != 2 {
				return usageErr("perch skills " + pos[0] + " NAME")
			}
			o.Arg = pos[1]
		default:
			return usageErr("perch skills list | show NAME | install FOLDER [--name NAME] | remove NAME")
		}
		return appliance.Skills(o)
	case "firstboot": // the image's first-boot unit; its flags are its own
		return firstboot.CLI(ctx, args, stdout, stderr)
	case "help", "--help", "-h":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprint(stderr, usage)
	return fmt.Errorf("unknown command %q; see 'perch help'", cmd)
}

func cronCmd(ctx context.Context, fs *flag.FlagSet, configPath *string, args []string, stdout io.Writer) error {
	asJSON := fs.Bool("json", false, "print JSON (list)")
	message := fs.String("message", "", "reminder text or task for the agent")
	every := fs.Int64("every", 0, "run every `SECONDS`")
	at := fs.Int64("at", -1, "run once, `SECONDS` from now")
	expr := fs.String("cron", "", "five-field cron `EXPR`")
	tz := fs.String("tz", "", "time `ZONE` for --cron")
	deliver := fs.Bool("deliver", false, "send the message as is when due (needs --channel and --to)")
	channel := fs.String("channel", "", "`channel` to deliver to")
	to := fs.String("to", "", "`chat` to deliver to")
	command := fs.String("command", "", "shell `command` to run when due")
	pos, err := parse(fs, args, -1)
	if err != nil {
		return err
	}
	if len(pos) == 0 {
		return usageErr("perch cron list|add|remove|enable|disable")
	}
	o := appliance.CronOptions{ConfigPath: *configPath, Action: pos[0], JSON: *asJSON, Stdout: stdout}
	switch pos[0] {
	case "list":
		if len(pos) != 1 {
			return usageErr("perch cron list [--json]")
		}
	case "add":
		if len(pos) != 1 {
			return usageErr("perch cron add --message TEXT (--every S | --at S | --cron 'EXPR')")
		}
		j := appliance.CronRequest{Message: *message, Command: *command, Deliver: *deliver, Channel: *channel, To: *to}
		set := map[string]bool{}
		fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
		if set["every"] {
			j.Schedule.EverySeconds = every
		}
		if set["at"] {
			j.Schedule.AtSeconds = at
		}
		j.Schedule.CronExpr, j.Schedule.TZ = *expr, *tz
		o.Job = j
	case "remove", "enable", "disable":
		if len(pos) != 2 {
			return usageErr("perch cron " + pos[0] + " ID")
		}
		o.ID = pos[1]
	default:
		return usageErr("perch cron list|add|remove|enable|disable")
	}
	return appliance.Cron(ctx, o)
}

// parse parses flags wherever they appear among the arguments and returns
// the positional ones; want is how many positionals are allowed (-1: any).
func parse(fs *flag.FlagSet, args []string, want int) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		if fs.NArg() == 0 {
			break
		}
		pos = append(pos, fs.Arg(0))
		args = fs.Args()[1:]
	}
	if want >= 0 && len(pos) > want {
		return nil, fmt.Errorf("%s: unexpected argument %q", fs.Name(), pos[want])
	}
	return pos, nil
}

func usageErr(s string) error { return errors.New("usage: " + s) }
