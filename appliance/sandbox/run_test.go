package sandbox

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// TestConfinement: whatever route a command takes to a file beside the
// workspace (relative, absolute, a symlink it makes, /proc), Landlock refuses
// it, while the same kind of command inside the workspace works.
func TestConfinement(t *testing.T) {
	f := newFixture(t)
	r := f.newRunner(t, Options{})
	requireLandlock(t, r)
	name := filepath.Base(f.secret)
	for _, tc := range []struct {
		name string
		line string
	}{
		{"relative path", "cat ../" + name},
		{"cd .. then no slash", "cd .. && cat " + name},
		{"cd chains", "cd ..; cd ../..; cd " + f.base + "; cat " + name},
		{"absolute path", "cat " + f.secret},
		{"symlink the command makes", "ln -s " + f.secret + " link && cat link"},
		{"symlink to the parent dir", "ln -s .. up && cat up/" + name},
		{"hard link", "ln " + f.secret + " hard && cat hard"},
		{"listing the parent", "ls -la .. && cat ../*.json"},
		{"through /proc/self/root", "cat /proc/self/root" + f.secret},
		{"copy out with cp", "cp ../" + name + " stolen.json && cat stolen.json"},
		{"home dir of root", "cat ~root/.bashrc /root/.profile"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, r, tc.line)
			if strings.Contains(res.Output, "CANARY") {
				t.Fatalf("the secret leaked: %q", res.Output)
			}
			if res.ExitCode == 0 {
				t.Errorf("exit 0, want a failure; output %q", res.Output)
			}
			control(t, r)
		})
	}
}

// TestWritesOutsideFail: writes, deletes, renames and truncation beside
// the workspace and in the shared /tmp are refused and leave no trace.
func TestWritesOutsideFail(t *testing.T) {
	f := newFixture(t)
	r := f.newRunner(t, Options{})
	requireLandlock(t, r)
	tmpName := fmt.Sprintf("/tmp/perch-sandbox-test-%d", time.Now().UnixNano())
	t.Cleanup(func() { os.Remove(tmpName) })
	outside := filepath.Join(f.base, "new.txt")
	for _, tc := range []struct {
		name  string
		line  string
		check func() error
	}{
		{"create beside", "echo x > ../new.txt", absent(outside)},
		{"create absolute", "echo x > " + outside, absent(outside)},
		{"create in /tmp", "echo x > " + tmpName, absent(tmpName)},
		{"mkdir in /tmp", "mkdir " + tmpName, absent(tmpName)},
		{"delete beside", "rm -f ../victim.txt", intact(f.victim)},
		{"delete through a symlink dir", "ln -s .. up && rm -f up/victim.txt", intact(f.victim)},
		{"overwrite", "echo gone > " + f.victim, intact(f.victim)},
		{"truncate", "truncate -s 0 " + f.victim, intact(f.victim)},
		{"move in", "mv " + f.victim + " .", intact(f.victim)},
		{"move the workspace's file out", "echo x > w.txt && mv w.txt ..", absent(outside)},
		{"chmod is not write", "chmod 000 " + f.victim + "; cat " + f.victim + " > /dev/null; echo x >> " + f.victim, intact(f.victim)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, r, tc.line)
			if err := tc.check(); err != nil {
				t.Fatalf("%v (exit %d, output %q)", err, res.ExitCode, res.Output)
			}
			control(t, r)
		})
	}
}

func absent(p string) func() error {
	return func() error {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			return fmt.Errorf("%s exists (%v)", p, err)
		}
		return nil
	}
}

func intact(p string) func() error {
	return func() error {
		b, err := os.ReadFile(p)
		if err != nil || string(b) != "still here" {
			return fmt.Errorf("%s changed: %q, %v", p, b, err)
		}
		return nil
	}
}

