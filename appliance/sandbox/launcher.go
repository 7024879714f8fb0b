package sandbox

import (
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// LauncherArg is the hidden first argument that turns the perch binary into
// the sandbox launcher. cmd/perch's main must hand over to RunLauncher before
// anything else when it sees it:
//
//	if len(os.Args) > 1 && os.Args[1] == sandbox.LauncherArg {
//		os.Exit(sandbox.RunLauncher(os.Args[2:]))
//	}
const LauncherArg = "__sandbox-exec"

// The launcher's two stages.
const (
	stageSupervise = "supervise"
	stageConfine   = "confine"
)

// statusFD is where the launcher reports a setup failure ("error: …"); the
// gateway reads EOF when the shell was started. It is close-on-exec in the
// shell, so no command can write to it.
const statusFD = 3

// launchSpec is what the gateway hands to the launcher, as one JSON
// argument. It carries paths and limits, never a secret: any process of the
// same user can read a command line.
type launchSpec struct {
	Line   string     `json:"line"`
	Env    []string   `json:"env"`
	ABI    int        `json:"abi"`
	Rules  []pathRule `json:"rules,omitempty"`
	Limits Limits     `json:"limits"`
	// Cgroups are the command's cgroups, joined before anything runs;
	// TasksLimited: one of them holds the process budget (pids.max).
	Cgroups      []string `json:"cgroups,omitempty"`
	TasksLimited bool     `json:"tasks_limited,omitempty"`
	// Protect makes the seccomp filter refuse signals to the supervisor
	// and the gateway (GatewayPID, and its group GatewayPGID); KeepGroup
	// refuses setsid and setpgid (seccomp.go).
	Protect     bool `json:"protect,omitempty"`
	GatewayPID  int  `json:"gateway_pid,omitempty"`
	GatewayPGID int  `json:"gateway_pgid,omitempty"`
	KeepGroup   bool `json:"keep_group,omitempty"`
	// DenyUnix makes the seccomp filter refuse UNIX sockets (root on a
	// Landlock ABI below 9).
	DenyUnix bool `json:"deny_unix,omitempty"`
	// SetUser: the command runs as UID:GID with Groups (a root gateway's
	// tools.exec.user).
	SetUser bool  `json:"set_user,omitempty"`
	UID     int   `json:"uid,omitempty"`
	GID     int   `json:"gid,omitempty"`
	Groups  []int `json:"groups,omitempty"`
	// Hide is a directory above Workspace that the command's user cannot
	// pass through; the workspace is revealed under it (reveal.go) and
	// the command starts in Dir.
	Hide      string `json:"hide,omitempty"`
	Workspace string `json:"ws,omitempty"`
	Dir       string `json:"dir,omitempty"`
}

// RunLauncher runs the launcher stage named by args[0] with the JSON spec
// in args[1] and returns the process exit code. It is only ever started by a
// Runner.
//
// The supervise stage is the gateway's child. It becomes a child subreaper,
// starts the confine stage in a process group of its own and waits for it;
// when the shell exits, or on SIGTERM from the gateway, it kills the group
// and every descendant that was reparented to it (double forks and setsid
// included), so nothing a command starts outlives it. It exits with the
// shell's status (128+signal when the shell was killed).
//
// The confine stage joins the pids cgroup (root only), reveals the
// workspace where the command's user cannot reach it by path, sets
// no_new_privs, applies the Landlock ruleset, drops every capability and
// becomes tools.exec.user (root only), installs the seccomp filter
// (seccomp.go), sets the resource limits and execs /bin/sh -c. All of it happens on one locked
// thread right before execve, so the restrictions bind the shell and all it
// starts, and never the supervisor or the gateway.
func RunLauncher(args []string) int {
	if len(args) != 2 {
		fmt.Fprintln(os.Stderr, "perch: "+LauncherArg+" is internal to the exec sandbox; it is not a command")
		return 2
	}
	var spec launchSpec
	if err := json.Unmarshal([]byte(args[1]), &spec); err != nil {
		fmt.Fprintf(os.Stderr, "perch: %s: bad spec: %v\n", LauncherArg, err)
		return 2
	}
	switch args[0] {
	case stageSupervise:
		return supervise(&spec, args[1])
	case stageConfine:
		return confine(&spec)
	}
	fmt.Fprintf(os.Stderr, "perch: %s: unknown stage %q\n", LauncherArg, args[0])
	return 2
}

func supervise(spec *launchSpec, rawSpec string) int {
	status := os.NewFile(statusFD, "status")
	fail := func(format string, a ...any) int {
		fmt.Fprintf(status, "error: "+format, a...)
		return 126
	}
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return fail("becoming a child subreaper: %v", err)
	}
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)

	sys := &syscall.SysProcAttr{Setpgid: true}
	if spec.Hide != "" {
		// A mount namespace of the command's own, for reveal; Go makes
		// its mounts private before the confine stage starts.
		sys.Unshareflags = syscall.CLONE_NEWNS
	}
	// /proc/self/exe is this very binary even if a package upgrade has
	// replaced the file on disk since the gateway started.
	pid, err := syscall.ForkExec("/proc/self/exe", []string{"perch", LauncherArg, stageConfine, rawSpec},
		&syscall.ProcAttr{
			Env:   os.Environ(), // launcherEnv: Go runtime settings only
			Files: []uintptr{0, 1, 2, statusFD},
			Sys:   sys,
		})
	if err != nil {
		return fail("starting the confined shell: %v", err)
	}
	// The gateway kills this group if the supervisor dies unexpectedly.
	fmt.Fprintf(status, "pgid %d\n", pid)
	status.Close()

	// The shell is killed through a pidfd so that a signal arriving just as
	// the loop below reaps it cannot hit a process that reused its pid.
	// Orphans are left to reapAll, which scans and reaps on one goroutine.
	pidfd, pidfdErr := unix.PidfdOpen(pid, 0)
	go func() {
		<-sigs
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		if pidfdErr == nil {
			_ = unix.PidfdSendSignal(pidfd, unix.SIGKILL, nil, 0)
		} else {
			_ = syscall.Kill(pid, syscall.SIGKILL) // kernels before 5.3
		}
	}()

	var ws syscall.WaitStatus
	code := 126
	for {
		wpid, err := syscall.Wait4(-1, &ws, 0, nil)
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			break
		}
		if wpid == pid {
			code = exitCode(ws)
			break
		}
		// An orphan reparented to us ended; keep waiting for the shell.
	}
	reapAll(pid)
	return code
}

