package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/perchhq/perch/appliance/config"
)

// home gives the test a fresh PERCH_HOME and returns it.
func home(t *testing.T) string {
	t.Helper()
	h := t.TempDir()
	t.Setenv("PERCH_HOME", h)
	return h
}

// TestEveryCommandHasHelp: `perch X --help`, `perch X -h` and `perch help X`
// print X's own usage on stdout and exit 0, for every command.
func TestEveryCommandHasHelp(t *testing.T) {
	home(t)
	for _, c := range Commands() {
		for _, args := range [][]string{{c.Name, "--help"}, {c.Name, "-h"}, {"help", c.Name}} {
			out, errOut, code := runCLI(t, args...)
			if code != 0 || errOut != "" {
				t.Errorf("%v: exit %d, stderr %q", args, code, errOut)
			}
			if !strings.HasPrefix(out, "Usage: perch "+c.Name) || !strings.Contains(out, c.Summary) {
				t.Errorf("%v: not %s's usage:\n%s", args, c.Name, out)
			}
			// Another command's flags must not leak in.
			if c.Name != "cron" && strings.Contains(out, "--every") {
				t.Errorf("%v lists cron's flags:\n%s", args, out)
			}
		}
	}
}

func TestTopLevelHelp(t *testing.T) {
	for _, args := range [][]string{nil, {"help"}, {"--help"}, {"-h"}} {
		out, _, code := runCLI(t, args...)
		if code != 0 || !strings.Contains(out, "Commands:") {
			t.Errorf("%v: exit %d\n%s", args, code, out)
		}
		for _, c := range Commands() {
			if listed := strings.Contains(out, "  "+c.Name+" "); listed == c.Hidden {
				t.Errorf("%v: command %s listed=%v, hidden=%v", args, c.Name, listed, c.Hidden)
			}
		}
	}
}

// TestBadFlagReportedOnce: one line naming the flag and how to get help, not
// a dump of every flag.
func TestBadFlagReportedOnce(t *testing.T) {
	home(t)
	out, errOut, code := runCLI(t, "status", "--colour")
	if code != 1 || out != "" {
		t.Fatalf("exit %d, stdout %q", code, out)
	}
	if strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, "-colour") || !strings.Contains(errOut, "perch status --help") {
		t.Errorf("stderr %q, want one line naming the flag and the help", errOut)
	}
}

func TestUnknownCommand(t *testing.T) {
	out, errOut, code := runCLI(t, "gatway")
	if code != 1 || out != "" || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	for _, want := range []string{`"gatway"`, `did you mean "gateway"`, "gateway, agent, onboard"} {
		if !strings.Contains(errOut, want) {
			t.Errorf("stderr %q lacks %q", errOut, want)
		}
	}
}

