package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

func TestResourceLimits(t *testing.T) {
	f := newFixture(t)
	r := f.newRunner(t, Options{Limits: Limits{
		CPUSeconds: 7, AddressSpace: 1 << 30, Data: 100 << 20, OpenFiles: 99, FileSize: 1 << 20, Processes: 40,
	}})
	res := run(t, r, "ulimit -t; ulimit -v; ulimit -d; ulimit -n; ulimit -f; ulimit -c")
	want := []string{"7", fmt.Sprint(1 << 20), fmt.Sprint(100 << 10), "99", fmt.Sprint(1 << 11), "0"}
	if got := strings.Fields(res.Output); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("limits %q, want %q", got, want)
	}
	// The limits cannot be raised back.
	if res := run(t, r, "ulimit -n 100"); res.ExitCode == 0 {
		t.Error("a command raised its open-files limit")
	}
	// A file beyond FileSize is cut short.
	res = run(t, r, "head -c 3000000 /dev/zero > big; ls -l big | awk '{print $5}'")
	if strings.TrimSpace(lastLine(res.Output)) != fmt.Sprint(1<<20) {
		t.Errorf("file size limit: %q", res.Output)
	}
	// Memory beyond Data fails to be allocated (a 300 MB string in awk).
	res = run(t, r, `awk 'BEGIN { s = "x"; while (length(s) < 300000000) s = s s; print "allocated" }'`)
	if strings.Contains(res.Output, "allocated") {
		t.Errorf("allocated past the data limit: %q", res.Output)
	}
	control(t, r)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// TestRootLosesItsPowers: under a root gateway, a command has not a single
// capability (no module loading, mounts, raw devices, reboot), whether it
// runs as nobody or, with tools.exec.user root, as uid 0.
func TestRootLosesItsPowers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("capabilities are dropped only when the gateway runs as root; this test runs as an unprivileged user, where there is nothing to drop")
	}
	for _, user := range execUsers() {
		t.Run("exec-user="+user, func(t *testing.T) { testRootLosesItsPowers(t, user) })
	}
}

func testRootLosesItsPowers(t *testing.T, user string) {
	f := newFixture(t)
	r := f.newRunner(t, Options{User: user})
	res := run(t, r, "grep -E '^Cap(Inh|Prm|Eff|Bnd|Amb)' /proc/self/status; grep NoNewPrivs /proc/self/status")
	for _, line := range strings.Split(strings.TrimSpace(res.Output), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 || (strings.HasPrefix(f[0], "Cap") && f[1] != "0000000000000000") ||
			(f[0] == "NoNewPrivs:" && f[1] != "1") {
			t.Errorf("%s", line)
		}
	}
	if res := run(t, r, "mknod dev b 8 0"); res.ExitCode == 0 {
		t.Error("mknod of a block device succeeded")
	}
}

// cgroupStats reads the kernel's own account of r's per-command pids
// cgroups: the highest task count (pids.peak, else pids.current) and how
// many forks the limit refused (pids.events "max"), summed over them.
func cgroupStats(r *Runner) (peak, refused int) {
	dirs, _ := filepath.Glob(filepath.Join(cgParent(r.tree()), fmt.Sprintf("%s%d-*", cgroupPrefix, os.Getpid())))
	if r.tree().v1Pids != "" {
		dirs, _ = filepath.Glob(filepath.Join(r.tree().v1Pids, fmt.Sprintf("%s%d-*", cgroupPrefix, os.Getpid())))
	}
	for _, d := range dirs {
		b, err := os.ReadFile(filepath.Join(d, "pids.peak"))
		if err != nil {
			b, _ = os.ReadFile(filepath.Join(d, "pids.current"))
		}
		v, _ := strconv.Atoi(strings.TrimSpace(string(b)))
		peak += v
		b, _ = os.ReadFile(filepath.Join(d, "pids.events"))
		if _, n, ok := strings.Cut(strings.TrimSpace(string(b)), "max "); ok {
			v, _ := strconv.Atoi(n)
			refused += v
		}
	}
	return peak, refused
}

// processesRunning counts live processes whose command line contains s.
func processesRunning(s string) int {
	n := 0
	for _, pid := range procEntries() {
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err == nil && strings.Contains(string(cmdline), s) {
			n++
		}
	}
	return n
}

// forkBomb evades the deny list (the bomb sits in a script file), so the
// limits alone must hold it. The script's name is unique, so its processes
// can be told from any other test's.
func forkBomb() (line, script string) {
	script = fmt.Sprintf("bomb-%d-%d.sh", os.Getpid(), time.Now().UnixNano())
	return fmt.Sprintf(`printf 'b(){ b|b& }; b\n' > %s && sh %s; sleep 30`, script, script), script
}

// TestForkBombIsContained: a fork bomb stays within the process budget,
// dies with its command, and the gateway (this process) keeps working.
// As root the budget is a pids cgroup, whose count is sampled; an
// unprivileged run relies on RLIMIT_NPROC (see the test after this one).
func TestForkBombIsContained(t *testing.T) {
	f := newFixture(t)
	const budget = 32
	r := f.newRunner(t, Options{Limits: Limits{Processes: budget}, Timeout: 3 * time.Second})
	if os.Geteuid() != 0 {
		t.Skip("the tests run unprivileged, where no cgroup is used: TestForkBombIsContainedUnprivileged covers RLIMIT_NPROC")
	}
	if r.tree() == nil || !r.tree().limitsTasks() {
		t.Skip("the tests run as root and no pids cgroup can be made here; the kernel ignores RLIMIT_NPROC for root, so a fork bomb would not be contained (TestForkBombIsContainedUnprivileged still runs)")
	}
	var refused int
	stop := samplePeak(func() int {
		peak, n := cgroupStats(r)
		refused = max(refused, n)
		return peak
	})
	line, script := forkBomb()
	res := run(t, r, line)
	peak := stop()
	t.Logf("tasks: peak %d, budget %d, forks refused %d; timed out %v, exit %d", peak, budget, refused, res.TimedOut, res.ExitCode)
	// The launcher's threads may join the cgroup above the budget for an
	// instant before execve; the bomb never can.
	if peak > budget+8 {
		t.Errorf("tasks peaked at %d (budget %d)", peak, budget)
	}
	if refused == 0 {
		t.Errorf("the limit never refused a fork: the bomb did not reach it, so nothing was tested")
	}
	// Nothing of the bomb is left.
	if n := processesRunning(script); n > 0 {
		t.Errorf("%d bomb processes left after the run", n)
	}
	// And the gateway can still start commands.
	control(t, r)
}