func exitCode(ws syscall.WaitStatus) int {
	if ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ws.ExitStatus()
}

// killTree kills the command's process group and every direct child.
func killTree(pgid int) {
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	for _, c := range childrenOf(os.Getpid()) {
		_ = syscall.Kill(c, syscall.SIGKILL)
	}
}

// reapAll kills and reaps until no descendant is left. Each exit of a child
// reparents its own children to us (we are a subreaper), and the next round
// kills them, so the loop ends once the tree is empty; the process budget
// bounds how many rounds a fork bomb can make it take.
func reapAll(pgid int) {
	for {
		killTree(pgid)
		_, err := syscall.Wait4(-1, nil, 0, nil)
		if err == syscall.ECHILD {
			return
		}
	}
}

func confine(spec *launchSpec) int {
	// Never unlocked: no_new_privs, the Landlock domain and the capability
	// sets are per thread, and execve below must run on this one.
	runtime.LockOSThread()
	status := os.NewFile(statusFD, "status")
	unix.CloseOnExec(statusFD)
	fail := func(format string, a ...any) int {
		fmt.Fprintf(status, "error: "+format, a...)
		return 126
	}

	for _, dir := range spec.Cgroups {
		if err := joinCgroupDir(dir); err != nil {
			return fail("joining the command's cgroup: %v", err)
		}
	}
	if spec.Hide != "" {
		if err := reveal(spec.Hide, spec.Workspace); err != nil {
			return fail("%v", err)
		}
		if err := os.Chdir(spec.Dir); err != nil {
			return fail("entering %s: %v", spec.Dir, err)
		}
	}
	// RLIMIT_NPROC counts all tasks of the real user, so the budget goes on
	// top of what the user already runs. Root is exempt from it, and needs
	// the cgroup above.
	uid := os.Getuid()
	if spec.SetUser {
		uid = spec.UID
	}
	nproc := spec.Limits.Processes
	switch {
	case spec.TasksLimited:
		// The pids cgroup holds the command exactly; counting the user's
		// tasks costs a walk of /proc per command.
		nproc = ^uint64(0)
	case uid != 0:
		nproc += tasksOfUser(uid)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fail("setting no_new_privs: %v", err)
	}
	// Landlock first, as root: the rules open their paths, some of which
	// the command's user could not even name.
	if spec.ABI > 0 {
		if err := applyLandlock(spec.ABI, spec.Rules); err != nil {
			return fail("applying the Landlock ruleset: %v", err)
		}
	}
	if os.Geteuid() == 0 {
		// The bounding set needs CAP_SETPCAP, the user switch CAP_SETUID
		// and CAP_SETGID: drop the rest after both.
		if err := dropBoundingSet(); err != nil {
			return fail("dropping root's capabilities: %v", err)
		}
		if spec.SetUser {
			if err := switchUser(spec.UID, spec.GID, spec.Groups); err != nil {
				return fail("becoming user %d (tools.exec.user): %v", spec.UID, err)
			}
		}
		if err := clearCapabilities(); err != nil {
			return fail("dropping root's capabilities: %v", err)
		}
	}
	filter := filterSpec{DenyUnix: spec.DenyUnix, NoNewGroups: spec.KeepGroup}
	if spec.Protect {
		sup := int32(os.Getppid())
		filter.Targets = []int32{-1, sup, -sup, int32(spec.GatewayPID), -int32(spec.GatewayPGID)}
	}
	if err := installFilter(filter); err != nil {
		return fail("%v", err)
	}
	// Everything execve needs is allocated before the limits: past them the
	// Go runtime may be unable to grow its heap (address space, data).
	path, err := syscall.BytePtrFromString("/bin/sh")
	if err != nil {
		return fail("preparing /bin/sh: %v", err)
	}
	argv, err := syscall.SlicePtrFromStrings([]string{"sh", "-c", spec.Line})
	if err != nil {
		return fail("preparing the command line: %v", err)
	}
	envv, err := syscall.SlicePtrFromStrings(spec.Env)
	if err != nil {
		return fail("preparing the environment: %v", err)
	}
	if err := closeInherited(); err != nil {
		return fail("%v", err)
	}
	if err := setLimits(spec.Limits, nproc); err != nil {
		return fail("%v", err)
	}
	_, _, errno := syscall.RawSyscall(syscall.SYS_EXECVE, uintptr(unsafe.Pointer(path)),
		uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envv[0])))
	return fail("running /bin/sh: %v", errno)
}

