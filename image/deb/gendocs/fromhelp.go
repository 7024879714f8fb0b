package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"sort"
	"strings"
	"time"
)

// This file is the only one that knows where the command list comes from:
// today the text of the built binary's `perch help` and `perch <cmd>
// --help`. When the CLI keeps its commands in a table (appliance/cli),
// replace commandsFromHelp with a conversion of that table; man.go and
// bash.go only see []Command.

// helpTimeout bounds each run of the binary: it only prints text.
const helpTimeout = 10 * time.Second

// commandsFromHelp runs the perch binary at bin and reads its commands.
func commandsFromHelp(bin string) (*CLI, error) {
	home, err := os.MkdirTemp("", "gendocs-home-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(home)
	run := func(args ...string) (string, error) {
		ctx, cancel := context.WithTimeout(context.Background(), helpTimeout)
		defer cancel()
		cmd := exec.CommandContext(ctx, bin, args...)
		// An empty home: printing help must not read or create anyone's config.
		cmd.Env = append(os.Environ(), "PERCH_HOME="+home, "HOME="+home)
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		err := cmd.Run()
		if ctx.Err() != nil {
			return "", fmt.Errorf("gendocs: %s %s did not finish within %s", bin, strings.Join(args, " "), helpTimeout)
		}
		var exit *exec.ExitError
		if err != nil && !errors.As(err, &exit) {
			return "", fmt.Errorf("gendocs: run %s: %w", bin, err)
		}
		// `perch <cmd> --help` may exit 1 (the flag package's ErrHelp);
		// the text is what matters.
		return out.String(), nil
	}
	usage, err := run("help")
	if err != nil {
		return nil, err
	}
	cli, err := parseUsage(usage)
	if err != nil {
		return nil, err
	}
	for i := range cli.Commands {
		c := &cli.Commands[i]
		text, err := run(c.Name, "--help")
		if err != nil {
			return nil, err
		}
		c.Flags = mergeFlags(c.Flags, parseFlagHelp(text))
	}
	return cli, nil
}

var (
	entryRE = regexp.MustCompile(`^  perch ([a-z][a-z0-9-]*)\b(.*)$`)
	gapRE   = regexp.MustCompile(`\S(\s{2,})\S`)
)

// parseUsage reads `perch help`:
//
//	perch — one-line description
//
//	Usage:
//	  perch NAME ARGS                   summary
//	  perch NAME ARGS
//	                                    summary on its own line
//	  perch NAME ARGS
//	             more ARGS
//
//	Trailing paragraphs (notes).
//
// A line starting with "  perch " opens an entry; its summary, if any, is
// set off by two or more spaces. An indented line continues the entry: it
// is the summary when it starts in the summary column, else more synopsis.
func parseUsage(text string) (*CLI, error) {
	lines := strings.Split(strings.ReplaceAll(text, "\r\n", "\n"), "\n")
	cli := &CLI{}
	if len(lines) > 0 {
		first := strings.TrimSpace(lines[0])
		if _, desc, ok := strings.Cut(first, " — "); ok {
			cli.Description = strings.TrimSpace(desc)
		} else if _, desc, ok := strings.Cut(first, " - "); ok {
			cli.Description = strings.TrimSpace(desc)
		}
	}

	// The summary column: where summaries start on entry lines.
	col := 0
	for _, l := range lines {
		if entryRE.MatchString(l) {
			if loc := gapRE.FindStringSubmatchIndex(l); loc != nil {
				col = loc[3]
				break
			}
		}
	}

	byName := map[string]int{}
	var cur *Command
	var notes []string
	inUsage := false
	for _, l := range lines {
		if m := entryRE.FindStringSubmatch(l); m != nil {
			inUsage = true
			name := m[1]
			syn, sum := splitSummary("perch " + name + m[2])
			i, ok := byName[name]
			if !ok {
				cli.Commands = append(cli.Commands, Command{Name: name})
				i = len(cli.Commands) - 1
				byName[name] = i
			}
			cur = &cli.Commands[i]
			cur.Synopsis = append(cur.Synopsis, syn)
			if sum != "" {
				cur.Summary = joinText(cur.Summary, sum)
			}
			continue
		}
		trimmed := strings.TrimSpace(l)
		if cur != nil && trimmed != "" && strings.HasPrefix(l, "  ") {
			indent := len(l) - len(strings.TrimLeft(l, " "))
			if col > 0 && indent >= col-1 {
				cur.Summary = joinText(cur.Summary, trimmed)
			} else {
				cur.Synopsis[len(cur.Synopsis)-1] += " " + trimmed
			}
			continue
		}
		if trimmed == "" {
			cur = nil
			if inUsage {
				notes = append(notes, "")
			}
			continue
		}
		if inUsage && cur == nil {
			notes = append(notes, trimmed)
		}
	}
	if len(cli.Commands) == 0 {
		return nil, errors.New("gendocs: no commands found in `perch help`: expected lines starting with '  perch NAME'")
	}
	cli.Notes = paragraphs(notes)
	for i := range cli.Commands {
		c := &cli.Commands[i]
		c.Subcommands = subcommands(c.Name, c.Synopsis)
		for _, s := range c.Synopsis {
			c.Flags = mergeFlags(c.Flags, synopsisFlags(s))
		}
	}
	// Flags every command accepts, from a note such as "Every command
	// accepts --config PATH".
	// The note itself is the flag's description: it says what the default is.
	for _, n := range cli.Notes {
		if strings.Contains(strings.ToLower(n), "every command accepts") {
			for _, f := range synopsisFlags(n) {
				f.Usage = n
				cli.Global = mergeFlags(cli.Global, []Flag{f})
			}
		}
	}
	return cli, nil
}

// splitSummary splits "perch x [--y]   does x" at the first run of two or
// more spaces.
func splitSummary(line string) (synopsis, summary string) {
	if loc := gapRE.FindStringSubmatchIndex(line); loc != nil {
		return strings.TrimSpace(line[:loc[2]]), strings.TrimSpace(line[loc[3]:])
	}
	return strings.TrimSpace(line), ""
}

func joinText(a, b string) string {
	if a == "" {
		return b
	}
	return a + " " + b
}

// paragraphs joins non-empty lines separated by empty ones.
func paragraphs(lines []string) []string {
	var out []string
	cur := ""
	for _, l := range append(lines, "") {
		if l == "" {
			if cur != "" {
				out = append(out, cur)
			}
			cur = ""
			continue
		}
		cur = joinText(cur, l)
	}
	return out
}

var subRE = regexp.MustCompile(`^[a-z][a-z0-9-]*$`)

// subcommands reads the words after "perch NAME" that are literal
// subcommands: "list", "remove|enable|disable", "list | show NAME | …".
func subcommands(name string, synopses []string) []string {
	seen := map[string]bool{}
	var out []string
	add := func(w string) {
		if subRE.MatchString(w) && !seen[w] {
			seen[w] = true
			out = append(out, w)
		}
	}
	for _, s := range synopses {
		rest := strings.TrimSpace(strings.TrimPrefix(s, "perch "+name))
		for _, alt := range strings.Split(rest, " | ") {
			fields := strings.Fields(alt)
			if len(fields) == 0 {
				continue
			}
			for _, w := range strings.Split(fields[0], "|") {
				add(w)
			}
		}
	}
	return out
}

var synFlagRE = regexp.MustCompile(`(?:^|[\s\[(|])(--?[a-zA-Z][a-zA-Z0-9-]*)(?:[ =]([A-Z][A-Z_]*|'[A-Z]+'))?`)

// synopsisFlags finds "--flag", "-f VALUE", "--flag 'EXPR'" in a synopsis.
func synopsisFlags(s string) []Flag {
	var out []Flag
	for _, m := range synFlagRE.FindAllStringSubmatch(s, -1) {
		out = append(out, Flag{Name: strings.TrimLeft(m[1], "-"), Arg: strings.Trim(m[2], "'")})
	}
	return out
}

var (
	goFlagRE   = regexp.MustCompile(`^\s{1,4}(-{1,2})([a-zA-Z][a-zA-Z0-9-]*)(?:[ =](\S+))?\s*(?:\s{2,}(.*))?$`)
	goUsageRE  = regexp.MustCompile(`^\s+\t?(\S.*)$`)
	goSkipLine = regexp.MustCompile(`^(Usage|usage)\b`)
)

// parseFlagHelp reads the flag package's help:
//
//	Usage of perch cron:
//	  -at SECONDS
//	    	run once, SECONDS from now
//	  -json
//	    	print JSON (list)
//
// and also one-line forms ("  --json   print JSON").
func parseFlagHelp(text string) []Flag {
	var out []Flag
	var cur *Flag
	for _, l := range strings.Split(text, "\n") {
		if goSkipLine.MatchString(l) || strings.TrimSpace(l) == "" {
			cur = nil
			continue
		}
		if m := goFlagRE.FindStringSubmatch(l); m != nil && !strings.Contains(l, "\t") {
			out = append(out, Flag{Name: m[2], Arg: m[3], Usage: strings.TrimSpace(m[4])})
			cur = &out[len(out)-1]
			continue
		}
		if m := goUsageRE.FindStringSubmatch(l); m != nil && cur != nil {
			cur.Usage = joinText(cur.Usage, strings.TrimSpace(m[1]))
		}
	}
	return out
}

// mergeFlags adds b's flags to a: a flag known from both keeps a's
// position, b's usage text when a has none, and an argument name from
// either.
func mergeFlags(a, b []Flag) []Flag {
	idx := map[string]int{}
	for i, f := range a {
		idx[f.Name] = i
	}
	for _, f := range b {
		i, ok := idx[f.Name]
		if !ok {
			a = append(a, f)
			idx[f.Name] = len(a) - 1
			continue
		}
		if a[i].Usage == "" {
			a[i].Usage = f.Usage
		}
		if a[i].Arg == "" {
			a[i].Arg = f.Arg
		}
	}
	return a
}

// sortedFlags returns fs by name, without the global ones.
func sortedFlags(fs, global []Flag) []Flag {
	skip := map[string]bool{}
	for _, g := range global {
		skip[g.Name] = true
	}
	var out []Flag
	for _, f := range fs {
		if !skip[f.Name] {
			out = append(out, f)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
