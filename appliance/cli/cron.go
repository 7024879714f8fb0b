package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/perchhq/perch/appliance/api"
	"github.com/perchhq/perch/appliance/config"
	"github.com/perchhq/perch/appliance/gateway/client"
	"github.com/perchhq/perch/appliance/sandbox"
	"github.com/perchhq/perch/appliance/schedule"
)

func cronCommand() *Command {
	var (
		asJSON                 bool
		message, command       string
		every, at, expr, tz    string
		deliver                bool
		channel, to            string
		everySet, atSet, exprS bool
	)
	return &Command{
		Name: "cron",
		Synopsis: "list [--json]\n       perch cron add --message TEXT (--every DURATION | --at DURATION | --cron 'EXPR') [--tz ZONE]\n" +
			"                      [--deliver --channel C --to CHAT] [--command CMD]\n       perch cron remove|enable|disable ID",
		Summary: "list, add, remove, enable and disable scheduled jobs",
		Help: `Works whether or not the gateway runs: with one running it goes through its API (the gateway holds
the database), otherwise it edits the database and the gateway picks the jobs up when it starts.

--every and --at take seconds (600) or a duration (10m, 1h30m, 7d). --cron takes five fields (minute hour
day-of-month month day-of-week), e.g. '0 9 * * 1-5', in --tz or the configured time zone.
Without --deliver the agent gets the message when the job is due, as if you had sent it; with --deliver
the message (or the command's output) is sent as is to --channel and --to.
'perch cron add' prints only the new job's id.`,
		Subcommands: []string{"list", "add", "remove", "enable", "disable"},
		Flags: func(fs *flag.FlagSet) {
			fs.BoolVar(&asJSON, "json", false, "list: print JSON")
			fs.StringVar(&message, "message", "", "add: the reminder `text`, or the task for the agent")
			fs.StringVar(&command, "command", "", "add: a shell `command` to run (confined) when due; its output is the result")
			fs.Func("every", "add: run every `DURATION` (at least 10s)", func(s string) error { every, everySet = s, true; return nil })
			fs.Func("at", "add: run once, `DURATION` from now", func(s string) error { at, atSet = s, true; return nil })
			fs.Func("cron", "add: a five-field cron `EXPR`", func(s string) error { expr, exprS = s, true; return nil })
			fs.StringVar(&tz, "tz", "", "add: the time `ZONE` of --cron (an IANA name such as Europe/Berlin)")
			fs.BoolVar(&deliver, "deliver", false, "add: send the message as is when due (needs --channel and --to)")
			fs.StringVar(&channel, "channel", "", "add: the `channel` to deliver to")
			fs.StringVar(&to, "to", "", "add: the `chat` to deliver to")
		},
		Run: func(ctx context.Context, e *Env, args []string) error {
			if len(args) == 0 {
				return usageError("cron", "say what to do: list, add, remove, enable or disable")
			}
			action, args := args[0], args[1:]
			var spec api.JobSpec
			switch action {
			case "list", "add":
				if len(args) > 0 {
					return usageError("cron", "%s takes no argument, got %q", action, args[0])
				}
			case "remove", "enable", "disable":
				if len(args) != 1 || strings.TrimSpace(args[0]) == "" {
					return usageError("cron", "%s takes the job's id (see 'perch cron list')", action)
				}
			default:
				return usageError("cron", "unknown action %q; use list, add, remove, enable or disable", action)
			}
			if action == "add" {
				var err error
				spec, err = cronSpec(message, command, deliver, channel, to, tz,
					opt(everySet, every), opt(atSet, at), opt(exprS, expr))
				if err != nil {
					return err
				}
			}
			cfg, err := e.loadConfig()
			if err != nil {
				return err
			}
			if action != "add" && noDatabase(cfg) {
				return runCron(ctx, e.Stdout, noJobs{}, action, args, spec, asJSON)
			}
			jobs, done, err := openJobs(ctx, cfg, e.Stderr)
			if err != nil {
				return err
			}
			defer done()
			return runCron(ctx, e.Stdout, jobs, action, args, spec, asJSON)
		},
	}
}