// samplePeak samples count until the returned stop is called, which
// returns the highest value seen.
func samplePeak(count func() int) (stop func() int) {
	var peak int
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			peak = max(peak, count())
			select {
			case <-done:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()
	return func() int {
		close(done)
		wg.Wait()
		return peak
	}
}

// unprivilegedHelperArg makes the test binary run one fork bomb as the user
// it was started as and report on stdout (see TestForkBombIsContainedUnprivileged).
const unprivilegedHelperArg = "__sandbox-test-unprivileged"

type helperReport struct {
	Baseline, Peak, After int
	TimedOut              bool
	ControlOK             bool
	Err                   string
}

func unprivilegedHelper(args []string) int {
	_ = json.NewEncoder(os.Stdout).Encode(forkBombReport(args[0]))
	return 0
}

// forkBombReport runs a fork bomb in a Runner on ws and counts the tasks of
// the current user around it.
func forkBombReport(ws string) (rep helperReport) {
	r, err := New(Options{Workspace: ws, Limits: Limits{Processes: 32}, Timeout: 3 * time.Second, Log: quietLog()})
	if err != nil {
		rep.Err = err.Error()
		return rep
	}
	uid := os.Getuid()
	count := func() int { return int(tasksOfUser(uid)) }
	rep.Baseline = count()
	stop := samplePeak(count)
	line, _ := forkBomb()
	res, err := r.Run(context.Background(), Command{Line: line})
	rep.Peak = stop()
	if err != nil {
		rep.Err = err.Error()
		return rep
	}
	rep.TimedOut = res.TimedOut
	// Killed tasks whose parent is gone wait for PID 1 to reap them, which
	// some inits do late: count only live ones.
	rep.After = liveTasksOfUser(uid)
	res, err = r.Run(context.Background(), Command{Line: "echo ok", Timeout: time.Minute})
	rep.ControlOK = err == nil && strings.TrimSpace(res.Output) == "ok"
	if !rep.ControlOK {
		rep.Err = fmt.Sprintf("control command after the bomb: %v, exit %d, %q", err, res.ExitCode, res.Output)
	}
	return rep
}

// TestForkBombIsContainedUnprivileged runs the bomb under an unprivileged
// gateway, where RLIMIT_NPROC (not a cgroup) must hold it. As root, the test
// binary is re-run as nobody with a workspace nobody owns.
func TestForkBombIsContainedUnprivileged(t *testing.T) {
	if os.Geteuid() != 0 {
		checkForkBombReport(t, forkBombReport(newFixture(t).ws))
		return
	}
	const nobody = 65534
	dir, err := os.MkdirTemp("", "perch-sandbox-unpriv-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "sandbox.test")
	if err := copyFile(os.Args[0], bin, 0o755); err != nil {
		t.Fatal(err)
	}
	ws := filepath.Join(dir, "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(ws, nobody, nobody); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, unprivilegedHelperArg, ws)
	cmd.Env = []string{"PATH=" + safePath}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper as nobody: %v: %s", err, out)
	}
	var rep helperReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("helper report %q: %v", out, err)
	}
	checkForkBombReport(t, rep)
}

func checkForkBombReport(t *testing.T, rep helperReport) {
	t.Helper()
	t.Logf("unprivileged fork bomb: %+v", rep)
	if rep.Err != "" {
		t.Fatalf("helper: %s", rep.Err)
	}
	// The helper itself, its supervisor and the confine stage are Go
	// programs with a few threads each; the budget comes on top.
	if rep.Peak > rep.Baseline+32+24 {
		t.Errorf("nobody's tasks peaked at %d (baseline %d, budget 32)", rep.Peak, rep.Baseline)
	}
	if rep.Peak < rep.Baseline+8 {
		t.Errorf("nobody's tasks peaked at %d (baseline %d): the bomb did not run, so nothing was tested", rep.Peak, rep.Baseline)
	}
	if rep.After > rep.Baseline+8 {
		t.Errorf("%d tasks left after the run (baseline %d)", rep.After, rep.Baseline)
	}
	if !rep.ControlOK {
		t.Error("the gateway could not run a command after the bomb")
	}
}

func copyFile(src, dst string, mode os.FileMode) error {
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, mode)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

// liveTasksOfUser counts the tasks of uid that are not zombies.
func liveTasksOfUser(uid int) int {
	n := 0
	for _, pid := range procEntries() {
		st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil || !strings.Contains(string(st), fmt.Sprintf("\nUid:\t%d\t", uid)) || strings.Contains(string(st), "\nState:\tZ") {
			continue
		}
		threads := 1
		if _, v, ok := strings.Cut(string(st), "\nThreads:\t"); ok {
			line, _, _ := strings.Cut(v, "\n")
			if t, err := strconv.Atoi(line); err == nil {
				threads = t
			}
		}
		n += threads
	}
	return n
}
