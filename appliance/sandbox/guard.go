package sandbox

import (
	"fmt"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
)

// The deny list is a guard rail, not the security boundary: it
// refuses the well-known destructive commands early and with a clear reason,
// so a model that asks for `rm -rf` or `reboot` learns why at once. It
// cannot see through variables filled at run time, scripts written to files
// or interpreters (`python3 -c`), and it is not meant to: what a command can
// reach is decided by the Landlock ruleset, the dropped privileges and the
// resource limits of the Runner.
//
// The line is normalised before the rules look at it, so that spellings do
// not matter: quotes and backslashes are removed (r'm', \rm, "rm"), command
// names are compared without case, ${IFS} is a space, paths are reduced to
// the command's name (/bin/rm), wrappers are looked through (sudo is refused outright; env,
// nice, timeout, xargs, busybox, command, exec, nohup, setsid, stdbuf,
// time, …), and command strings are checked as commands of their own
// (sh -c '…', eval, $(…), `…`, <(…), find -exec, watch, trap, alias).

// Rules of the deny list, as named in refusals.
const (
	RulePrivilege     = "privilege-escalation"
	RuleRecursiveRm   = "recursive-force-delete"
	RuleWindowsDelete = "windows-forced-delete"
	RuleFormat        = "format"
	RuleMkfs          = "mkfs"
	RuleDiskpart      = "diskpart"
	RuleDD            = "dd"
	RuleDiskWrite     = "disk-device-write"
	RuleShutdown      = "shutdown"
	RuleForkBomb      = "fork-bomb"
	RuleNesting       = "nesting"
)

// BlockedError is a refusal by the deny list.
type BlockedError struct {
	// Rule is one of the Rule* names.
	Rule string
	// Reason says what the rule is about and what to do instead.
	Reason string
	// Command is the normalised simple command that matched.
	Command string
}

func (e *BlockedError) Error() string {
	return fmt.Sprintf("sandbox: command refused by deny-list rule %s: %s (matched %q)", e.Rule, e.Reason, e.Command)
}

// The tables below are built on first use, like the regexps: every
// command's launcher is this binary, and it and the gateway would
// otherwise build them at every start.
var ruleReasons = sync.OnceValue(func() map[string]string {
	return map[string]string{
		RulePrivilege:     "privilege escalation (sudo, su, doas, pkexec, run0, systemd-run) is not available; commands run as the gateway's user",
		RuleRecursiveRm:   "rm with both recursive and force options; delete named files, or use rm -r without -f",
		RuleWindowsDelete: "forced or recursive delete (del /f /s /q, rd /s, Remove-Item -Recurse -Force)",
		RuleFormat:        "formatting a disk",
		RuleMkfs:          "making a filesystem or wiping a disk (mkfs, mke2fs, mkswap, wipefs)",
		RuleDiskpart:      "disk partitioning with diskpart",
		RuleDD:            "dd with if= (raw disk copies); use cp, head -c or truncate for files",
		RuleDiskWrite:     "writing to a disk or memory device",
		RuleShutdown:      "shutting down, rebooting or suspending the machine",
		RuleForkBomb:      "a fork bomb (a function that starts itself in the background or in a pipe)",
		RuleNesting:       "command strings nested too deeply to check",
	}
})

func blocked(rule, cmd string) *BlockedError {
	if len(cmd) > 200 {
		cmd = cmd[:200] + "…"
	}
	return &BlockedError{Rule: rule, Reason: ruleReasons()[rule], Command: cmd}
}

// maxNesting bounds sh -c / eval / $(…) nesting; deeper lines are refused.
const maxNesting = 8

// CheckCommand applies the deny list to a shell command line. It returns nil
// or a *BlockedError naming the rule. Runner.Run calls it; the cron tool can
// call it to refuse a job when it is added rather than when it fires.
func CheckCommand(line string) error {
	if b := checkLine(line, 0); b != nil {
		return b
	}
	return nil
}

func checkLine(line string, depth int) *BlockedError {
	if depth > maxNesting {
		return blocked(RuleNesting, line)
	}
	line = strings.NewReplacer("${IFS}", " ", "$IFS", " ").Replace(line)
	toks, subs := lex(line)
	for _, s := range subs {
		if b := checkLine(s, depth+1); b != nil {
			return b
		}
	}
	if b := checkForkBomb(toks); b != nil {
		return b
	}
	vars := map[string]string{}
	for _, c := range simpleCommands(toks) {
		if b := checkSimple(c, vars, depth); b != nil {
			return b
		}
	}
	return nil
}