func opt(set bool, v string) *string {
	if !set {
		return nil
	}
	return &v
}

// cronSpec turns the flags into a job spec, with errors that name the
// flags rather than the API's fields.
func cronSpec(message, command string, deliver bool, channel, to, tz string, every, at, expr *string) (api.JobSpec, error) {
	spec := api.JobSpec{Message: message, Command: command, Deliver: deliver, Channel: channel, To: to}
	var errs []error
	n := 0
	if every != nil {
		n++
		if s, err := seconds("--every", *every); err != nil {
			errs = append(errs, err)
		} else {
			spec.Schedule.EverySeconds = &s
		}
	}
	if at != nil {
		n++
		if s, err := seconds("--at", *at); err != nil {
			errs = append(errs, err)
		} else {
			spec.Schedule.AtSeconds = &s
		}
	}
	if expr != nil {
		n++
		spec.Schedule.CronExpr = *expr
	}
	spec.Schedule.TZ = tz
	if n != 1 {
		errs = append(errs, errors.New("give exactly one of --every, --at or --cron"))
	} else if tz != "" && expr == nil {
		// --every and --at count from now whatever the zone: a --tz
		// beside them would be silently dropped.
		errs = append(errs, errors.New("--tz applies to --cron only; --every and --at count from now in any zone"))
	}
	if strings.TrimSpace(message) == "" && strings.TrimSpace(command) == "" {
		errs = append(errs, errors.New("--message is empty: say what to remind or do (or give --command)"))
	}
	if deliver && (channel == "" || to == "") {
		errs = append(errs, errors.New("--deliver needs --channel and --to (the chat to deliver to)"))
	}
	if err := errors.Join(errs...); err != nil {
		return spec, fmt.Errorf("cron add: %w", err)
	}
	return spec, nil
}

// seconds reads "600" as seconds and "10m", "1h30m" or "7d" as a
// duration (days are what a reminder is often counted in, and the page's
// form takes them too).
func seconds(flagName, s string) (int64, error) {
	s = strings.TrimSpace(s)
	given := s
	tooLong := func(n int64) (int64, error) {
		if n > schedule.MaxSeconds {
			// Said in the person's own terms: the scheduler's limit
			// in seconds would be a number they never typed.
			return 0, fmt.Errorf("%s %s: too long; at most ten years (3650d)", flagName, given)
		}
		return n, nil
	}
	if n, err := strconv.ParseInt(s, 10, 64); err == nil {
		return tooLong(n)
	}
	var days int64
	if head, rest, ok := cutDays(s); ok {
		days, s = head, rest
	}
	var d time.Duration
	if s != "" {
		var err error
		d, err = time.ParseDuration(s)
		if err != nil || d%time.Second != 0 {
			return 0, fmt.Errorf("%s %q: give whole seconds (600) or a duration (10m, 1h30m, 7d)", flagName, s)
		}
	}
	if days > 100000 {
		return 0, fmt.Errorf("%s %dd: too long; at most ten years (3650d)", flagName, days)
	}
	return tooLong(days*86400 + int64(d/time.Second))
}

// cutDays splits "7d12h" into 7 and "12h"; ok is false without a count of
// days in front.
func cutDays(s string) (days int64, rest string, ok bool) {
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	if i == 0 || i == len(s) || s[i] != 'd' {
		return 0, s, false
	}
	n, err := strconv.ParseInt(s[:i], 10, 64)
	if err != nil {
		return 0, s, false
	}
	return n, s[i+1:], true
}

// flagWords rewords the scheduler's field names as the CLI's flags.
var flagWords = strings.NewReplacer(
	"at_seconds", "--at", "every_seconds", "--every", "cron_expr", "--cron", "tz ", "--tz ",
	"deliver needs channel and to", "--deliver needs --channel and --to", "message is empty", "--message is empty",
)