// TestNoSecretsInTheEnvironment: neither `env` nor the environ of the
// gateway (this test process) or of the launcher shows a secret.
func TestNoSecretsInTheEnvironment(t *testing.T) {
	const canary = "sk-ENV-CANARY-91c2"
	t.Setenv("OPENAI_API_KEY", canary)
	t.Setenv("PERCH_PROVIDERS_OPENAI_API_KEY", canary)
	f := newFixture(t)
	r := f.newRunner(t, Options{})
	requireLandlock(t, r)
	gw := strconv.Itoa(os.Getpid())

	res := run(t, r, "env; echo ---; cat /proc/self/environ | tr '\\0' '\\n'")
	if strings.Contains(res.Output, canary) || strings.Contains(res.Output, "PERCH_") {
		t.Errorf("env shows a secret:\n%s", res.Output)
	}
	for _, want := range []string{"HOME=" + f.ws, "TMPDIR=" + f.ws + "/.tmp/", "PATH=" + safePath} {
		if !strings.Contains(res.Output, want) {
			t.Errorf("env lacks %q:\n%s", want, res.Output)
		}
	}
	for _, p := range []string{
		"/proc/" + gw + "/environ", "/proc/$PPID/environ", "/proc/" + gw + "/cmdline",
		"/proc/" + gw + "/root" + f.secret,
	} {
		res := run(t, r, "cat "+p+" | tr '\\0' '\\n'")
		if strings.Contains(res.Output, canary) || strings.Contains(res.Output, "CANARY") {
			t.Errorf("%s leaked: %q", p, res.Output)
		}
	}
	// environ, fd and mem of the gateway are refused outright (Landlock's
	// ptrace rule), not just empty.
	for _, p := range []string{"/proc/" + gw + "/environ", "/proc/" + gw + "/mem", "/proc/" + gw + "/fd/0"} {
		res := run(t, r, "head -c 1 "+p)
		if res.ExitCode == 0 {
			t.Errorf("reading %s succeeded: %q", p, res.Output)
		}
	}
	// The command's own /proc entries and system-wide ones are readable.
	res = run(t, r, "grep -c . /proc/self/status > /dev/null && head -1 /proc/meminfo && cat /proc/uptime > /dev/null")
	if res.ExitCode != 0 || !strings.Contains(res.Output, "MemTotal") {
		t.Errorf("/proc of its own and /proc/meminfo: exit %d %q", res.ExitCode, res.Output)
	}
	control(t, r)
}

// TestSystemIsReadOnly: the shell and the usual tools work, /etc reads
// except the protected files, nothing under the system dirs can be written.
func TestSystemIsReadOnly(t *testing.T) {
	f := newFixture(t)
	r := f.newRunner(t, Options{Secrets: []string{"/etc/hostname"}})
	requireLandlock(t, r)
	res := run(t, r, "cat /etc/hosts > /dev/null && ls /etc > /dev/null && ls /usr/bin | head -1 > /dev/null && echo fine")
	if strings.TrimSpace(res.Output) != "fine" {
		t.Errorf("reading /etc and /usr: exit %d %q", res.ExitCode, res.Output)
	}
	stamp := strconv.FormatInt(time.Now().UnixNano(), 36)
	created := []string{"/etc/perch-sandbox-test-" + stamp, "/usr/bin/perch-sandbox-test-" + stamp}
	t.Cleanup(func() {
		for _, p := range created {
			if os.Remove(p) == nil {
				t.Errorf("%s was created", p)
			}
		}
	})
	for _, line := range []string{
		"cat /etc/hostname",   // a secret given in Options
		"cat /etc/shadow",     // built in
		"touch " + created[0], // no new file under /etc
		"touch " + created[1], // nor /usr
		"ls /var/lib",         // not allowed at all
		"echo x > /dev/tty",   // no terminal
		"ls /home /root /run", // other homes and runtime dirs
	} {
		if res := run(t, r, line); res.ExitCode == 0 {
			t.Errorf("%q succeeded: %q", line, res.Output)
		}
	}
	res = run(t, r, "echo x > /dev/null && head -c 4 /dev/urandom | wc -c && head -c 3 /dev/zero | wc -c")
	if res.ExitCode != 0 || strings.Fields(res.Output)[0] != "4" {
		t.Errorf("devices: exit %d %q", res.ExitCode, res.Output)
	}
	control(t, r)
}

