// Package cli is Perch's command line: one file per command, each holding
// its flags, its usage text and its body. cmd/perch calls Main and nothing
// else. The command list here is also what `perch help`, the man page and
// the bash completion are made from, so they cannot drift apart.
//
// # Concepts
//
// A Command has a name, a synopsis, a one-line summary, a longer help text,
// a function that declares its flags on a flag.FlagSet, and Run. Flags may
// appear anywhere among the arguments; every command takes --config and
// --help. Output goes to the Env's writers, never to os.Stdout directly, so
// tests run commands in-process.
//
// The two commands that need the whole appliance (gateway, and agent when
// no gateway runs) reach it through Runtime, which cmd/perch fills from
// package appliance: the CLI itself does not import the composition root.
package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/perchhq/perch/appliance/config"
)

// Runtime is what the CLI needs of the composition root.
type Runtime struct {
	// Gateway runs the gateway until ctx ends, then stops it. banner, when
	// not nil, receives the human start-up lines (URL, token, setup code).
	// An error means start-up failed.
	// listening, when not nil, is called before the gateway opens its
	// database; it returns once a stop signal cancels ctx.
	Gateway func(ctx context.Context, cfg *config.Config, log *slog.Logger, banner io.Writer, listening func()) error
	// Agent builds the agent in this process (no gateway runs): ask sends
	// one message of session and returns the reply.
	Agent func(ctx context.Context, cfg *config.Config, log *slog.Logger) (ask func(ctx context.Context, session, text string) (string, error), closeFn func() error, err error)
}

// Env is what a command runs with.
type Env struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Runtime        Runtime
	// ConfigPath is --config (empty: the default).
	ConfigPath string
	// Getenv reads the environment (nil: os.LookupEnv).
	Getenv func(string) (string, bool)
	// Environ lists the environment (nil: os.Environ).
	Environ func() []string
	// stop cancels the command's context at a stop signal once it
	// listens (nil: nothing listens, as for commands run in-process).
	stop *signalStop
}

// Command is one CLI command.
type Command struct {
	Name string
	// Synopsis is the usage after "perch <name>", e.g. "[-m MSG] [-s SESSION]".
	Synopsis string
	// Summary is one line for the command list.
	Summary string
	// Help is the longer description shown by --help and in the man page.
	Help string
	// Subcommands are the words accepted after the name (for completion).
	Subcommands []string
	// Flags declares the command's own flags (--config and --help are
	// everyone's).
	Flags func(fs *flag.FlagSet)
	// Run runs the command with the arguments left after the flags.
	Run func(ctx context.Context, e *Env, args []string) error
	// Hidden commands are not listed (used by packaging).
	Hidden bool
	// ListensItself commands call Env.ListenForStop themselves, instead
	// of Run calling it before them: until then a stop signal ends the
	// process at once.
	ListensItself bool
}

// Commands returns every command in the order help lists them.
func Commands() []*Command {
	return []*Command{
		gatewayCommand(), agentCommand(), onboardCommand(), statusCommand(), modelsCommand(),
		cronCommand(), channelsCommand(), skillsCommand(), dbCommand(), versionCommand(), completionCommand(), helpCommand(), manCommand(),
	}
}