// noJobs are the jobs of a home whose database was never made.
type noJobs struct{}

func (noJobs) List(context.Context) ([]api.Job, error) { return []api.Job{}, nil }
func (noJobs) Add(context.Context, api.JobSpec) (api.Job, error) {
	return api.Job{}, errors.New("schedule: no database to add to")
}
func (noJobs) Remove(_ context.Context, id string) (api.Job, error) {
	return api.Job{}, fmt.Errorf("%w %q (see 'perch cron list')", schedule.ErrNotFound, id)
}
func (noJobs) SetEnabled(_ context.Context, id string, _ bool) (api.Job, error) {
	return api.Job{}, fmt.Errorf("%w %q (see 'perch cron list')", schedule.ErrNotFound, id)
}

// openJobs returns the jobs of the running gateway, or of the database
// when none runs.
func openJobs(ctx context.Context, cfg *config.Config, stderr io.Writer) (api.Jobs, func(), error) {
	if c, err := client.Find(ctx, cfg.PIDPath(), cfg.Gateway.APIToken.Value()); err == nil {
		return c, func() {}, nil
	}
	db, err := openStore(cfg)
	if err != nil {
		return nil, nil, err
	}
	if db.RecoveredAtOpen() {
		fmt.Fprintf(stderr, "perch: warning: %s\n", db.Recovered().Detail())
	}
	loc, err := cfg.Location()
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	// The same rules as the gateway's: a job may deliver only to a channel
	// the gateway will run with this config.
	s := schedule.New(schedule.Options{Store: db, Location: loc, Log: slog.New(slog.DiscardHandler),
		CheckCommand: sandbox.CheckCommand, CheckChannel: schedule.ChannelCheck(cfg.DeliveryChannels)})
	return s, func() { db.Close() }, nil
}

func runCron(ctx context.Context, w io.Writer, jobs api.Jobs, action string, args []string, spec api.JobSpec, asJSON bool) error {
	err := cronAction(ctx, w, jobs, action, args, spec, asJSON)
	if err == nil {
		return nil
	}
	// Named by the command typed, not the package that refused it.
	msg := strings.TrimPrefix(err.Error(), "schedule: ")
	if action == "add" {
		msg = flagWords.Replace(msg)
	}
	return &cronError{msg: "cron " + action + ": " + msg, err: err}
}

// cronError is a cron command's failure in the CLI's words; it still
// wraps what refused it.
type cronError struct {
	msg string
	err error
}

func (e *cronError) Error() string { return e.msg }
func (e *cronError) Unwrap() error { return e.err }

func cronAction(ctx context.Context, w io.Writer, jobs api.Jobs, action string, args []string, spec api.JobSpec, asJSON bool) error {
	switch action {
	case "list":
		list, err := jobs.List(ctx)
		if err != nil {
			return err
		}
		if asJSON {
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			return enc.Encode(list)
		}
		fmt.Fprintln(w, api.FormatJobs(list))
		return nil
	case "add":
		j, err := jobs.Add(ctx, spec)
		if err != nil {
			return err
		}
		fmt.Fprintln(w, j.ID)
		return nil
	case "remove":
		j, err := jobs.Remove(ctx, args[0])
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "Removed job %s (%s, %q).\n", j.ID, j.Schedule.Describe(), what(j))
		return nil
	default:
		j, err := jobs.SetEnabled(ctx, args[0], action == "enable")
		if err != nil {
			return err
		}
		verb := "Disabled"
		if j.Enabled {
			verb = "Enabled"
		}
		fmt.Fprintf(w, "%s job %s (%s, %q)", verb, j.ID, j.Schedule.Describe(), what(j))
		if j.NextRun != nil {
			fmt.Fprintf(w, "; next run %s", j.NextRun.Local().Format("2006-01-02 15:04:05 MST"))
		}
		fmt.Fprintln(w, ".")
		return nil
	}
}

func what(j api.Job) string {
	if j.Command != "" {
		return "$ " + j.Command
	}
	return j.Message
}