// TestCronFlagsAndDurations: --every and --at take durations, errors name
// the flags, and enable/disable/remove say what they did.
func TestCronFlagsAndDurations(t *testing.T) {
	home(t)
	id, errOut, code := runCLI(t, "cron", "add", "--message", "water the plants", "--every", "10m")
	if code != 0 {
		t.Fatalf("add: exit %d: %s", code, errOut)
	}
	id = strings.TrimSpace(id)
	if len(id) != 8 {
		t.Fatalf("add printed %q, want only the id", id)
	}
	out, _, _ := runCLI(t, "cron", "list")
	if !strings.Contains(out, id) || !strings.Contains(out, "every 10 minutes") {
		t.Errorf("list:\n%s", out)
	}
	// Days, as the page's form takes them.
	if _, errOut, code := runCLI(t, "cron", "add", "--message", "change the filter", "--every", "7d12h"); code != 0 {
		t.Fatalf("add --every 7d12h: exit %d: %s", code, errOut)
	}
	if out, _, _ := runCLI(t, "cron", "list"); !strings.Contains(out, "every 180 hours") {
		t.Errorf("list after --every 7d12h:\n%s", out)
	}
	for _, step := range [][2]string{{"disable", "Disabled job " + id}, {"enable", "Enabled job " + id}, {"remove", "Removed job " + id}} {
		out, errOut, code := runCLI(t, "cron", step[0], id)
		if code != 0 || !strings.Contains(out, step[1]) || !strings.Contains(out, "water the plants") {
			t.Errorf("%s: exit %d, %q %q", step[0], code, out, errOut)
		}
	}
	tests := []struct {
		args []string
		want []string
	}{
		{[]string{"--message", "m"}, []string{"exactly one of --every, --at or --cron"}},
		{[]string{"--message", "m", "--every", "5s"}, []string{"--every must be at least 10 seconds, got 5"}},
		{[]string{"--message", "m", "--at", "soon"}, []string{`--at "soon"`, "10m"}},
		{[]string{"--every", "1h"}, []string{"--message is empty"}},
		{[]string{"--message", "m", "--at", "60", "--deliver"}, []string{"--deliver needs --channel and --to"}},
		{[]string{"--message", "m", "--cron", "0 9 * *"}, []string{`--cron "0 9 * *" must have five fields`}},
		{[]string{"--message", "m", "--cron", "0 9 * * *", "--tz", "Mars/Base"}, []string{`--tz "Mars/Base"`}},
		{[]string{"--message", "m", "--every", "1h", "--tz", "Europe/Berlin"}, []string{"--tz applies to --cron only"}},
		{[]string{"--message", "m", "--cron", "0 9 * * monday"}, []string{`--cron "0 9 * * monday": the day-of-week (0-6 or sun-sat) field "monday"`}},
		{[]string{"--message", "m", "--every", "5000d"}, []string{"--every 5000d: too long; at most ten years (3650d)"}},
		{[]string{"--message", "m", "--at", "400000000"}, []string{"--at 400000000: too long; at most ten years (3650d)"}},
		{[]string{"--message", "m", "--every", "107639d"}, []string{"--every 107639d: too long; at most ten years (3650d)"}},
	}
	for _, tt := range tests {
		_, errOut, code := runCLI(t, append([]string{"cron", "add"}, tt.args...)...)
		if code != 1 {
			t.Errorf("%v: exit %d", tt.args, code)
		}
		for _, w := range tt.want {
			if !strings.Contains(errOut, w) {
				t.Errorf("%v: stderr %q lacks %q", tt.args, errOut, w)
			}
		}
		for _, field := range []string{"every_seconds", "at_seconds", "cron_expr"} {
			if strings.Contains(errOut, field) {
				t.Errorf("%v: stderr %q names the API field %s, not the flag", tt.args, errOut, field)
			}
		}
	}
	if _, errOut, code := runCLI(t, "cron", "remove", "nope1234"); code != 1 || !strings.Contains(errOut, "no such job") {
		t.Errorf("remove unknown: exit %d, %q", code, errOut)
	}
}

// TestOnboardSaysWhereAndWhatNext: the address printed is the one the
// gateway will use (environment included), and --force keeps the old file.
func TestOnboardSaysWhereAndWhatNext(t *testing.T) {
	h := home(t)
	t.Setenv("PERCH_GATEWAY_HOST", "127.0.0.1")
	t.Setenv("PERCH_GATEWAY_PORT", "9191")
	out, errOut, code := runCLI(t, "onboard")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	for _, want := range []string{"Wrote " + filepath.Join(h, "config.json"), "listen on 127.0.0.1:9191 (this machine only)", "setup form", "setup code"} {
		if !strings.Contains(out, want) {
			t.Errorf("onboard output lacks %q:\n%s", want, out)
		}
	}
	first, _ := os.ReadFile(filepath.Join(h, "config.json"))
	if _, errOut, code := runCLI(t, "onboard"); code != 1 || !strings.Contains(errOut, "--force") {
		t.Errorf("second onboard: exit %d, %q", code, errOut)
	}
	out, _, code = runCLI(t, "onboard", "--force")
	if code != 0 || !strings.Contains(out, "previous config is kept as "+filepath.Join(h, "config.json.bak")) {
		t.Errorf("--force: exit %d:\n%s", code, out)
	}
	if kept, _ := os.ReadFile(filepath.Join(h, "config.json.bak")); string(kept) != string(first) {
		t.Error("the replaced config was not kept byte for byte")
	}
}

