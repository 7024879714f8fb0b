package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// gatewayArg makes the test binary a small gateway: it makes a Runner on a
// workspace and runs command lines, then reports on stdout. Tests start it
// as another user (nobody), with descriptors it inherits, or in a cgroup, to
// see the sandbox as such a gateway would.
const gatewayArg = "__sandbox-test-gateway"

// gatewayJob is what the helper gateway does.
type gatewayJob struct {
	Workspace string        `json:"ws"`
	Timeout   time.Duration `json:"timeout"`
	User      string        `json:"user,omitempty"`
	Limits    Limits        `json:"limits"`
	ABI       int           `json:"abi,omitempty"` // lowered to simulate an older kernel
	Lines     []string      `json:"lines"`
	// KillSupervisorOn: once this file exists, the gateway kills the
	// running command's supervisor with SIGKILL (as anything that
	// killed it would).
	KillSupervisorOn string `json:"kill_supervisor_on,omitempty"`
}

type gatewayResult struct {
	Output   string        `json:"output"`
	ExitCode int           `json:"exit"`
	TimedOut bool          `json:"timed_out"`
	Err      string        `json:"err,omitempty"`
	Took     time.Duration `json:"took"`
}

type gatewayReport struct {
	Err     string          `json:"err,omitempty"`
	Cgroup  string          `json:"cgroup,omitempty"`
	Results []gatewayResult `json:"results"`
}

func gatewayHelper(args []string) int {
	var job gatewayJob
	var rep gatewayReport
	if err := json.Unmarshal([]byte(args[0]), &job); err != nil {
		rep.Err = err.Error()
	} else {
		rep = runGatewayJob(job)
	}
	_ = json.NewEncoder(os.Stdout).Encode(rep)
	return 0
}

func runGatewayJob(job gatewayJob) (rep gatewayReport) {
	r, err := New(Options{Workspace: job.Workspace, Timeout: job.Timeout, User: job.User, Limits: job.Limits, Log: quietLog()})
	if err != nil {
		rep.Err = err.Error()
		return rep
	}
	if job.ABI > 0 && job.ABI < r.abi {
		r.abi = job.ABI
	}
	rep.Cgroup = cgParent(r.tree())
	for _, line := range job.Lines {
		stop := make(chan struct{})
		if job.KillSupervisorOn != "" {
			go killSupervisorOn(job.KillSupervisorOn, stop)
		}
		start := time.Now()
		res, err := r.Run(context.Background(), Command{Line: line})
		close(stop)
		g := gatewayResult{Output: res.Output, ExitCode: res.ExitCode, TimedOut: res.TimedOut, Took: time.Since(start)}
		if err != nil {
			g.Err = err.Error()
		}
		rep.Results = append(rep.Results, g)
	}
	return rep
}

// killSupervisorOn waits for file, then SIGKILLs every supervisor this
// process started.
func killSupervisorOn(file string, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		case <-time.After(5 * time.Millisecond):
		}
		if _, err := os.Stat(file); err != nil {
			continue
		}
		for _, pid := range childrenOf(os.Getpid()) {
			cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
			if strings.Contains(string(cmdline), stageSupervise) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		return
	}
}

const nobodyID = 65534

// clientLimits are the limits for commands that run a copy of the test
// binary: built with -race, it reserves terabytes of address space for
// ThreadSanitizer and would die under the default limits before doing what
// the test is about.
func clientLimits() Limits {
	if raceEnabled {
		return Limits{AddressSpace: 1 << 62, Data: 1 << 62}
	}
	return Limits{}
}

// gatewayRun says how to start the helper gateway.
type gatewayRun struct {
	asNobody bool
	files    []*os.File // become descriptors 3, 4, … (nil: closed)
	cgroupFD int        // when > 0, the gateway is born in this cgroup
}

// startGateway runs job in the helper gateway and returns its report.
func startGateway(t *testing.T, job gatewayJob, how gatewayRun) gatewayReport {
	t.Helper()
	bin := os.Args[0]
	if how.asNobody {
		// The test binary's directory is private to root: run a copy.
		bin = filepath.Join(nobodyDir(t), "sandbox.test")
		if err := copyFile(os.Args[0], bin, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	raw, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, gatewayArg, string(raw))
	cmd.Env = []string{"PATH=" + safePath, "GORACE=" + os.Getenv("GORACE")}
	cmd.ExtraFiles = how.files
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if how.asNobody {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: nobodyID, Gid: nobodyID, Groups: []uint32{}}
	}
	if how.cgroupFD > 0 {
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = how.cgroupFD
	}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper gateway: %v: %s", err, out)
	}
	var rep gatewayReport
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("helper gateway report %q: %v", out, err)
	}
	if rep.Err != "" {
		t.Fatalf("helper gateway: %s", rep.Err)
	}
	return rep
}

// nobodyDir is a directory nobody can enter (t.TempDir's are 0700).
func nobodyDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "perch-sandbox-nobody-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	return dir
}

// nobodyWorkspace is a workspace owned by nobody, in a directory nobody
// can reach.
func nobodyWorkspace(t *testing.T) string {
	t.Helper()
	ws := filepath.Join(nobodyDir(t), "ws")
	if err := os.Mkdir(ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(ws, nobodyID, nobodyID); err != nil {
		t.Fatal(err)
	}
	return ws
}

// asRootAndNobody runs fn as this process's user and, when that is root,
// again for a gateway run by nobody.
func asRootAndNobody(t *testing.T, fn func(t *testing.T, asNobody bool)) {
	t.Run("gateway-user", func(t *testing.T) { fn(t, false) })
	if os.Geteuid() == 0 {
		t.Run("gateway-nobody", func(t *testing.T) { fn(t, true) })
	}
}