// maxFuncDefs bounds the function bodies scanned per line, so a line of
// thousands of definitions costs linear time, not quadratic.
const maxFuncDefs = 64

// checkForkBomb finds functions that call themselves in the background or
// in a pipe: :(){ :|:& };: and every renamed variant.
func checkForkBomb(toks []tok) *BlockedError {
	defs := 0
	for i := 0; i < len(toks) && defs < maxFuncDefs; i++ {
		var name string
		var body int // index of the body's opening token
		switch {
		case !toks[i].op && i+3 < len(toks) && toks[i+1].op && toks[i+1].text == "(" &&
			toks[i+2].op && toks[i+2].text == ")":
			name, body = toks[i].text, i+3
		case !toks[i].op && !toks[i].quoted && toks[i].text == "function" && i+2 < len(toks) && !toks[i+1].op:
			name, body = toks[i+1].text, i+2
			if body < len(toks) && toks[body].op && toks[body].text == "(" &&
				body+1 < len(toks) && toks[body+1].op && toks[body+1].text == ")" {
				body += 2
			}
		default:
			continue
		}
		defs++
		for body < len(toks) && toks[body].op && toks[body].text == "\n" {
			body++
		}
		if body >= len(toks) {
			continue
		}
		open, close := toks[body].text, "}"
		if toks[body].op && open == "(" {
			close = ")"
		} else if toks[body].op || open != "{" {
			continue
		}
		depth := 0
		for j := body; j < len(toks); j++ {
			t := toks[j]
			if t.text == open && (t.op || !t.quoted) {
				depth++
			} else if t.text == close && (t.op || !t.quoted) {
				depth--
				if depth == 0 {
					break
				}
			}
			if t.op || t.text != name {
				continue
			}
			// name as a word next to | or & inside its own body.
			prev, next := toks[j-1], tok{}
			if j+1 < len(toks) {
				next = toks[j+1]
			}
			if prev.op && (prev.text == "|" || prev.text == "|&") ||
				next.op && (next.text == "|" || next.text == "&" || next.text == "|&") {
				return blocked(RuleForkBomb, name+"(){ … }")
			}
		}
	}
	return nil
}