func lookup(name string) *Command {
	for _, c := range Commands() {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// Main runs the command line args (without the program name) and returns
// the process's exit code. SIGINT, SIGTERM and SIGHUP cancel the command's
// context.
func Main(args []string, rt Runtime) int {
	ctx, cancel := context.WithCancel(context.Background())
	stop := &signalStop{cancel: cancel}
	defer stop.close()
	e := &Env{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Runtime: rt, stop: stop}
	return Run(ctx, e, args)
}

// signalStop cancels a command's context at the first stop signal, from the
// moment listen is first called. The gateway calls it on a goroutine of its
// own as it begins (asking the runtime for the first signal starts a thread
// that takes its signals, about 0.3 ms of a start of 5 on a small machine,
// which then runs beside reading the config and binding the port) and waits
// for it before it opens the database: a signal that comes after the
// database is open must close it cleanly, or the next start checks every
// record as after a power cut.
type signalStop struct {
	once   sync.Once
	cancel context.CancelFunc
	ch     chan os.Signal
	done   chan struct{}
}

func (s *signalStop) listen() {
	s.once.Do(func() {
		s.ch, s.done = make(chan os.Signal, 1), make(chan struct{})
		signal.Notify(s.ch, stopSignals()...)
		go func() {
			// A second signal is not waited for: the command is
			// already stopping, and stays registered until it returns,
			// so the second one does not end it mid-way.
			select {
			case <-s.ch:
				s.cancel()
			case <-s.done:
			}
		}()
	})
}

func (s *signalStop) close() {
	// Waits for a listen under way on another goroutine, and keeps one
	// from starting after.
	s.once.Do(func() {})
	if s.ch != nil {
		signal.Stop(s.ch)
		close(s.done)
	}
	s.cancel()
}

// ListenForStop makes a stop signal (SIGINT, SIGTERM, SIGHUP) cancel the
// command's context from now on. Run calls it before every command that
// does not listen by itself (ListensItself). It may be called from any
// goroutine.
func (e *Env) ListenForStop() {
	if e.stop != nil {
		e.stop.listen()
	}
}

// stopSignals are the signals that stop a command cleanly. SIGHUP is one:
// when the terminal or SSH session that started `perch gateway` goes away,
// the gateway stops as it does for SIGTERM (turns finished, the database
// closed cleanly) instead of dying where it stands. A command started
// ignoring SIGHUP (nohup) asked to outlive its terminal, and does.
func stopSignals() []os.Signal {
	sigs := []os.Signal{os.Interrupt, syscall.SIGTERM}
	if !signal.Ignored(syscall.SIGHUP) {
		sigs = append(sigs, syscall.SIGHUP)
	}
	return sigs
}

// Run runs args with e and returns the exit code: 0 on success, 1 on any
// failure, after one line on stderr naming the cause.
func Run(ctx context.Context, e *Env, args []string) int {
	if err := run(ctx, e, args); err != nil {
		if errors.Is(err, errReported) {
			return 1
		}
		if ctx.Err() != nil {
			// A stop signal (Ctrl-C) ended the command, whatever the
			// error it ended with (a provider call reports a cancelled
			// request as unreachable): say so.
			fmt.Fprintln(e.Stderr, "perch: interrupted")
			return 1
		}
		fmt.Fprintf(e.Stderr, "perch: %s\n", oneLine(err))
		return 1
	}
	return 0
}

// leadingConfig moves a --config FILE given before the command to after
// it, where every command reads it: "perch --config FILE status" is how
// such a flag is often written. It returns false when a --config lacks
// its file.
func leadingConfig(args []string) ([]string, bool) {
	n := 0
	for n < len(args) {
		switch a := args[n]; {
		case a == "--config" || a == "-config":
			if n+1 >= len(args) {
				return args, false
			}
			n += 2
			continue
		case strings.HasPrefix(a, "--config=") || strings.HasPrefix(a, "-config="):
			n++
			continue
		}
		break
	}
	if n == 0 || n == len(args) {
		return args[n:], true
	}
	out := append([]string{args[n]}, args[:n]...)
	return append(out, args[n+1:]...), true
}

// errReported is returned after the error was already printed.
var errReported = errors.New("reported")

func run(ctx context.Context, e *Env, args []string) error {
	args, ok := leadingConfig(args)
	if !ok {
		return errors.New("--config needs a file: perch --config FILE COMMAND, or perch COMMAND --config FILE")
	}
	if len(args) == 0 {
		writeUsage(e.Stdout)
		return nil
	}
	name := args[0]
	switch name {
	case "--help", "-h", "-help":
		name = "help"
	case "--version", "-v", "-version":
		name = "version"
	}
	c := lookup(name)
	if c == nil {
		fmt.Fprintf(e.Stderr, "perch: unknown command %q%s; the commands are: %s\n", name, suggest(name), strings.Join(names(), ", "))
		return errReported
	}
	fs := flag.NewFlagSet("perch "+c.Name, flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors are reported once, below
	fs.Usage = func() {}
	fs.StringVar(&e.ConfigPath, "config", "", "the config `file` (default $PERCH_HOME/config.json, else ~/.perch/config.json, else the package's /etc/perch/config.json)")
	if c.Flags != nil {
		c.Flags(fs)
	}
	pos, err := parse(fs, args[1:])
	if errors.Is(err, flag.ErrHelp) {
		writeCommandHelp(e.Stdout, c)
		return nil
	}
	if err != nil {
		return fmt.Errorf("%s: %s; see 'perch %s --help'", c.Name, flagError(err, c), c.Name)
	}
	if !c.ListensItself {
		e.ListenForStop()
	}
	return c.Run(ctx, e, pos)
}

// flagError says what the flag package refused in the words the person
// typed (--name, not the package's -name) and, for a flag the command does
// not have, how the command is used.
func flagError(err error, c *Command) string {
	msg := err.Error()
	if name, ok := strings.CutPrefix(msg, "flag provided but not defined: -"); ok {
		out := fmt.Sprintf("unknown flag --%s", strings.TrimLeft(name, "-"))
		if c.Synopsis != "" {
			out += fmt.Sprintf(" (usage: perch %s %s)", c.Name, c.Synopsis)
		}
		return out
	}
	if name, ok := strings.CutPrefix(msg, "flag needs an argument: -"); ok {
		return fmt.Sprintf("--%s needs a value", strings.TrimLeft(name, "-"))
	}
	// "invalid boolean value "maybe" for -json: parse error"
	if rest, ok := strings.CutPrefix(msg, "invalid boolean value "); ok {
		if val, name, ok := strings.Cut(rest, " for -"); ok {
			name, _, _ = strings.Cut(strings.TrimLeft(name, "-"), ":")
			return fmt.Sprintf("--%s takes true or false, not %s", name, val)
		}
	}
	// "invalid value "x" for flag -every: …" and the like.
	return strings.NewReplacer(" for flag -", " for flag --", " for -", " for --").Replace(msg)
}

// parse parses flags wherever they appear among the arguments ("--" ends
// them) and returns the positional ones.
func parse(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// flag stops at "--" and drops it: everything after is positional.
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

// usageError is a wrong use of a command's arguments.
func usageError(c string, format string, a ...any) error {
	return fmt.Errorf("%s: %s; see 'perch %s --help'", c, fmt.Sprintf(format, a...), c)
}

func names() []string {
	var out []string
	for _, c := range Commands() {
		if !c.Hidden {
			out = append(out, c.Name)
		}
	}
	return out
}

// suggest returns ` (did you mean "x"?)` for a near miss.
func suggest(name string) string {
	best := config.Closest(name, names())
	if best == "" {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

// oneLine joins a multi-error into one line: failures are one clear line
// on stderr.
func oneLine(err error) string {
	return strings.ReplaceAll(err.Error(), "\n", "; ")
}

// loadConfig loads the config for a command and prints its warnings
// (unknown PERCH_ variables) to stderr.
func (e *Env) loadConfig() (*config.Config, error) {
	if _, err := actAsHomeOwner(config.Dir()); err != nil {
		return nil, err
	}
	cfg, err := config.Load(config.Options{Path: e.ConfigPath, Env: e.Getenv, Environ: e.Environ})
	if err != nil {
		return nil, err
	}
	for _, w := range cfg.Warnings() {
		fmt.Fprintf(e.Stderr, "perch: warning: %s\n", w)
	}
	return cfg, nil
}

// flagNames lists a FlagSet's flags for help and completion, sorted.
func flagNames(c *Command) []*flag.Flag {
	fs := flag.NewFlagSet(c.Name, flag.ContinueOnError)
	var cfg string
	fs.StringVar(&cfg, "config", "", "the config `file` (default $PERCH_HOME/config.json, else ~/.perch/config.json, else the package's /etc/perch/config.json)")
	if c.Flags != nil {
		c.Flags(fs)
	}
	var out []*flag.Flag
	fs.VisitAll(func(f *flag.Flag) { out = append(out, f) })
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
