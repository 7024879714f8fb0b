package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// need returns program's path; under CI=true a missing program fails (the
// CI scripts install it), elsewhere the test is skipped.
func need(t *testing.T, program string) string {
	t.Helper()
	p, err := exec.LookPath(program)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true: %s is missing; .ci/deps installs it", program)
		}
		t.Skipf("%s not installed", program)
	}
	return p
}

var (
	buildOnce sync.Once
	builtPath string
	buildErr  error
	buildOut  []byte
)

// perchBinary builds the real cmd/perch once: the generator must keep
// working on the help the binary prints today.
func perchBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "gendocs-perch-")
		if err != nil {
			buildErr = err
			return
		}
		builtPath = filepath.Join(dir, "perch")
		cmd := exec.Command("go", "build", "-o", builtPath, "github.com/perchhq/perch/cmd/perch")
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		buildOut, buildErr = cmd.CombinedOutput()
	})
	if buildErr != nil {
		t.Fatalf("go build cmd/perch: %v\n%s", buildErr, buildOut)
	}
	return builtPath
}

func TestMain(m *testing.M) {
	code := m.Run()
	if builtPath != "" {
		os.RemoveAll(filepath.Dir(builtPath))
	}
	os.Exit(code)
}

const usageFixture = `perch — a chat-driven AI agent appliance

Usage:
  perch gateway [--debug]                   run the gateway (HTTP API, channels, cron)
  perch agent [-m MSG] [-s SESSION] [--debug]
                                            talk to the agent (one message with -m)
  perch cron list [--json]
  perch cron add --message TEXT (--every SECONDS | --at SECONDS | --cron 'EXPR') [--tz ZONE]
                 [--deliver --channel C --to CHAT] [--command CMD]
  perch cron remove|enable|disable ID
  perch skills list | show NAME | install FOLDER [--name NAME] | remove NAME
  perch version

Every command accepts --config PATH (default: $PERCH_HOME/config.json or ~/.perch/config.json).
`