// Compiled on first use: every command start-up (the launcher is this
// binary) would otherwise pay for it.
var assignRe = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*\+?=`) })

// reservedPrefixes come before a command without being one.
var reservedPrefixes = sync.OnceValue(func() map[string]bool {
	return map[string]bool{
		"!": true, "if": true, "then": true, "elif": true, "else": true, "do": true,
		"while": true, "until": true, "time": true, "fi": true, "done": true, "esac": true,
	}
})

// wrapper describes a command that runs the rest of its arguments as a
// command: which of its options take a separate argument, and how many
// plain arguments come before the command.
type wrapper struct {
	argOpts    []string
	positional int
}

var wrappers = sync.OnceValue(func() map[string]wrapper {
	return map[string]wrapper{
		"command":  {},
		"builtin":  {},
		"exec":     {argOpts: []string{"-a"}},
		"nohup":    {},
		"nice":     {argOpts: []string{"-n", "--adjustment"}},
		"ionice":   {argOpts: []string{"-c", "-n", "-p", "--class", "--classdata"}},
		"chrt":     {positional: 1},
		"taskset":  {argOpts: []string{"-c", "--cpu-list"}, positional: 1},
		"setsid":   {},
		"stdbuf":   {argOpts: []string{"-i", "-o", "-e", "--input", "--output", "--error"}},
		"unbuffer": {},
		"env":      {argOpts: []string{"-u", "--unset", "-C", "--chdir"}},
		"timeout":  {argOpts: []string{"-s", "--signal", "-k", "--kill-after"}, positional: 1},
		"time":     {argOpts: []string{"-f", "--format", "-o", "--output"}},
		"xargs": {argOpts: []string{"-I", "-n", "-P", "-d", "-s", "-L", "-E", "-a",
			"--max-args", "--max-procs", "--delimiter", "--max-chars", "--max-lines", "--arg-file", "--eof"}},
		"busybox":   {},
		"flock":     {argOpts: []string{"-w", "--timeout", "-E", "--conflict-exit-code"}, positional: 1},
		"strace":    {argOpts: []string{"-o", "-e", "-p", "-s", "-u", "-a", "-E", "-O", "-S", "-X", "-P", "-I", "-b"}},
		"ltrace":    {argOpts: []string{"-o", "-e", "-p", "-s", "-u", "-a"}},
		"catchsegv": {},
		"fakeroot":  {},
		"firejail":  {},
		"proot":     {},
		"sg":        {positional: 1},
	}
})

var shells = sync.OnceValue(func() map[string]bool {
	return map[string]bool{
		"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "ash": true,
		"mksh": true, "yash": true, "posh": true, "rbash": true,
	}
})

var privilegeCmds = sync.OnceValue(func() map[string]bool {
	return map[string]bool{
		"sudo": true, "sudoedit": true, "su": true, "doas": true, "pkexec": true, "run0": true,
		"systemd-run": true,
	}
})

var mkfsCmds = sync.OnceValue(func() map[string]bool {
	return map[string]bool{
		"mkfs": true, "mke2fs": true, "mkswap": true, "mkdosfs": true, "mkntfs": true,
		"mkexfatfs": true, "wipefs": true,
	}
})

var shutdownCmds = sync.OnceValue(func() map[string]bool {
	return map[string]bool{
		"shutdown": true, "reboot": true, "poweroff": true, "halt": true, "kexec": true,
		"openrc-shutdown": true,
	}
})

var shutdownVerbs = sync.OnceValue(func() map[string]bool {
	return map[string]bool{
		"poweroff": true, "reboot": true, "halt": true, "kexec": true, "soft-reboot": true,
		"rescue": true, "emergency": true, "suspend": true, "hibernate": true, "hybrid-sleep": true,
		"suspend-then-hibernate": true, "sleep": true,
		"poweroff.target": true, "reboot.target": true, "halt.target": true, "kexec.target": true,
		"rescue.target": true, "emergency.target": true, "ctrl-alt-del.target": true, "soft-reboot.target": true,
		"suspend.target": true, "hibernate.target": true,
	}
})

// writeCmds write to the paths they are given.
var writeCmds = sync.OnceValue(func() map[string]bool {
	return map[string]bool{
		"tee": true, "cp": true, "mv": true, "install": true, "shred": true, "truncate": true,
		"ln": true, "rsync": true, "pv": true,
	}
})

// Compiled on first use: every command start-up (the launcher is this
// binary) would otherwise pay for it.
var diskRe = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(^|/)dev/(sd[a-z]|hd[a-z]|vd[a-z]|xvd[a-z]|nvme[0-9]|mmcblk[0-9]|mtdblock[0-9]|mtd[0-9]|loop[0-9]|md[0-9]|dm-[0-9]|nbd[0-9]|sr[0-9]|ram[0-9]|zram[0-9]|ubi|disk/|mapper/|block/|root$|mem$|kmem$|port$)`)
})

// Compiled on first use: every command start-up (the launcher is this
// binary) would otherwise pay for it.
var interpBombRe = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`(?i)(while|loop|until|for)[^;]{0,40}\bfork\b|\bfork\b.{0,12}\b(while|until)\b`)
})

// writeTarget checks a path a command writes to.
func writeTarget(p string, cmd string) *BlockedError {
	p = path.Clean(p)
	if diskRe().MatchString(p) {
		return blocked(RuleDiskWrite, cmd)
	}
	if strings.HasSuffix(p, "proc/sysrq-trigger") {
		return blocked(RuleShutdown, cmd)
	}
	return nil
}

