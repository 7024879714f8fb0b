package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
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

// TestRootLosesItsPowers: under a root gateway, a command is uid 0 without
// a single capability (no module loading, mounts, raw devices, reboot).
func TestRootLosesItsPowers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("capabilities are dropped only when the gateway runs as root; this test runs as an unprivileged user, where there is nothing to drop")
	}
	f := newFixture(t)
	r := f.newRunner(t, Options{})
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

// tasksOnMachine counts all tasks, to see that a fork bomb stays bounded.
func tasksOnMachine() int {
	n := 0
	for _, pid := range procEntries() {
		if d, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid)); err == nil {
			n += len(d)
		}
	}
	return n
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

// forkBomb evades the deny list (the bomb sits in a script file), so the
// limits alone must hold it.
const forkBomb = `printf 'b(){ b|b& }; b\n' > bomb.sh && sh bomb.sh; sleep 30`

// TestForkBombIsContained: a fork bomb stays within the process budget,
// dies with its command, and the gateway (this process) keeps working.
func TestForkBombIsContained(t *testing.T) {
	f := newFixture(t)
	const budget = 32
	r := f.newRunner(t, Options{Limits: Limits{Processes: budget}, Timeout: 3 * time.Second})
	if os.Geteuid() == 0 && r.cgroups == nil {
		t.Skip("the tests run as root and no pids cgroup can be made here; the kernel ignores RLIMIT_NPROC for root, so a fork bomb would not be contained (see TestForkBombIsContainedUnprivileged)")
	}
	baseline := tasksOnMachine()
	stop := samplePeak(tasksOnMachine)
	res := run(t, r, forkBomb)
	peak := stop()
	if !res.TimedOut {
		t.Logf("bomb ended before the timeout: exit %d", res.ExitCode)
	}
	// Other sessions share this machine: allow for their own churn.
	if limit := baseline + budget + 60; peak > limit {
		t.Errorf("tasks peaked at %d (baseline %d, budget %d)", peak, baseline, budget)
	}
	// The bomb is gone: the machine is back near its baseline.
	deadline := time.Now().Add(10 * time.Second)
	for tasksOnMachine() > baseline+30 {
		if time.Now().After(deadline) {
			t.Fatalf("tasks stay at %d after the run (baseline %d)", tasksOnMachine(), baseline)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// And the gateway can still start commands.
	control(t, r)
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
	rep := helperReport{}
	defer func() { _ = json.NewEncoder(os.Stdout).Encode(rep) }()
	r, err := New(Options{Workspace: args[0], Limits: Limits{Processes: 32}, Timeout: 3 * time.Second, Log: quietLog()})
	if err != nil {
		rep.Err = err.Error()
		return 0
	}
	uid := os.Getuid()
	count := func() int { return int(tasksOfUser(uid)) }
	rep.Baseline = count()
	stop := samplePeak(count)
	res, err := r.Run(context.Background(), Command{Line: forkBomb})
	rep.Peak = stop()
	if err != nil {
		rep.Err = err.Error()
		return 0
	}
	rep.TimedOut = res.TimedOut
	rep.After = int(tasksOfUser(uid))
	res, err = r.Run(context.Background(), Command{Line: "echo ok"})
	rep.ControlOK = err == nil && strings.TrimSpace(res.Output) == "ok"
	return 0
}

// TestForkBombIsContainedUnprivileged runs the bomb under an unprivileged
// gateway, where RLIMIT_NPROC (not a cgroup) must hold it. As root, the test
// binary is re-run as nobody with a workspace nobody owns.
func TestForkBombIsContainedUnprivileged(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("already unprivileged: TestForkBombIsContained covers RLIMIT_NPROC")
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
	t.Logf("unprivileged fork bomb: %+v", rep)
	if rep.Err != "" {
		t.Fatalf("helper: %s", rep.Err)
	}
	// The helper itself, its supervisor and the confine stage are Go
	// programs with a few threads each; the budget comes on top.
	if rep.Peak > rep.Baseline+32+24 {
		t.Errorf("nobody's tasks peaked at %d (baseline %d, budget 32)", rep.Peak, rep.Baseline)
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