// dropBoundingSet empties the bounding and ambient capability sets of this
// thread, so nothing the command runs can gain a capability back.
func dropBoundingSet() error {
	for c := 0; c < 64; c++ {
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
		if err == unix.EINVAL {
			break // past the kernel's last capability
		}
		if err != nil {
			return fmt.Errorf("dropping capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && err != unix.EINVAL {
		return fmt.Errorf("clearing ambient capabilities: %w", err)
	}
	return nil
}

// clearCapabilities empties the inheritable, permitted and effective sets
// of this thread, so a command run by a root gateway as root (tools.exec.user
// root) is uid 0 without any power: it cannot load modules, reboot, mount,
// make device nodes, bypass file permissions or raise its limits.
func clearCapabilities() error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clearing capabilities: %w", err)
	}
	return nil
}

// setLimits applies l, with nproc as RLIMIT_NPROC. Soft and hard limits are
// equal so the command cannot raise them back; a limit already lower is
// kept.
func setLimits(l Limits, nproc uint64) error {
	set := func(name string, res int, soft, hard uint64) error {
		var cur unix.Rlimit
		if err := unix.Getrlimit(res, &cur); err == nil {
			hard = min(hard, cur.Max)
			soft = min(soft, hard)
		}
		if err := unix.Setrlimit(res, &unix.Rlimit{Cur: soft, Max: hard}); err != nil {
			return fmt.Errorf("setting the %s limit: %w", name, err)
		}
		return nil
	}
	// CPU: SIGXCPU at the soft limit, SIGKILL a moment later.
	if err := set("CPU time", unix.RLIMIT_CPU, l.CPUSeconds, l.CPUSeconds+2); err != nil {
		return err
	}
	for _, x := range []struct {
		name string
		res  int
		v    uint64
	}{
		{"address space", unix.RLIMIT_AS, l.AddressSpace},
		{"data size", unix.RLIMIT_DATA, l.Data},
		{"open files", unix.RLIMIT_NOFILE, l.OpenFiles},
		{"file size", unix.RLIMIT_FSIZE, l.FileSize},
		{"process count", unix.RLIMIT_NPROC, nproc},
		{"core size", unix.RLIMIT_CORE, 0},
	} {
		if err := set(x.name, x.res, x.v, x.v); err != nil {
			return err
		}
	}
	return nil
}
