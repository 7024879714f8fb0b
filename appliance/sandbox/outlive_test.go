package sandbox

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// treeLine starts background jobs of every kind (plain, in a new session,
// double-forked), records their pids, signals that it is ready and waits.
const treeLine = `sleep 100 & echo $! > bg.pid
setsid sleep 101 & echo $! > sid.pid
(sleep 102 & echo $! > orphan.pid)
sleep 0.2; touch ready; wait`

// alive reports whether pid still runs (a zombie waiting for a parent that
// does not reap counts as gone).
func alive(pid int) bool {
	if err := syscall.Kill(pid, 0); errors.Is(err, syscall.ESRCH) {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := strings.LastIndexByte(string(stat), ')')
	return i < 0 || !strings.HasPrefix(string(stat[i+1:]), " Z")
}

// assertTreeDead checks the pids treeLine recorded, killing survivors.
func assertTreeDead(t *testing.T, ws string) {
	t.Helper()
	for _, name := range []string{"bg.pid", "sid.pid", "orphan.pid"} {
		b, err := os.ReadFile(filepath.Join(ws, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
		if err != nil || pid <= 1 {
			t.Errorf("%s: bad pid %q", name, b)
			continue
		}
		// Killed processes may take a moment to be gone.
		deadline := time.Now().Add(3 * time.Second)
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if alive(pid) {
			t.Errorf("process %d from %s outlived its command", pid, name)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// TestTreeDiesWithItsSupervisor: when the supervisor dies without killing
// the command's tree (SIGKILLed by the OOM killer, or by the command itself
// on a kernel that cannot scope signals), the gateway still ends the whole
// tree at once: through the command's cgroup where there is one, through
// its process group, which it can then not leave, where there is none.
func TestTreeDiesWithItsSupervisor(t *testing.T) {
	check := func(t *testing.T, ws string, res gatewayResult) {
		t.Helper()
		if res.TimedOut || res.Took > 20*time.Second {
			t.Errorf("Run took %v (timed out %v): the tree was waited for, not killed", res.Took, res.TimedOut)
		}
		assertTreeDead(t, ws)
	}
	t.Run("gateway-user", func(t *testing.T) {
		f := newFixture(t)
		r := f.newRunner(t, Options{Timeout: 60 * time.Second})
		if os.Geteuid() != 0 && r.tree() == nil {
			r.abi = min(r.abi, 5) // no cgroup: the process group must do
		}
		stop := make(chan struct{})
		go killSupervisorOn(filepath.Join(f.ws, "ready"), stop)
		start := time.Now()
		res, err := r.Run(context.Background(), Command{Line: treeLine})
		close(stop)
		g := gatewayResult{Output: res.Output, TimedOut: res.TimedOut, Took: time.Since(start)}
		if err != nil {
			g.Err = err.Error()
		}
		check(t, f.ws, g)
	})
	if os.Geteuid() != 0 {
		return
	}
	// A gateway run by nobody without a cgroup of its own, on a kernel
	// whose Landlock cannot scope signals.
	t.Run("gateway-nobody-no-cgroup", func(t *testing.T) {
		ws := nobodyWorkspace(t)
		rep := startGateway(t, gatewayJob{Workspace: ws, ABI: 5, Timeout: 60 * time.Second, Lines: []string{treeLine},
			KillSupervisorOn: filepath.Join(ws, "ready")}, gatewayRun{asNobody: true})
		if rep.Cgroup != "" {
			t.Fatalf("the gateway found a cgroup (%s): this case is not tested", rep.Cgroup)
		}
		check(t, ws, rep.Results[0])
	})
	// A gateway run by nobody in a cgroup subtree delegated to it, as
	// systemd's Delegate= makes one.
	t.Run("gateway-nobody-delegated", func(t *testing.T) {
		fd, dir := delegatedCgroup(t, nobodyID)
		ws := nobodyWorkspace(t)
		rep := startGateway(t, gatewayJob{Workspace: ws, Timeout: 60 * time.Second, Lines: []string{treeLine},
			KillSupervisorOn: filepath.Join(ws, "ready")}, gatewayRun{asNobody: true, cgroupFD: fd})
		if rep.Cgroup != dir {
			t.Fatalf("the gateway's cgroup parent is %q, want the delegated %s", rep.Cgroup, dir)
		}
		check(t, ws, rep.Results[0])
	})
}

// cgroup2Mount returns where the unified hierarchy is mounted.
func cgroup2Mount(t *testing.T) string {
	t.Helper()
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		for i, x := range fields {
			if x == "-" && i+1 < len(fields) && fields[i+1] == "cgroup2" && fields[3] == "/" {
				return fields[4]
			}
		}
	}
	t.Fatal("no cgroup2 hierarchy is mounted")
	return ""
}

// delegatedCgroup makes a cgroup delegated to uid the way systemd does for
// Delegate= (the directory and its cgroup.procs, cgroup.threads and
// cgroup.subtree_control belong to the user) and returns a descriptor on
// it, to start a process in it, and its path.
func delegatedCgroup(t *testing.T, uid int) (int, string) {
	t.Helper()
	dir := filepath.Join(cgroup2Mount(t), fmt.Sprintf("perch-test-delegated-%d-%d", os.Getpid(), time.Now().UnixNano()))
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{dir, filepath.Join(dir, "cgroup.procs"), filepath.Join(dir, "cgroup.threads"), filepath.Join(dir, "cgroup.subtree_control")} {
		if err := os.Chown(p, uid, uid); err != nil {
			t.Fatal(err)
		}
	}
	fd, err := unix.Open(dir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		unix.Close(fd)
		// The gateway removes its own cgroups; kill and remove whatever a
		// failure left.
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if e.IsDir() {
				_ = os.WriteFile(filepath.Join(dir, e.Name(), "cgroup.kill"), []byte("1"), 0)
				for i := 0; i < 100 && os.Remove(filepath.Join(dir, e.Name())) != nil; i++ {
					time.Sleep(10 * time.Millisecond)
				}
			}
		}
		_ = os.WriteFile(filepath.Join(dir, "cgroup.kill"), []byte("1"), 0)
		for i := 0; i < 100 && os.Remove(dir) != nil; i++ {
			time.Sleep(10 * time.Millisecond)
		}
	})
	return fd, dir
}

// sigioArg makes the test binary, copied into a workspace, aim SIGKILL at
// the pid in its argument through a pipe's SIGIO (F_SETOWN, then F_SETSIG).
const sigioArg = "__sandbox-test-sigio"

func sigioClient(args []string) int {
	pid, _ := strconv.Atoi(args[0])
	var p [2]int
	if err := unix.Pipe(p[:]); err != nil {
		fmt.Println("pipe:", err)
		return 1
	}
	if _, err := unix.FcntlInt(uintptr(p[0]), unix.F_SETOWN, pid); err != nil {
		fmt.Println("F_SETOWN:", err)
		return 1
	}
	if _, err := unix.FcntlInt(uintptr(p[0]), unix.F_SETSIG, int(unix.SIGKILL)); err != nil {
		fmt.Println("F_SETSIG:", err)
		return 1
	}
	if _, err := unix.FcntlInt(uintptr(p[0]), unix.F_SETFL, unix.O_ASYNC|unix.O_NONBLOCK); err != nil {
		fmt.Println("F_SETFL:", err)
		return 1
	}
	_, _ = unix.Write(p[1], []byte("x"))
	fmt.Println("sent")
	return 0
}

// supervisorKillLine tries every way a command has to kill its supervisor
// ($PPID) with signals, then exits, leaving its background jobs to the
// supervisor, which must still be there to kill them.
const supervisorKillLine = `sleep 100 & echo $! > bg.pid
setsid sleep 101 & echo $! > sid.pid
(sleep 102 & echo $! > orphan.pid)
kill -9 $PPID; echo "kill: $?"
kill -9 -$PPID; echo "killpg: $?"
./client ` + sigioArg + ` $PPID; echo "sigio: $?"
sleep 0.5; echo survived`

// TestCommandCannotKillItsSupervisor: on a kernel whose Landlock cannot
// scope signals (ABI below 6, simulated by lowering the ABI in use), a
// command that runs as its supervisor's user cannot kill it, by pid, by
// process group or through SIGIO, so its background jobs die with it at
// the end. Under a root gateway commands run as another user and cannot
// signal root's processes at all.
func TestCommandCannotKillItsSupervisor(t *testing.T) {
	check := func(t *testing.T, ws string, res gatewayResult) {
		t.Helper()
		if res.Err != "" {
			t.Fatalf("run: %s", res.Err)
		}
		t.Logf("exit %d, timed out %v: %q", res.ExitCode, res.TimedOut, res.Output)
		// A killed supervisor ends the run at once with 137.
		if !strings.Contains(res.Output, "survived") || res.ExitCode != 0 {
			t.Errorf("the supervisor was killed: exit %d, timed out %v, %q", res.ExitCode, res.TimedOut, res.Output)
		}
		assertTreeDead(t, ws)
	}
	inProcess := func(t *testing.T, user string) {
		f := newFixture(t)
		if err := copyFile(os.Args[0], filepath.Join(f.ws, "client"), 0o755); err != nil {
			t.Fatal(err)
		}
		r := f.newRunner(t, Options{User: user, Limits: clientLimits()})
		r.abi = min(r.abi, 5)
		start := time.Now()
		res, err := r.Run(context.Background(), Command{Line: supervisorKillLine})
		g := gatewayResult{Output: res.Output, ExitCode: res.ExitCode, TimedOut: res.TimedOut, Took: time.Since(start)}
		if err != nil {
			g.Err = err.Error()
		}
		check(t, f.ws, g)
	}
	for _, user := range execUsers() {
		t.Run("exec-user="+user, func(t *testing.T) { inProcess(t, user) })
	}
	if os.Geteuid() == 0 {
		t.Run("gateway-nobody", func(t *testing.T) {
			ws := nobodyWorkspace(t)
			if err := copyFile(os.Args[0], filepath.Join(ws, "client"), 0o755); err != nil {
				t.Fatal(err)
			}
			// The gateway's own pid too: a helper gateway may die here.
			line := strings.Replace(supervisorKillLine, "sleep 0.5;", `kill -9 "$(awk '{print $4}' /proc/$PPID/stat)"; echo "gateway: $?"; sleep 0.5;`, 1)
			rep := startGateway(t, gatewayJob{Workspace: ws, ABI: 5, Lines: []string{line}, Limits: clientLimits()}, gatewayRun{asNobody: true})
			check(t, ws, rep.Results[0])
		})
	}
}