// TestTempDirIsPrivateAndRemoved: TMPDIR is a fresh directory inside the
// workspace that the command can use and that is gone afterwards.
func TestTempDirIsPrivateAndRemoved(t *testing.T) {
	f := newFixture(t)
	r := f.newRunner(t, Options{})
	res := run(t, r, `t=$(mktemp) && echo data > "$t" && cat "$t" && echo "$TMPDIR"`)
	lines := strings.Split(strings.TrimSpace(res.Output), "\n")
	if res.ExitCode != 0 || len(lines) != 2 || lines[0] != "data" {
		t.Fatalf("mktemp in TMPDIR: exit %d %q", res.ExitCode, res.Output)
	}
	if !strings.HasPrefix(lines[1], f.ws+"/.tmp/") {
		t.Errorf("TMPDIR %q is not inside the workspace", lines[1])
	}
	if _, err := os.Stat(lines[1]); !os.IsNotExist(err) {
		t.Errorf("TMPDIR %s was not removed: %v", lines[1], err)
	}
}

// TestTempDirSwapIsRepaired: a command that replaces .tmp with a link out
// of the workspace (or a file, or a dangling link) cannot make the gateway
// create, list or delete outside, nor disable later commands: the next run,
// in this gateway or the next one, puts a fresh .tmp back.
func TestTempDirSwapIsRepaired(t *testing.T) {
	f := newFixture(t)
	target := filepath.Join(f.base, "elsewhere")
	if err := os.Mkdir(target, 0o755); err != nil {
		t.Fatal(err)
	}
	stale := filepath.Join(target, "exec-2-stale")
	if err := os.Mkdir(stale, 0o755); err != nil {
		t.Fatal(err)
	}
	day := time.Now().Add(-25 * time.Hour)
	if err := os.Chtimes(stale, day, day); err != nil {
		t.Fatal(err)
	}
	r := f.newRunner(t, Options{})
	// Landlock would refuse the link's target anyway; drop to the
	// degraded mode so only the gateway's own care is tested.
	r.abi = 0
	for _, swap := range []string{
		"rm -r .tmp && ln -s " + target + " .tmp",
		"rm -r .tmp && echo x > .tmp",
		"rm -r .tmp && ln -s missing .tmp",
		"rm -r .tmp && mkdir -p inside && ln -s inside .tmp",
	} {
		if res := run(t, r, swap); res.ExitCode != 0 {
			t.Fatalf("%q: %q", swap, res.Output)
		}
		res, err := r.Run(context.Background(), Command{Line: `echo x > "$TMPDIR/f" && cat "$TMPDIR/f" && echo "$TMPDIR"`})
		if err != nil || res.ExitCode != 0 {
			t.Fatalf("after %q the next command failed: %v %q", swap, err, res.Output)
		}
		fi, err := os.Lstat(filepath.Join(f.ws, ".tmp"))
		if err != nil || !fi.IsDir() {
			t.Errorf("after %q .tmp is not a directory again: %v %v", swap, fi, err)
		}
		// A new gateway on this workspace starts and runs commands too.
		if res := run(t, r, swap); res.ExitCode != 0 {
			t.Fatalf("%q: %q", swap, res.Output)
		}
		r2 := f.newRunner(t, Options{})
		r2.abi = 0
		if res := run(t, r2, "echo ok"); strings.TrimSpace(res.Output) != "ok" {
			t.Errorf("after %q a restarted gateway's command: %q", swap, res.Output)
		}
		_ = os.RemoveAll(filepath.Join(f.ws, "inside"))
	}
	entries, _ := os.ReadDir(target)
	if len(entries) != 1 || entries[0].Name() != "exec-2-stale" {
		t.Errorf("the gateway created or removed in the link's target: %v", entries)
	}
}

func TestExitCodes(t *testing.T) {
	f := newFixture(t)
	r := f.newRunner(t, Options{})
	for _, tc := range []struct {
		line string
		code int
	}{
		{"true", 0},
		{"exit 3", 3},
		{"false", 1},
		{"no-such-command-xyz", 127},
		{"kill -9 $$", 137},
	} {
		if res := run(t, r, tc.line); res.ExitCode != tc.code {
			t.Errorf("%q: exit %d, want %d (output %q)", tc.line, res.ExitCode, tc.code, res.Output)
		}
	}
}

