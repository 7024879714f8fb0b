package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/perchhq/perch/appliance/version"
)

const intro = "perch — a chat-driven AI agent appliance for small Linux boards"

// writeUsage prints the command list.
func writeUsage(w io.Writer) {
	fmt.Fprintf(w, "%s\n\nUsage: perch <command> [flags]\n\nCommands:\n", intro)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, c := range Commands() {
		if !c.Hidden {
			fmt.Fprintf(tw, "  %s\t%s\n", c.Name, c.Summary)
		}
	}
	tw.Flush()
	fmt.Fprint(w, "\nEvery command accepts --config FILE and --help. 'perch help <command>' shows a command's usage.\n")
}

// writeCommandHelp prints one command's usage, description and flags.
func writeCommandHelp(w io.Writer, c *Command) {
	fmt.Fprintf(w, "Usage: perch %s", c.Name)
	if c.Synopsis != "" {
		fmt.Fprintf(w, " %s", c.Synopsis)
	}
	fmt.Fprintf(w, "\n\n%s\n", c.Summary)
	if c.Help != "" {
		fmt.Fprintf(w, "\n%s\n", strings.TrimSpace(c.Help))
	}
	fmt.Fprint(w, "\nFlags:\n")
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	for _, f := range flagNames(c) {
		arg, usage := flagArg(f)
		fmt.Fprintf(tw, "  %s\t%s\n", arg, usage)
	}
	fmt.Fprintf(tw, "  --help\tshow this help\n")
	tw.Flush()
}

func helpCommand() *Command {
	return &Command{
		Name:     "help",
		Synopsis: "[COMMAND]",
		Summary:  "show the commands, or one command's usage",
		Run: func(_ context.Context, e *Env, args []string) error {
			switch len(args) {
			case 0:
				writeUsage(e.Stdout)
				return nil
			case 1:
				c := lookup(args[0])
				if c == nil {
					return fmt.Errorf("help: unknown command %q%s; the commands are: %s", args[0], suggest(args[0]), strings.Join(names(), ", "))
				}
				writeCommandHelp(e.Stdout, c)
				return nil
			}
			return usageError("help", "give at most one command")
		},
	}
}

// manCommand writes perch(1) in roff, from the same definitions as help.
func manCommand() *Command {
	return &Command{
		Name:    "man",
		Summary: "write the perch(1) manual page in roff (for packaging)",
		Hidden:  true,
		Run: func(_ context.Context, e *Env, args []string) error {
			if len(args) != 0 {
				return usageError("man", "takes no arguments")
			}
			writeMan(e.Stdout)
			return nil
		},
	}
}