func checkSimple(c simpleCmd, vars map[string]string, depth int) *BlockedError {
	words := c.words
	show := strings.Join(append(append([]string{}, words...), c.targets...), " ")
	for _, t := range c.targets {
		if b := writeTarget(t, show); b != nil {
			return b
		}
	}
	for rounds := 0; len(words) > 0 && rounds < 32; rounds++ {
		w := words[0]
		if assignRe().MatchString(w) {
			name, val, _ := strings.Cut(w, "=")
			vars[strings.TrimSuffix(name, "+")] = val
			words = words[1:]
			continue
		}
		if v, ok := lookupVar(w, vars); ok {
			words = append(strings.Fields(v), words[1:]...)
			if len(words) == 0 {
				return nil
			}
			w = words[0]
		}
		name := commandName(w)
		switch {
		case reservedPrefixes()[name]:
			words = words[1:]
			continue
		case name == "for" || name == "select" || name == "case" || name == "in" || name == "function":
			return nil
		case privilegeCmds()[name]:
			return blocked(RulePrivilege, show)
		case shells()[name]:
			for _, script := range shellScripts(words[1:]) {
				if b := checkLine(script, depth+1); b != nil {
					return b
				}
			}
			return nil
		case name == "eval":
			return checkLine(strings.Join(words[1:], " "), depth+1)
		case name == "trap":
			if len(words) > 1 {
				return checkLine(words[1], depth+1)
			}
			return nil
		case name == "watch":
			rest := skipOptions(words[1:], wrapper{argOpts: []string{"-n", "--interval", "-d"}})
			return checkLine(strings.Join(rest, " "), depth+1)
		case name == "alias" || name == "export" || name == "local" || name == "declare" || name == "readonly":
			for _, a := range words[1:] {
				if n, v, ok := strings.Cut(a, "="); ok {
					vars[n] = v
					if name == "alias" {
						if b := checkLine(v, depth+1); b != nil {
							return b
						}
					}
				}
			}
			return nil
		case name == "find":
			return checkFindExec(words[1:], vars, depth)
		case name == "env" && hasSplitString(words[1:]):
			return checkLine(splitStringArg(words[1:]), depth+1)
		}
		if wr, ok := wrappers()[name]; ok {
			words = skipOptions(words[1:], wr)
			if name == "env" {
				for len(words) > 0 && strings.Contains(words[0], "=") {
					words = words[1:]
				}
			}
			continue
		}
		if b := checkGlobName(w, words[1:], show); b != nil {
			return b
		}
		return checkRules(name, words[1:], show)
	}
	return nil
}

// lookupVar resolves $name or ${name} assigned earlier on the line.
func lookupVar(w string, vars map[string]string) (string, bool) {
	var name string
	switch {
	case strings.HasPrefix(w, "${") && strings.HasSuffix(w, "}"):
		name = w[2 : len(w)-1]
	case strings.HasPrefix(w, "$"):
		name = w[1:]
	default:
		return "", false
	}
	v, ok := vars[name]
	return v, ok
}

// commandName reduces a command word to its lower-case name:
// /usr/bin/RM -> rm.
func commandName(w string) string {
	if i := strings.LastIndexByte(w, '/'); i >= 0 && i < len(w)-1 {
		w = w[i+1:]
	}
	return strings.ToLower(w)
}

// checkGlobName resolves a command word with wildcards (/???/r?) against
// the filesystem, as the shell would, and checks each match.
func checkGlobName(w string, args []string, show string) *BlockedError {
	// Three levels at most: /*/*/*/* would walk /proc for seconds.
	if !strings.ContainsAny(w, "*?[") || !strings.HasPrefix(w, "/") || len(w) > 128 || strings.Count(w, "/") > 3 {
		return nil
	}
	matches, _ := filepath.Glob(w)
	if len(matches) > 256 {
		matches = matches[:256]
	}
	for _, m := range matches {
		if b := checkRules(strings.ToLower(filepath.Base(m)), args, show); b != nil {
			return b
		}
	}
	return nil
}

// skipOptions drops a wrapper's options and plain arguments, returning the
// wrapped command.
func skipOptions(words []string, wr wrapper) []string {
	for len(words) > 0 {
		w := words[0]
		if w == "--" {
			words = words[1:]
			break
		}
		if !strings.HasPrefix(w, "-") || w == "-" {
			break
		}
		words = words[1:]
		for _, o := range wr.argOpts {
			if w == o && len(words) > 0 {
				words = words[1:]
				break
			}
		}
	}
	for n := 0; n < wr.positional && len(words) > 0; n++ {
		words = words[1:]
	}
	return words
}

// shellScripts returns what `sh -c STRING` may run (also -ec, -xc,
// -o opt -c, -c -- STRING): every argument after the -c, since which one
// the shell takes depends on options this check need not understand, and
// checking more than needed only errs on the safe side. A shell given a
// script file instead returns nothing: the file is not visible here.
func shellScripts(args []string) []string {
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--" || !strings.HasPrefix(a, "-") && !strings.HasPrefix(a, "+"):
			return nil
		case a == "-o" || a == "+o" || a == "-O" || a == "+O" || a == "--rcfile" || a == "--init-file":
			i++ // takes an argument
		case !strings.HasPrefix(a, "--") && strings.Contains(a, "c"):
			return args[i+1:]
		}
	}
	return nil
}

func hasSplitString(args []string) bool {
	for _, a := range args {
		if a == "--split-string" || strings.HasPrefix(a, "--split-string=") ||
			(strings.HasPrefix(a, "-S") && !strings.HasPrefix(a, "--")) {
			return true
		}
		if !strings.HasPrefix(a, "-") {
			return false
		}
	}
	return false
}