func TestOutputIsCombinedAndCapped(t *testing.T) {
	f := newFixture(t)
	r := f.newRunner(t, Options{MaxOutput: 1000})
	res := run(t, r, "echo out; echo err >&2")
	if res.Output != "out\nerr\n" || res.Truncated {
		t.Errorf("combined output %q truncated=%v", res.Output, res.Truncated)
	}
	res = run(t, r, "seq 1 200000")
	if !res.Truncated || len(res.Output) > 1100 {
		t.Fatalf("truncated=%v, %d bytes", res.Truncated, len(res.Output))
	}
	if !strings.HasPrefix(res.Output, "1\n2\n3\n") || !strings.HasSuffix(res.Output, "199999\n200000\n") ||
		!strings.Contains(res.Output, "bytes of output omitted") {
		t.Errorf("head/tail not kept: %q", res.Output)
	}
}

// TestTimeoutKillsTheWholeTree: on timeout the shell, its background jobs,
// a child in a new session and a double-forked orphan all die.
func TestTimeoutKillsTheWholeTree(t *testing.T) {
	f := newFixture(t)
	// Long enough for the pid files to be written on a loaded machine.
	r := f.newRunner(t, Options{Timeout: 3 * time.Second})
	start := time.Now()
	res := run(t, r, `sleep 100 & echo $! > bg.pid
setsid sleep 101 & echo $! > sid.pid
(sleep 102 & echo $! > orphan.pid)
sleep 103`)
	if !res.TimedOut || res.ExitCode != 137 {
		t.Errorf("TimedOut=%v exit=%d, want true/137", res.TimedOut, res.ExitCode)
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("took %v", took)
	}
	for _, name := range []string{"bg.pid", "sid.pid", "orphan.pid"} {
		assertDead(t, f.ws, name)
	}
	control(t, r)
}

// TestNothingOutlivesACommand: background jobs left running when the shell
// exits are killed too, and Run does not wait for them.
func TestNothingOutlivesACommand(t *testing.T) {
	f := newFixture(t)
	r := f.newRunner(t, Options{})
	start := time.Now()
	res := run(t, r, `sleep 100 & echo $! > bg.pid; nohup sleep 100 > /dev/null 2>&1 & echo $! > nohup.pid; echo done`)
	if res.ExitCode != 0 || res.TimedOut || strings.TrimSpace(res.Output) != "done" {
		t.Errorf("exit %d timedOut %v %q", res.ExitCode, res.TimedOut, res.Output)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("Run waited for the background job: %v", took)
	}
	assertDead(t, f.ws, "bg.pid")
	assertDead(t, f.ws, "nohup.pid")
}

func assertDead(t *testing.T, ws, pidFile string) {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(ws, pidFile))
	if err != nil {
		t.Errorf("%s: %v", pidFile, err)
		return
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 1 {
		t.Errorf("%s: bad pid %q", pidFile, b)
		return
	}
	if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
		stat, _ := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		t.Errorf("process %d from %s still exists (%v): %s", pid, pidFile, err, stat)
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
}

func TestContextCancelKills(t *testing.T) {
	f := newFixture(t)
	r := f.newRunner(t, Options{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var res Result
	var err error
	go func() {
		defer close(done)
		res, err = r.Run(ctx, Command{Line: "sleep 100 & echo $! > bg.pid; touch started; wait"})
	}()
	started := filepath.Join(f.ws, "started")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, err := os.Stat(started); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the command did not start")
		}
		time.Sleep(5 * time.Millisecond)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
	if res.TimedOut {
		t.Error("a cancel is not a timeout")
	}
	assertDead(t, f.ws, "bg.pid")
}

func TestWorkingDir(t *testing.T) {
	f := newFixture(t)
	r := f.newRunner(t, Options{})
	if err := os.MkdirAll(filepath.Join(f.ws, "sub/dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(f.base, filepath.Join(f.ws, "out")); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.ws, "file"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		dir, want, wantErr string
	}{
		{"", f.ws, ""},
		{".", f.ws, ""},
		{"sub/dir", f.ws + "/sub/dir", ""},
		{f.ws + "/sub", f.ws + "/sub", ""},
		{"sub/../sub/dir", f.ws + "/sub/dir", ""},
		{"..", "", "outside the workspace"},
		{f.base, "", "outside the workspace"},
		{"/etc", "", "outside the workspace"},
		{"out", "", "outside the workspace"},
		{"missing", "", "does not exist"},
		{"file", "", "not a directory"},
	} {
		res, err := r.Run(context.Background(), Command{Line: "pwd", Dir: tc.dir})
		if tc.wantErr != "" {
			if !errors.Is(err, ErrBadDir) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("dir %q: err %v, want ErrBadDir with %q", tc.dir, err, tc.wantErr)
			}
			continue
		}
		if err != nil || strings.TrimSpace(res.Output) != tc.want {
			t.Errorf("dir %q: pwd %q, err %v; want %q", tc.dir, res.Output, err, tc.want)
		}
	}
}

func TestRunRefusesBadLines(t *testing.T) {
	f := newFixture(t)
	r := f.newRunner(t, Options{})
	for _, tc := range []struct {
		line, want string
	}{
		{"", "empty command"},
		{"   ", "empty command"},
		{"echo a\x00b", "NUL"},
		{strings.Repeat("x", MaxLineBytes+1), "over the"},
		{"rm -rf /", "recursive-force-delete"},
	} {
		_, err := r.Run(context.Background(), Command{Line: tc.line})
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.20q: err %v, want %q", tc.line, err, tc.want)
		}
	}
	var be *BlockedError
	if _, err := r.Run(context.Background(), Command{Line: "sudo ls"}); !errors.As(err, &be) || be.Rule != RulePrivilege {
		t.Errorf("sudo: %v", err)
	}
}