func roff(s string) string {
	s = strings.ReplaceAll(s, `\`, `\e`)
	s = strings.ReplaceAll(s, "-", `\-`)
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.HasPrefix(line, ".") || strings.HasPrefix(line, "'") {
			line = `\&` + line
		}
		out = append(out, line)
	}
	return strings.Join(out, "\n")
}

func writeMan(w io.Writer) {
	v := version.Get()
	date := v.BuildTime
	if len(date) >= 10 {
		date = date[:10]
	}
	if e := os.Getenv("SOURCE_DATE_EPOCH"); e != "" {
		if sec, err := strconv.ParseInt(e, 10, 64); err == nil {
			date = time.Unix(sec, 0).UTC().Format("2006-01-02")
		}
	}
	fmt.Fprintf(w, ".TH PERCH 1 %q %q \"User Commands\"\n", date, "perch "+v.Version)
	// Commands, flags and paths break only between words, and lines are
	// not stretched: a hyphenated "re-move" or a padded "perch  skills"
	// cannot be copied or searched for as written.
	fmt.Fprintln(w, ".nh")
	fmt.Fprintln(w, ".ad l")
	fmt.Fprintln(w, ".SH NAME")
	fmt.Fprintln(w, `perch \- a chat\-driven AI agent appliance for small Linux boards`)
	fmt.Fprintln(w, ".SH SYNOPSIS")
	fmt.Fprintln(w, ".B perch")
	fmt.Fprintln(w, ".I command")
	fmt.Fprintln(w, "[flags]")
	fmt.Fprintln(w, ".SH DESCRIPTION")
	fmt.Fprintln(w, roff("Perch turns a Raspberry Pi or any ARM or x86 Linux board into an AI agent you talk to from chat apps, "+
		"its web page or this command line. It answers through an LLM provider, runs tools (files, shell, web, schedules) "+
		"and reads the board's sensors. The gateway command runs the service; the other commands configure and inspect it. "+
		"Every command accepts --config FILE and --help."))
	fmt.Fprintln(w, ".SH COMMANDS")
	for _, c := range Commands() {
		if c.Hidden {
			continue
		}
		syn := "perch " + c.Name
		if c.Synopsis != "" {
			syn += " " + strings.Fields(c.Synopsis)[0]
			if first, _, _ := strings.Cut(c.Synopsis, "\n"); first != "" {
				syn = "perch " + c.Name + " " + first
			}
		}
		fmt.Fprintf(w, ".SS \"%s\"\n", roff(syn))
		if rest := strings.SplitN(c.Synopsis, "\n", 2); len(rest) == 2 {
			var lines []string
			for _, l := range strings.Split(rest[1], "\n") {
				lines = append(lines, "  "+strings.TrimSpace(l))
			}
			fmt.Fprintf(w, ".nf\n%s\n.fi\n", roff(strings.Join(lines, "\n")))
		}
		fmt.Fprintln(w, ".PP")
		fmt.Fprintln(w, roff(upperFirst(c.Summary)+"."))
		if c.Help != "" {
			for _, para := range strings.Split(strings.TrimSpace(c.Help), "\n\n") {
				fmt.Fprintf(w, ".PP\n%s\n", roff(strings.Join(strings.Fields(para), " ")))
			}
		}
		for _, f := range flagNames(c) {
			if f.Name == "config" {
				continue
			}
			arg, usage := flagArg(f)
			fmt.Fprintf(w, ".TP\n.B %s\n%s\n", roff(arg), roff(usage))
		}
	}
	fmt.Fprintln(w, ".SH FILES")
	fmt.Fprintln(w, ".TP\n.I $PERCH_HOME/config.json")
	fmt.Fprintln(w, roff("The configuration (default home ~/.perch). The Debian package's service uses /etc/perch/config.json and the home /var/lib/perch; "+
		"without PERCH_HOME or a ~/.perch/config.json, commands use those too. Run them with sudo: root acts as the user who owns the home (perch), "+
		"so what a command creates there stays the service's."))
	fmt.Fprintln(w, ".TP\n.I $PERCH_HOME/perch.db")
	fmt.Fprintln(w, roff("Sessions, cron jobs, device state and sensor history (bbolt)."))
	fmt.Fprintln(w, ".TP\n.I $PERCH_HOME/workspace")
	fmt.Fprintln(w, roff("The agent's files."))
	fmt.Fprintln(w, ".SH ENVIRONMENT")
	fmt.Fprintln(w, roff("PERCH_HOME moves the config directory. Every config key can be overridden by PERCH_ followed by its path "+
		"upper-cased with underscores, e.g. PERCH_GATEWAY_PORT=9090."))
	fmt.Fprintln(w, ".SH EXIT STATUS")
	fmt.Fprintln(w, roff("0 on success; 1 on any failure, with one line on standard error naming the cause and the key or flag to fix."))
}

// flagArg is a flag as typed ("-m MESSAGE", "--every DURATION") and its
// usage text with the default.
func flagArg(f *flag.Flag) (string, string) {
	name, usage := flag.UnquoteUsage(f)
	arg := "--" + f.Name
	if len(f.Name) == 1 {
		arg = "-" + f.Name
	}
	if name != "" {
		arg += " " + strings.ToUpper(name)
	}
	if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
		usage += fmt.Sprintf(" (default %s)", f.DefValue)
	}
	return arg, usage
}

func upperFirst(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}

func completionCommand() *Command {
	return &Command{
		Name:        "completion",
		Synopsis:    "bash",
		Summary:     "print the shell completion script",
		Help:        "Load it with: source <(perch completion bash). The Debian package installs it for bash, for every user.",
		Subcommands: []string{"bash"},
		Run: func(_ context.Context, e *Env, args []string) error {
			if len(args) == 1 && args[0] != "bash" {
				return usageError("completion", "there is a completion script for bash only, not for %s", args[0])
			}
			if len(args) != 1 {
				return usageError("completion", "give the shell: bash")
			}
			writeBashCompletion(e.Stdout)
			return nil
		},
	}
}

// writeBashCompletion completes commands, their subcommands and flags, and
// file names after flags that take a file. It needs nothing from the
// bash-completion package, which a minimal system may lack, but uses its
// _filedir when present.
func writeBashCompletion(w io.Writer) {
	p := func(format string, args ...any) { fmt.Fprintf(w, format+"\n", args...) }
	p("# bash completion for perch (generated by 'perch completion bash')")
	p("_perch() {")
	p(`  local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}`)
	p(`  COMPREPLY=()`)
	valued, files := map[string]bool{}, map[string]bool{}
	for _, c := range Commands() {
		for _, f := range flagNames(c) {
			arg, _ := flagArg(f)
			spelling, value, ok := strings.Cut(arg, " ")
			if !ok {
				continue
			}
			valued[spelling] = true
			if value == "FILE" || value == "FOLDER" {
				files[spelling] = true
			}
		}
	}
	var rest []string
	for _, k := range slices.Sorted(maps.Keys(valued)) {
		if !files[k] {
			rest = append(rest, k)
		}
	}
	p(`  case $prev in`)
	p(`    %s)`, strings.Join(slices.Sorted(maps.Keys(files)), "|"))
	p(`      if declare -F _filedir >/dev/null; then _filedir; else COMPREPLY=($(compgen -f -- "$cur")); fi`)
	p(`      return ;;`)
	p(`    %s)`, strings.Join(rest, "|"))
	p(`      return ;;`)
	p(`  esac`)
	p(`  if [ "$COMP_CWORD" -eq 1 ]; then`)
	p(`    COMPREPLY=($(compgen -W %s -- "$cur"))`, shellQuote(strings.Join(names(), " ")))
	p(`    return`)
	p(`  fi`)
	p(`  case ${COMP_WORDS[1]} in`)
	for _, c := range Commands() {
		if c.Hidden {
			continue
		}
		var flags []string
		for _, f := range flagNames(c) {
			arg, _ := flagArg(f)
			spelling, _, _ := strings.Cut(arg, " ")
			flags = append(flags, spelling)
		}
		flags = append(flags, "--help")
		p(`    %s)`, c.Name)
		if len(c.Subcommands) > 0 {
			p(`      if [ "$COMP_CWORD" -eq 2 ] && [[ $cur != -* ]]; then`)
			p(`        COMPREPLY=($(compgen -W %s -- "$cur"))`, shellQuote(strings.Join(c.Subcommands, " ")))
			p(`        return`)
			p(`      fi`)
		}
		p(`      COMPREPLY=($(compgen -W %s -- "$cur")) ;;`, shellQuote(strings.Join(flags, " ")))
	}
	p(`  esac`)
	p("}")
	p("complete -F _perch perch")
}

func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