func find(t *testing.T, cli *CLI, name string) Command {
	t.Helper()
	for _, c := range cli.Commands {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no command %q in %+v", name, cli.Commands)
	return Command{}
}

func flagNames(fs []Flag) []string {
	var out []string
	for _, f := range fs {
		out = append(out, f.Name)
	}
	return out
}

func TestParseUsage(t *testing.T) {
	cli, err := parseUsage(usageFixture)
	if err != nil {
		t.Fatal(err)
	}
	if cli.Description != "a chat-driven AI agent appliance" {
		t.Errorf("description %q", cli.Description)
	}
	var names []string
	for _, c := range cli.Commands {
		names = append(names, c.Name)
	}
	if want := []string{"gateway", "agent", "cron", "skills", "version"}; !slices.Equal(names, want) {
		t.Fatalf("commands %v, want %v", names, want)
	}
	agent := find(t, cli, "agent")
	if agent.Summary != "talk to the agent (one message with -m)" {
		t.Errorf("agent summary (on its own line) = %q", agent.Summary)
	}
	if want := []string{"m", "s", "debug"}; !slices.Equal(flagNames(agent.Flags), want) {
		t.Errorf("agent flags %v, want %v", flagNames(agent.Flags), want)
	}
	cron := find(t, cli, "cron")
	if len(cron.Synopsis) != 3 || !strings.HasSuffix(cron.Synopsis[1], "[--deliver --channel C --to CHAT] [--command CMD]") {
		t.Errorf("cron synopses (continuation joined) = %q", cron.Synopsis)
	}
	if cron.Summary != "" {
		t.Errorf("cron summary %q, want none (the continuation is synopsis)", cron.Summary)
	}
	if want := []string{"list", "add", "remove", "enable", "disable"}; !slices.Equal(cron.Subcommands, want) {
		t.Errorf("cron subcommands %v, want %v", cron.Subcommands, want)
	}
	for _, f := range []string{"json", "message", "every", "at", "cron", "tz", "deliver", "channel", "to", "command"} {
		if !slices.Contains(flagNames(cron.Flags), f) {
			t.Errorf("cron lacks flag %s: %v", f, flagNames(cron.Flags))
		}
	}
	if want := []string{"list", "show", "install", "remove"}; !slices.Equal(find(t, cli, "skills").Subcommands, want) {
		t.Errorf("skills subcommands %v", find(t, cli, "skills").Subcommands)
	}
	if len(cli.Global) != 1 || cli.Global[0].Name != "config" || cli.Global[0].Arg != "PATH" || !strings.Contains(cli.Global[0].Usage, "~/.perch/config.json") {
		t.Errorf("global flags %+v", cli.Global)
	}
}

func TestParseUsageRejectsOtherText(t *testing.T) {
	if _, err := parseUsage("Usage: something else entirely\n"); err == nil || !strings.Contains(err.Error(), "no commands found") {
		t.Fatalf("err = %v", err)
	}
}

func TestParseFlagHelp(t *testing.T) {
	text := "Usage of perch cron:\n  -at SECONDS\n    \trun once, SECONDS from now (default -1)\n  -json\n    \tprint JSON (list)\n" +
		"  -message string\n    \treminder text\n    \tover two lines\n  --verbose   one-line form\n"
	got := parseFlagHelp(text)
	want := []Flag{
		{Name: "at", Arg: "SECONDS", Usage: "run once, SECONDS from now (default -1)"},
		{Name: "json", Usage: "print JSON (list)"},
		{Name: "message", Arg: "string", Usage: "reminder text over two lines"},
		{Name: "verbose", Usage: "one-line form"},
	}
	if !slices.Equal(got, want) {
		t.Fatalf("got  %+v\nwant %+v", got, want)
	}
}

// TestRealBinary: the generator reads every command of the real binary,
// with the flags each command's --help lists. When this fails after a CLI
// change, switch commandsFromHelp (fromhelp.go) to the CLI's own table.
func TestRealBinary(t *testing.T) {
	cli, err := commandsFromHelp(perchBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"gateway", "agent", "onboard", "status", "models", "cron", "skills", "version", "help"} {
		find(t, cli, name)
	}
	cron := find(t, cli, "cron")
	if !slices.Contains(cron.Subcommands, "add") || !slices.Contains(flagNames(cron.Flags), "every") {
		t.Errorf("cron: subcommands %v flags %v", cron.Subcommands, flagNames(cron.Flags))
	}
	for _, f := range cron.Flags {
		if f.Name == "every" && f.Usage == "" {
			t.Error("cron --every has no description: the command's --help was not read")
		}
	}
	if len(cli.Global) == 0 || cli.Global[0].Name != "config" {
		t.Errorf("global flags %+v, want --config", cli.Global)
	}
}

// TestManPageLints renders the page from the real binary and runs the
// check lintian runs (man --warnings), plus groff's own warnings.
func TestManPageLints(t *testing.T) {
	man := need(t, "man")
	groff := need(t, "groff")
	cli, err := commandsFromHelp(perchBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := ManPage(&b, cli, "0.2.0~git20261123.abcdef0", "2026-11-23"); err != nil {
		t.Fatal(err)
	}
	page := filepath.Join(t.TempDir(), "perch.1")
	if err := os.WriteFile(page, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(man, "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z", page)
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8", "MANWIDTH=80")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil || stderr.Len() > 0 {
		t.Fatalf("man --warnings: %v\n%s", err, stderr.String())
	}
	out, err := exec.Command(groff, "-man", "-ww", "-z", page).CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Fatalf("groff -ww: %v\n%s", err, out)
	}
	text, err := exec.Command(man, "-l", page).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range cli.Commands {
		if !bytes.Contains(text, []byte("perch "+c.Name)) {
			t.Errorf("rendered page lacks 'perch %s'", c.Name)
		}
	}
	for _, s := range []string{"/etc/perch/config.json", "PERCH_HOME", "--every SECONDS", "0.2.0~git20261123.abcdef0"} {
		if !bytes.Contains(text, []byte(s)) {
			t.Errorf("rendered page lacks %q", s)
		}
	}
}

// complete runs the generated completion in bash for the words typed so
// far (the last one being completed) and returns the candidates.
func complete(t *testing.T, script string, words ...string) []string {
	t.Helper()
	bash := need(t, "bash")
	var quoted []string
	for _, w := range words {
		quoted = append(quoted, shellQuote(w))
	}
	prog := script + "\nCOMP_WORDS=(" + strings.Join(quoted, " ") + ")\nCOMP_CWORD=" +
		itoa(len(words)-1) + "\n_perch\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
	cmd := exec.Command(bash, "--norc", "--noprofile", "-c", prog)
	cmd.Dir = t.TempDir()
	for _, f := range []string{"config.json", "other.txt"} {
		if err := os.WriteFile(filepath.Join(cmd.Dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	return strings.Fields(string(out))
}

func itoa(n int) string { return strconv.Itoa(n) }

func TestBashCompletion(t *testing.T) {
	cli, err := commandsFromHelp(perchBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := BashCompletion(&b, cli, "0.2.0"); err != nil {
		t.Fatal(err)
	}
	script := b.String()
	cases := []struct {
		words []string
		want  []string
	}{
		{[]string{"perch", "c"}, []string{"cron"}},
		{[]string{"perch", "s"}, []string{"status", "skills"}},
		{[]string{"perch", "cron", ""}, []string{"list", "add", "remove", "enable", "disable"}},
		{[]string{"perch", "cron", "add", "--ev"}, []string{"--every"}},
		{[]string{"perch", "gateway", "--"}, []string{"--config", "--debug"}},
		{[]string{"perch", "gateway", "--config", "con"}, []string{"config.json"}},
		{[]string{"perch", "cron", "add", "--message", ""}, nil},
	}
	for _, c := range cases {
		got := complete(t, script, c.words...)
		if !slices.Equal(got, c.want) {
			t.Errorf("%q: got %q, want %q", c.words, got, c.want)
		}
	}
}

func TestPageDate(t *testing.T) {
	if got := pageDate("1700000000", mustTime(t)); got != "2023-11-14" {
		t.Errorf("SOURCE_DATE_EPOCH: %s", got)
	}
	if got := pageDate("", mustTime(t)); got != "2026-11-23" {
		t.Errorf("no epoch: %s", got)
	}
	if got := pageDate("garbage", mustTime(t)); got != "2026-11-23" {
		t.Errorf("bad epoch: %s", got)
	}
}

func mustTime(t *testing.T) time.Time {
	t.Helper()
	tm, err := time.Parse(time.RFC3339, "2026-11-23T22:00:00Z")
	if err != nil {
		t.Fatal(err)
	}
	return tm
}