// TestStatus covers the /ready "sandbox" check in its three states.
func TestStatus(t *testing.T) {
	f := newFixture(t)
	r := f.newRunner(t, Options{})
	ok, msg := r.Status()
	if r.abi > 0 && (!ok || msg != fmt.Sprintf("landlock ABI v%d", r.abi)) {
		t.Errorf("Status = %v %q", ok, msg)
	}
	// Where the kernel lacks Landlock (simulated: the probe's outcome is
	// all that differs).
	r.abi, r.why = 0, "the kernel is built without Landlock"
	if ok, msg := r.Status(); !ok || msg != "unavailable: the kernel is built without Landlock" {
		t.Errorf("degraded Status = %v %q", ok, msg)
	}
	r.require = true
	if ok, _ := r.Status(); ok {
		t.Error("require_sandbox without Landlock must fail the check")
	}
	_, err := r.Run(context.Background(), Command{Line: "true"})
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "require_sandbox") {
		t.Errorf("Run under require_sandbox without Landlock: %v", err)
	}
}

// TestDegradedStillLimits: without Landlock a command still gets the clean
// environment, the limits, the deny list and the kill on timeout.
func TestDegradedStillLimits(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-DEGRADED-CANARY")
	f := newFixture(t)
	r := f.newRunner(t, Options{Limits: Limits{OpenFiles: 77}})
	r.abi, r.why = 0, "simulated"
	res := run(t, r, "env; ulimit -n")
	if strings.Contains(res.Output, "CANARY") || !strings.Contains(res.Output, "\n77\n") {
		t.Errorf("degraded env/limits: %q", res.Output)
	}
	if _, err := r.Run(context.Background(), Command{Line: "reboot"}); err == nil {
		t.Error("deny list not applied in degraded mode")
	}
	res, err := r.Run(context.Background(), Command{Line: "sleep 100 & echo $! > bg.pid; wait", Timeout: 2 * time.Second})
	if err != nil || !res.TimedOut {
		t.Errorf("no timeout in degraded mode: %v %+v", err, res)
	}
	assertDead(t, f.ws, "bg.pid")
}

func TestLauncherRejectsBadArguments(t *testing.T) {
	for _, args := range [][]string{nil, {"supervise"}, {"confine", "{not json"}, {"other", "{}"}} {
		if code := RunLauncher(args); code != 2 {
			t.Errorf("RunLauncher(%q) = %d, want 2", args, code)
		}
	}
}

// TestConcurrentRuns: commands of different sessions run side by side with
// their own temp dirs.
func TestConcurrentRuns(t *testing.T) {
	f := newFixture(t)
	r := f.newRunner(t, Options{})
	errs := make(chan error, 8)
	for i := 0; i < 8; i++ {
		go func() {
			res, err := r.Run(context.Background(), Command{Line: fmt.Sprintf(`echo %d > "$TMPDIR/n" && sleep 0.1 && cat "$TMPDIR/n"`, i)})
			if err == nil && strings.TrimSpace(res.Output) != strconv.Itoa(i) {
				err = fmt.Errorf("run %d saw %q", i, res.Output)
			}
			errs <- err
		}()
	}
	for i := 0; i < 8; i++ {
		if err := <-errs; err != nil {
			t.Error(err)
		}
	}
}

