package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
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
		name, usage := flag.UnquoteUsage(f)
		arg := "--" + f.Name
		if name != "" {
			arg += " " + strings.ToUpper(name)
		}
		def := ""
		if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" {
			def = fmt.Sprintf(" (default %s)", f.DefValue)
		}
		fmt.Fprintf(tw, "  %s\t%s%s\n", arg, usage, def)
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
	fmt.Fprintln(w, `.TH PERCH 1 "" "perch" "User Commands"`)
	fmt.Fprintln(w, ".SH NAME")
	fmt.Fprintln(w, roff(`perch \- a chat-driven AI agent appliance for small Linux boards`))
	fmt.Fprintln(w, ".SH SYNOPSIS")
	fmt.Fprintln(w, `.B perch`)
	fmt.Fprintln(w, `.I command`)
	fmt.Fprintln(w, `[flags]`)
	fmt.Fprintln(w, ".SH DESCRIPTION")
	fmt.Fprintln(w, roff("Perch turns a Raspberry Pi or any ARM or x86 Linux board into an AI agent you talk to from chat apps, "+
		"its web page or this command line. It answers through an LLM provider, runs tools (files, shell, web, schedules) "+
		"and reads the board's sensors. The gateway command runs the service; the other commands configure and inspect it."))
	fmt.Fprintln(w, ".SH COMMANDS")
	for _, c := range Commands() {
		if c.Hidden {
			continue
		}
		fmt.Fprintln(w, ".TP")
		fmt.Fprintf(w, ".B perch %s\n", roff(c.Name))
		if c.Synopsis != "" {
			fmt.Fprintf(w, "%s\n.br\n", roff(c.Synopsis))
		}
		fmt.Fprintln(w, roff(c.Summary+"."))
		if c.Help != "" {
			for _, para := range strings.Split(strings.TrimSpace(c.Help), "\n\n") {
				fmt.Fprintf(w, ".IP\n%s\n", roff(strings.TrimSpace(para)))
			}
		}
		for _, f := range flagNames(c) {
			name, usage := flag.UnquoteUsage(f)
			arg := "\\-\\-" + roff(f.Name)
			if name != "" {
				arg += " " + roff(strings.ToUpper(name))
			}
			fmt.Fprintf(w, ".IP \"%s\"\n%s\n", arg, roff(usage))
		}
	}
	fmt.Fprintln(w, ".SH FILES")
	fmt.Fprintln(w, ".TP\n.I $PERCH_HOME/config.json")
	fmt.Fprintln(w, roff("The configuration (default home ~/.perch; the Debian package uses /etc/perch/config.json and PERCH_HOME=/var/lib/perch)."))
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

func completionCommand() *Command {
	return &Command{
		Name:        "completion",
		Synopsis:    "bash",
		Summary:     "print the shell completion script",
		Help:        "Load it with: source <(perch completion bash). The Debian package installs it for every shell.",
		Subcommands: []string{"bash"},
		Run: func(_ context.Context, e *Env, args []string) error {
			if len(args) != 1 || args[0] != "bash" {
				return usageError("completion", "give the shell: bash")
			}
			writeBashCompletion(e.Stdout)
			return nil
		},
	}
}

func writeBashCompletion(w io.Writer) {
	fmt.Fprintln(w, "# bash completion for perch (generated by 'perch completion bash')")
	fmt.Fprintln(w, "_perch() {")
	fmt.Fprintln(w, `  local cur=${COMP_WORDS[COMP_CWORD]} cmd=${COMP_WORDS[1]}`)
	fmt.Fprintf(w, "  if [ \"$COMP_CWORD\" -eq 1 ]; then COMPREPLY=($(compgen -W %q -- \"$cur\")); return; fi\n", strings.Join(names(), " "))
	fmt.Fprintln(w, `  case $cmd in`)
	for _, c := range Commands() {
		if c.Hidden {
			continue
		}
		var words []string
		for _, f := range flagNames(c) {
			words = append(words, "--"+f.Name)
		}
		words = append(words, "--help")
		sub := ""
		if len(c.Subcommands) > 0 {
			sub = fmt.Sprintf("if [ \"$COMP_CWORD\" -eq 2 ]; then COMPREPLY=($(compgen -W %q -- \"$cur\")); return; fi; ", strings.Join(c.Subcommands, " "))
		}
		fmt.Fprintf(w, "    %s) %sCOMPREPLY=($(compgen -W %q -- \"$cur\")) ;;\n", c.Name, sub, strings.Join(words, " "))
	}
	fmt.Fprintln(w, "  esac")
	fmt.Fprintln(w, "}")
	fmt.Fprintln(w, "complete -o default -F _perch perch")
}