func splitStringArg(args []string) string {
	for i, a := range args {
		switch {
		case a == "-S" || a == "--split-string":
			return strings.Join(args[i+1:], " ")
		case strings.HasPrefix(a, "--split-string="):
			return strings.TrimPrefix(a, "--split-string=") + " " + strings.Join(args[i+1:], " ")
		case strings.HasPrefix(a, "-S"):
			return a[2:] + " " + strings.Join(args[i+1:], " ")
		}
	}
	return ""
}

// checkFindExec checks the commands of find's -exec, -execdir, -ok, -okdir.
func checkFindExec(args []string, vars map[string]string, depth int) *BlockedError {
	for i := 0; i < len(args); i++ {
		switch args[i] {
		case "-exec", "-execdir", "-ok", "-okdir":
			j := i + 1
			for j < len(args) && args[j] != ";" && args[j] != "+" {
				j++
			}
			if b := checkSimple(simpleCmd{words: args[i+1 : j]}, vars, depth); b != nil {
				return b
			}
			i = j
		}
	}
	return nil
}

// checkRules applies the per-command rules to a command name and its
// arguments.
func checkRules(name string, args []string, show string) *BlockedError {
	lower := make([]string, len(args))
	for i, a := range args {
		lower[i] = strings.ToLower(a)
	}
	switch {
	case name == "rm":
		if rmRecursiveForce(args) {
			return blocked(RuleRecursiveRm, show)
		}
	case name == "del" || name == "erase" || name == "rd" || name == "rmdir":
		for _, a := range lower {
			if strings.HasPrefix(a, "/") && len(a) <= 8 &&
				(strings.Contains(a, "/s") || strings.Contains(a, "/q") || strings.Contains(a, "/f")) {
				return blocked(RuleWindowsDelete, show)
			}
		}
	case name == "remove-item" || name == "ri":
		var rec, force bool
		for _, a := range lower {
			rec = rec || len(a) >= 2 && strings.HasPrefix("-recurse", a)
			force = force || len(a) >= 2 && strings.HasPrefix("-force", a)
		}
		if rec && force {
			return blocked(RuleWindowsDelete, show)
		}
	case name == "format" || name == "format.com":
		return blocked(RuleFormat, show)
	case mkfsCmds()[name] || strings.HasPrefix(name, "mkfs."):
		return blocked(RuleMkfs, show)
	case name == "diskpart" || name == "diskpart.exe":
		return blocked(RuleDiskpart, show)
	case name == "dd":
		for _, a := range lower {
			if strings.HasPrefix(a, "if=") {
				return blocked(RuleDD, show)
			}
			if t, ok := strings.CutPrefix(a, "of="); ok {
				if b := writeTarget(t, show); b != nil {
					return b
				}
			}
		}
	case shutdownCmds()[name]:
		return blocked(RuleShutdown, show)
	case name == "init" || name == "telinit":
		for _, a := range lower {
			if a == "0" || a == "6" {
				return blocked(RuleShutdown, show)
			}
		}
	case name == "systemctl" || name == "loginctl":
		for _, a := range lower {
			if shutdownVerbs()[a] {
				return blocked(RuleShutdown, show)
			}
		}
	case writeCmds()[name]:
		for _, a := range args {
			if !strings.HasPrefix(a, "-") {
				if b := writeTarget(a, show); b != nil {
					return b
				}
			}
		}
	case name == "perl" || name == "ruby" || name == "node" || name == "php" || strings.HasPrefix(name, "python"):
		for _, a := range args {
			if interpBombRe().MatchString(a) {
				return blocked(RuleForkBomb, show)
			}
		}
	}
	return nil
}

// rmRecursiveForce reports whether rm's options ask for both a recursive and
// a forced delete, in any spelling: -rf, -fr, -r -f, -Rf, --recursive
// --force, and GNU's abbreviations (--rec, --f).
func rmRecursiveForce(args []string) bool {
	var rec, force bool
	for _, a := range args {
		if a == "--" {
			break
		}
		switch {
		case strings.HasPrefix(a, "--"):
			a = strings.ToLower(a)
			if len(a) > 2 && strings.HasPrefix("--recursive", a) {
				rec = true
			}
			if len(a) > 2 && strings.HasPrefix("--force", a) {
				force = true
			}
		case strings.HasPrefix(a, "-") && len(a) > 1:
			rec = rec || strings.ContainsAny(a[1:], "rR")
			force = force || strings.ContainsAny(a[1:], "fF")
		}
	}
	return rec && force
}