// unixClientArg makes the test binary, copied into a workspace, connect to
// the UNIX socket named by its argument (no python needed).
const unixClientArg = "__sandbox-test-unix-client"

func unixClient(args []string) int {
	c, err := net.Dial("unix", args[0])
	if err != nil {
		fmt.Println("dial:", err)
		return 1
	}
	c.Close()
	fmt.Println("connected")
	return 0
}

// TestOutsideUnixSocketsUnreachable: a command cannot connect to a socket
// the gateway (or D-Bus, or Docker) listens on, by path or abstract name.
// Landlock ABI 9 refuses it; below that, a root gateway's commands get no
// UNIX sockets at all.
func TestOutsideUnixSocketsUnreachable(t *testing.T) {
	for _, user := range execUsers() {
		t.Run("exec-user="+user, func(t *testing.T) { testOutsideUnixSockets(t, user) })
	}
}

// execUsers are the tools.exec.user values worth testing as this user:
// under a root gateway the default (nobody) and root, which keeps commands
// uid 0; an unprivileged gateway ignores the setting.
func execUsers() []string {
	if os.Geteuid() == 0 {
		return []string{DefaultExecUser, "root"}
	}
	return []string{DefaultExecUser}
}

func testOutsideUnixSockets(t *testing.T, user string) {
	f := newFixture(t)
	r := f.newRunner(t, Options{User: user, Limits: clientLimits()})
	requireLandlock(t, r)
	if r.abi < 9 && os.Geteuid() != 0 {
		t.Skipf("Landlock ABI %d cannot restrict UNIX sockets and the gateway is unprivileged, where commands may reach what its user can (README.md, Security model)", r.abi)
	}
	client := filepath.Join(f.ws, "client")
	if err := copyFile(os.Args[0], client, 0o755); err != nil {
		t.Fatal(err)
	}
	var got atomic.Int32
	for _, addr := range []string{filepath.Join(f.base, "gateway.sock"), "@perch-sandbox-test-" + strconv.Itoa(os.Getpid())} {
		ln, err := net.Listen("unix", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		go func() {
			for {
				c, err := ln.Accept()
				if err != nil {
					return
				}
				got.Add(1)
				c.Close()
			}
		}()
		res := run(t, r, "./client "+unixClientArg+" "+addr)
		if res.ExitCode == 0 || strings.Contains(res.Output, "connected") || !strings.Contains(res.Output, "dial:") {
			t.Errorf("%s: exit %d %q, want the client to run and fail to dial", addr, res.ExitCode, res.Output)
		}
	}
	if n := got.Load(); n != 0 {
		t.Errorf("the listeners accepted %d connections", n)
	}
	// Outside the sandbox the same client connects: the refusal above is
	// the sandbox's, not a broken client.
	out, err := exec.Command(client, unixClientArg, filepath.Join(f.base, "gateway.sock")).CombinedOutput()
	if err != nil || !strings.Contains(string(out), "connected") {
		t.Errorf("unconfined client: %v %q", err, out)
	}
	control(t, r)
}

// TestStaleTempDirsRemoved: temp dirs a crashed gateway left a day ago go
// at the next start; recent ones (another gateway's running command) stay.
func TestStaleTempDirsRemoved(t *testing.T) {
	f := newFixture(t)
	old := filepath.Join(f.ws, ".tmp", "exec-7-old")
	recent := filepath.Join(f.ws, ".tmp", "exec-8-recent")
	for _, d := range []string{old, recent} {
		if err := os.MkdirAll(filepath.Join(d, "sub"), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	day := time.Now().Add(-25 * time.Hour)
	if err := os.Chtimes(old, day, day); err != nil {
		t.Fatal(err)
	}
	f.newRunner(t, Options{})
	if _, err := os.Stat(old); !os.IsNotExist(err) {
		t.Errorf("stale %s kept: %v", old, err)
	}
	if _, err := os.Stat(recent); err != nil {
		t.Errorf("recent %s removed: %v", recent, err)
	}
}