// TestOnboardStartHint: "make run" is the next step only for the config
// make run starts (a checkout's own .perch, on loopback); another home in
// a checkout is started by the binary, told where its config is.
func TestOnboardStartHint(t *testing.T) {
	checkout := t.TempDir()
	if err := os.WriteFile(filepath.Join(checkout, "Makefile"), []byte("all:\nrun: build\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(checkout, "cmd", "perch"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(checkout)
	t.Setenv("PERCH_HOME", filepath.Join(checkout, ".perch"))
	t.Setenv("PERCH_GATEWAY_PORT", "9192")
	out, errOut, code := runCLI(t, "onboard")
	if code != 0 || !strings.Contains(out, "1. Start it: make run\n") || !strings.Contains(out, "Open http://127.0.0.1:9192/ ") {
		t.Errorf("onboard of the checkout's .perch: exit %d %s\n%s", code, errOut, out)
	}

	other := filepath.Join(t.TempDir(), "elsewhere", "config.json")
	out, errOut, code = runCLI(t, "onboard", "--config", other)
	if code != 0 || !strings.Contains(out, "1. Start it: perch gateway --config "+other+"\n") {
		t.Errorf("onboard of another config in a checkout: exit %d %s\n%s", code, errOut, out)
	}
	t.Setenv("PERCH_HOME", filepath.Dir(other))
	out, errOut, code = runCLI(t, "onboard", "--force")
	if code != 0 || !strings.Contains(out, "1. Start it: perch gateway\n") {
		t.Errorf("onboard of PERCH_HOME in a checkout: exit %d %s\n%s", code, errOut, out)
	}
}

// TestUnknownPerchVariableWarns: a mistyped override is a warning naming the
// closest key, not silence.
func TestUnknownPerchVariableWarns(t *testing.T) {
	home(t)
	t.Setenv("PERCH_GATEWAY_PROT", "9000")
	_, errOut, code := runCLI(t, "status")
	if code != 0 || !strings.Contains(errOut, "PERCH_GATEWAY_PROT") || !strings.Contains(errOut, "did you mean PERCH_GATEWAY_PORT") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
}

// TestLocalAgentIsQuiet: `perch agent` without a gateway logs only what goes
// wrong, not the services' start-up lines.
func TestLocalAgentIsQuiet(t *testing.T) {
	home(t)
	var level slog.Level
	rt := Runtime{Agent: func(_ context.Context, _ *config.Config, log *slog.Logger) (func(context.Context, string, string) (string, error), func() error, error) {
		log.Info("store opened")
		if log.Enabled(context.Background(), slog.LevelInfo) {
			level = slog.LevelInfo
		} else {
			level = slog.LevelWarn
		}
		return func(_ context.Context, session, text string) (string, error) { return session + ": " + text, nil }, func() error { return nil }, nil
	}}
	var out, errOut strings.Builder
	code := Run(context.Background(), &Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut, Runtime: rt}, []string{"agent", "-m", "hi"})
	if code != 0 || out.String() != "cli:default: hi\n" || errOut.String() != "" || level != slog.LevelWarn {
		t.Errorf("exit %d, stdout %q, stderr %q, level %v", code, out.String(), errOut.String(), level)
	}
}

// echoAgent is a local agent that answers "<session>: <text>", and fails
// on "boom".
var echoAgent = Runtime{Agent: func(context.Context, *config.Config, *slog.Logger) (func(context.Context, string, string) (string, error), func() error, error) {
	return func(_ context.Context, session, text string) (string, error) {
		if text == "boom" {
			return "", errors.New("agent: the provider is down")
		}
		return session + ": " + text, nil
	}, func() error { return nil }, nil
}}

// TestAgentFromAPipe: messages piped in get their replies alone on
// stdout, with no prompts mixed in; a message without a reply is said on
// stderr and makes the exit status 1.
func TestAgentFromAPipe(t *testing.T) {
	home(t)
	var out, errOut strings.Builder
	code := Run(context.Background(), &Env{Stdin: strings.NewReader("hello\n\nboom\nbye\n"), Stdout: &out, Stderr: &errOut, Runtime: echoAgent}, []string{"agent"})
	if out.String() != "cli:default: hello\ncli:default: bye\n" {
		t.Errorf("stdout %q", out.String())
	}
	if code != 1 || !strings.Contains(errOut.String(), "perch: agent: the provider is down\n") || !strings.HasSuffix(errOut.String(), "perch: agent: 1 message got no reply (the error is above)\n") {
		t.Errorf("exit %d, stderr %q", code, errOut.String())
	}
}

// TestAgentOnATerminal: on a terminal the conversation has its banner and
// prompts.
func TestAgentOnATerminal(t *testing.T) {
	home(t)
	master, err := os.OpenFile("/dev/ptmx", os.O_RDWR, 0)
	if err != nil {
		t.Skipf("no pseudo-terminals here: %v", err)
	}
	defer master.Close()
	if err := unix.IoctlSetPointerInt(int(master.Fd()), unix.TIOCSPTLCK, 0); err != nil {
		t.Fatal(err)
	}
	n, err := unix.IoctlGetInt(int(master.Fd()), unix.TIOCGPTN)
	if err != nil {
		t.Fatal(err)
	}
	tty, err := os.OpenFile(fmt.Sprintf("/dev/pts/%d", n), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	go master.Write([]byte("hello\nboom\n\x04"))
	var out, errOut strings.Builder
	code := Run(context.Background(), &Env{Stdin: tty, Stdout: &out, Stderr: &errOut, Runtime: echoAgent}, []string{"agent", "-s", "t:1"})
	want := "Perch agent, session t:1. Type /help for commands, exit or Ctrl-D to leave.\n" +
		"you> perch> t:1: hello\nyou> error: agent: the provider is down\nyou> \n"
	if code != 0 || out.String() != want || errOut.String() != "" {
		t.Errorf("exit %d, stdout %q, stderr %q", code, out.String(), errOut.String())
	}
}

// TestAgentEmptyMessage: -m with nothing in it (a script's empty variable)
// is refused, instead of opening the interactive prompt and waiting for a
// terminal that is not there.
func TestAgentEmptyMessage(t *testing.T) {
	home(t)
	asked := false
	rt := Runtime{Agent: func(context.Context, *config.Config, *slog.Logger) (func(context.Context, string, string) (string, error), func() error, error) {
		return func(context.Context, string, string) (string, error) { asked = true; return "", nil }, func() error { return nil }, nil
	}}
	for _, m := range []string{"", "  \n"} {
		var out, errOut strings.Builder
		code := Run(context.Background(), &Env{Stdin: strings.NewReader("hello\n"), Stdout: &out, Stderr: &errOut, Runtime: rt}, []string{"agent", "-m", m})
		if code != 1 || !strings.Contains(errOut.String(), "-m is empty") || out.String() != "" || asked {
			t.Errorf("-m %q: exit %d, stdout %q, stderr %q, asked %v", m, code, out.String(), errOut.String(), asked)
		}
	}
}

// TestManAndCompletionFromTheDefinitions: both name every visible command
// and its flags.
func TestManAndCompletionFromTheDefinitions(t *testing.T) {
	man, _, code := runCLI(t, "man")
	comp, _, code2 := runCLI(t, "completion", "bash")
	if code != 0 || code2 != 0 {
		t.Fatal(code, code2)
	}
	for _, c := range Commands() {
		if c.Hidden {
			continue
		}
		if !strings.Contains(man, `.SS "perch `+c.Name) || !strings.Contains(comp, " "+c.Name+")") {
			t.Errorf("%s missing from the man page or the completion", c.Name)
		}
	}
	if _, errOut, code := runCLI(t, "completion", "zsh"); code != 1 || !strings.Contains(errOut, "for bash only, not for zsh") {
		t.Errorf("completion zsh: exit %d, %q", code, errOut)
	}
	if _, errOut, code := runCLI(t, "completion"); code != 1 || !strings.Contains(errOut, "give the shell: bash") {
		t.Errorf("completion without a shell: exit %d, %q", code, errOut)
	}
	if !strings.Contains(man, `\-\-every`) || !strings.Contains(comp, "--every") {
		t.Error("cron's flags are missing")
	}
}

func TestGatewayErrorIsOneLine(t *testing.T) {
	home(t)
	rt := Runtime{Gateway: func(context.Context, *config.Config, *slog.Logger, io.Writer, func()) error {
		return errors.New("gateway: port 8080 is busy\nsecond line")
	}}
	var out, errOut strings.Builder
	code := Run(context.Background(), &Env{Stdout: &out, Stderr: &errOut, Runtime: rt}, []string{"gateway"})
	if code != 1 || errOut.String() != "perch: gateway: port 8080 is busy; second line\n" {
		t.Errorf("exit %d, stderr %q", code, errOut.String())
	}
}

// --config may come before the command as well as after it.
func TestConfigBeforeTheCommand(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("PERCH_HOME", t.TempDir())
	cfg := filepath.Join(dir, "elsewhere.json")
	if err := os.WriteFile(cfg, []byte(`{"gateway":{"port":18181}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"--config", cfg, "status"}, {"--config=" + cfg, "status"}, {"-config", cfg, "status"}, {"status", "--config", cfg}} {
		out, errOut, code := runCLI(t, args...)
		if code != 0 || !strings.Contains(out, cfg) || !strings.Contains(out, ":18181") {
			t.Errorf("%v: exit %d, stderr %q\n%s", args, code, errOut, out)
		}
	}
	if _, errOut, code := runCLI(t, "--config"); code != 1 || !strings.Contains(errOut, "--config needs a file") {
		t.Errorf("--config alone: exit %d, %q", code, errOut)
	}
	if got, ok := leadingConfig([]string{"--config", "a", "cron", "list", "--json"}); !ok || strings.Join(got, " ") != "cron --config a list --json" {
		t.Errorf("leadingConfig = %q, %v", got, ok)
	}
}

// silentProvider accepts connections and never answers them.
func silentProvider(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c)
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return "http://" + ln.Addr().String() + "/v1"
}

// perch models gives up on a provider that never answers, naming the wait
// and the key to check; Ctrl-C meanwhile is reported as an interruption.
func TestModelsGivesUpOnASilentProvider(t *testing.T) {
	home(t)
	t.Setenv("PERCH_PROVIDERS_OPENAI_API_BASE", silentProvider(t))
	t.Setenv("PERCH_PROVIDERS_OPENAI_API_KEY", "sk-test-never-printed")
	t.Setenv("PERCH_AGENTS_DEFAULTS_MODEL", "gpt-4o-mini")
	old := modelsTimeout
	modelsTimeout = 300 * time.Millisecond
	t.Cleanup(func() { modelsTimeout = old })
	start := time.Now()
	_, errOut, code := runCLI(t, "models")
	if code != 1 || !strings.Contains(errOut, "openai did not answer its model list within 300ms") || !strings.Contains(errOut, "providers.openai.api_base") {
		t.Errorf("exit %d, %q", code, errOut)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %v", took)
	}
	modelsTimeout = time.Minute
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	var out, stderr strings.Builder
	if code := Run(ctx, &Env{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &stderr}, []string{"models"}); code != 1 || stderr.String() != "perch: interrupted\n" {
		t.Errorf("interrupted: exit %d, %q", code, stderr.String())
	}
	if strings.Contains(errOut+stderr.String(), "sk-test") {
		t.Error("the key was printed")
	}
}

// An empty job id is a usage error here, not a request for the gateway.
func TestCronEmptyID(t *testing.T) {
	home(t)
	for _, action := range []string{"enable", "disable", "remove"} {
		if _, errOut, code := runCLI(t, "cron", action, " "); code != 1 || !strings.Contains(errOut, action+" takes the job's id") {
			t.Errorf("cron %s '': exit %d, %q", action, code, errOut)
		}
	}
}
