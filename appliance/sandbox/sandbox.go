package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// Defaults.
const (
	// DefaultTimeout is the shell command timeout
	// (tools.exec.timeout_seconds).
	DefaultTimeout = 60 * time.Second
	// DefaultMaxOutput caps the combined output kept per command; with
	// the exit-code line it stays under the registry's 64 KiB result cap.
	DefaultMaxOutput = 60 << 10
	// MaxLineBytes bounds a command line.
	MaxLineBytes = 64 << 10
	// killGrace is how long the supervisor gets to kill the command's tree
	// after SIGTERM before the gateway kills the supervisor's group itself.
	killGrace = 5 * time.Second
	// drainGrace bounds the wait for the output pipe to close once the
	// supervisor is gone (only a process that escaped could hold it).
	drainGrace = 2 * time.Second
)

// Errors callers branch on.
var (
	// ErrUnavailable: Landlock is missing and Options.RequireSandbox is set.
	ErrUnavailable = errors.New("sandbox: the kernel sandbox (Landlock) is unavailable and tools.exec.require_sandbox is true, so commands are refused")
	// ErrBadDir: the working directory is missing or outside the workspace.
	ErrBadDir = errors.New("sandbox: bad working directory")
	// ErrSetup: the launcher could not confine the command; it did not run.
	ErrSetup = errors.New("sandbox: could not confine the command")
)

// Limits are the resource limits of every command. A zero field takes the
// default, sized for a 512 MB board.
type Limits struct {
	// CPUSeconds is RLIMIT_CPU per process (default 60).
	CPUSeconds uint64 `json:"cpu"`
	// AddressSpace is RLIMIT_AS in bytes (default 2 GiB on 64-bit, 1 GiB on
	// 32-bit: Go and Node reserve about 1.2 GiB of address space they
	// never touch, so less breaks them without saving memory).
	AddressSpace uint64 `json:"as"`
	// Data is RLIMIT_DATA in bytes, the memory a process can really
	// allocate (default 256 MiB).
	Data uint64 `json:"data"`
	// OpenFiles is RLIMIT_NOFILE (default 256).
	OpenFiles uint64 `json:"nofile"`
	// FileSize is RLIMIT_FSIZE in bytes, the largest file a command can
	// write (default 128 MiB).
	FileSize uint64 `json:"fsize"`
	// Processes is how many tasks (processes and threads) a command may
	// have at once (default 64): RLIMIT_NPROC on top of what the user
	// already runs, or a pids cgroup when the gateway runs as root.
	Processes uint64 `json:"nproc"`
}

func (l Limits) withDefaults() Limits {
	def := func(v *uint64, d uint64) {
		if *v == 0 {
			*v = d
		}
	}
	as := uint64(2 << 30)
	if strconv.IntSize == 32 {
		as = 1 << 30
	}
	def(&l.CPUSeconds, 60)
	def(&l.AddressSpace, as)
	def(&l.Data, 256<<20)
	def(&l.OpenFiles, 256)
	def(&l.FileSize, 128<<20)
	def(&l.Processes, 64)
	return l
}

// Options configure a Runner.
type Options struct {
	// Workspace is the one directory commands may write (required). It is
	// created when missing.
	Workspace string
	// Timeout is the default per-command deadline (DefaultTimeout when 0;
	// config tools.exec.timeout_seconds).
	Timeout time.Duration
	// RequireSandbox refuses every command when Landlock is unavailable
	// (config tools.exec.require_sandbox).
	RequireSandbox bool
	// MaxOutput caps the combined output kept per command
	// (DefaultMaxOutput when 0).
	MaxOutput int
	// Exe is the binary re-executed as the launcher; it must call
	// RunLauncher when its first argument is LauncherArg. Default
	// /proc/self/exe: the running binary, even after an upgrade replaced
	// the file.
	Exe string
	// Limits are the resource limits of each command.
	Limits Limits
	// Secrets are files or directories that must stay out of reach even
	// where they sit below an allowed directory (the config file, the
	// database, credential files). Perch's /etc/perch, password hashes and
	// private keys are always protected. The workspace must not contain
	// one.
	Secrets []string
	// User is who commands run as when the gateway runs as root
	// (tools.exec.user): a user name or a numeric uid, nobody when empty.
	// An unprivileged gateway's commands run as the gateway's user.
	User string
	// Log receives the start-up report and warnings (slog.Default when nil).
	Log *slog.Logger
}

// Command is one command line to run.
type Command struct {
	// Line is run as /bin/sh -c Line.
	Line string
	// Dir is the working directory: relative to the workspace, or absolute
	// inside it; the workspace when empty.
	Dir string
	// Timeout overrides the Runner's default when > 0.
	Timeout time.Duration
}

// Result is how a command ended.
type Result struct {
	// Output is stdout and stderr interleaved, capped at MaxOutput (the
	// start and the end are kept).
	Output string
	// ExitCode is the shell's exit status; 128+N when it was killed by
	// signal N (137 after a timeout).
	ExitCode int
	// TimedOut: the deadline passed and the command's whole tree was
	// killed.
	TimedOut bool
	// Truncated: output was dropped from the middle.
	Truncated bool
	// Duration is the wall time taken.
	Duration time.Duration
}

// Runner runs command lines confined. It is safe for concurrent use and
// holds no goroutine or process between calls (but for New's cgroup probe,
// which ends by itself within milliseconds).
type Runner struct {
	ws        string // absolute, symlinks resolved
	timeout   time.Duration
	require   bool
	maxOutput int
	exe       string
	limits    Limits
	secrets   secrets
	log       *slog.Logger

	user *execUser // who commands run as, when not the gateway's user
	hide string    // a parent of ws user cannot pass through (reveal.go)
	abi  int       // Landlock ABI in use; 0 when unavailable
	why  string    // why Landlock is unavailable
	pgid int       // the gateway's process group (for the seccomp filter)
	// cgroups is where each command gets a cgroup (nil when nowhere),
	// written by the probe before it closes probed; read it through tree.
	cgroups    *cgroups
	probed     chan struct{}
	probeOnce  sync.Once
	probeFacts facts
	seq        atomic.Uint64
}

// New checks the workspace, probes the kernel and logs once what the sandbox
// can and cannot enforce here.
func New(o Options) (*Runner, error) {
	if o.Workspace == "" {
		return nil, errors.New("sandbox: no workspace given; set agents.defaults.workspace or run perch onboard")
	}
	ws, err := filepath.Abs(o.Workspace)
	if err != nil {
		return nil, fmt.Errorf("sandbox: workspace %q: %w", o.Workspace, err)
	}
	if err := os.MkdirAll(ws, 0o755); err != nil {
		return nil, fmt.Errorf("sandbox: creating the workspace: %w", err)
	}
	if ws, err = filepath.EvalSymlinks(ws); err != nil {
		return nil, fmt.Errorf("sandbox: workspace %q: %w", o.Workspace, err)
	}
	sec, err := newSecrets(builtinSecrets, o.Secrets)
	if err != nil {
		return nil, err
	}
	if err := checkWorkspace(ws, sec); err != nil {
		return nil, err
	}
	r := &Runner{
		ws:        ws,
		timeout:   o.Timeout,
		require:   o.RequireSandbox,
		maxOutput: o.MaxOutput,
		exe:       o.Exe,
		limits:    o.Limits.withDefaults(),
		secrets:   sec,
		log:       o.Log,
	}
	if r.timeout <= 0 {
		r.timeout = DefaultTimeout
	}
	if r.maxOutput <= 0 {
		r.maxOutput = DefaultMaxOutput
	}
	if r.exe == "" {
		r.exe = "/proc/self/exe"
	}
	if r.log == nil {
		r.log = slog.Default()
	}
	if _, err := os.Stat("/bin/sh"); err != nil {
		return nil, fmt.Errorf("sandbox: /bin/sh is missing: %w", err)
	}
	if os.Geteuid() == 0 {
		u, err := lookupExecUser(o.User)
		if err != nil {
			return nil, err
		}
		if u.uid != 0 {
			if err := handOver(ws, u, r.log); err != nil {
				return nil, err
			}
			if r.hide, err = hiddenAncestor(ws, u); err != nil {
				return nil, err
			}
			if r.hide != "" {
				if err := checkHidden(r.hide); err != nil {
					return nil, err
				}
			}
			r.user = u
		}
	}
	r.abi, r.why = landlockABI()
	r.removeStaleTemps()

	r.pgid = syscall.Getpgrp()
	// Finding where commands get a cgroup makes and removes one: a
	// millisecond of the kernel's time (cgroupfs) that would compete with
	// the gateway's start for a board's cores. It runs when the caller
	// says (StartProbe, once the gateway serves) or when the first command
	// needs it (tree), whichever comes first; either way every command has
	// what it would have had. The probe reads what New found through
	// probeFacts, never r's fields, which are the callers' from here on.
	r.probeFacts = r.facts()
	r.probed = make(chan struct{})
	return r, nil
}

// facts are what New found that its log line says beside the cgroups.
type facts struct {
	log               *slog.Logger
	rootCommands      bool // commands run as uid 0
	protect           bool // see protectSupervisor
	abi               int
	require, denyUnix bool
	why, status, ws   string
	user              string // tools.exec.user in use, or ""
	gatewayRoot       bool
	timeout           time.Duration
}

func (r *Runner) facts() facts {
	f := facts{log: r.log, rootCommands: r.commandUID() == 0, protect: r.protectSupervisor(), abi: r.abi,
		require: r.require, denyUnix: r.denyUnix(), why: r.why, status: r.statusText(), ws: r.ws,
		gatewayRoot: os.Geteuid() == 0, timeout: r.timeout}
	if r.user != nil {
		f.user = r.user.name
	}
	return f
}

// probeTree finds where commands get a cgroup and logs once what the
// sandbox enforces.
func probeTree(f facts) *cgroups {
	cg, cgErr := findCgroups(f.gatewayRoot)
	procLimit := "RLIMIT_NPROC"
	switch {
	case cg != nil && cg.limitsTasks():
		procLimit = "pids cgroup"
	case f.rootCommands:
		procLimit = "none"
		f.log.Warn("sandbox: commands run as root (tools.exec.user), where the kernel ignores RLIMIT_NPROC, and no pids cgroup can be made, so a fork bomb in a command is bounded only by its timeout; set tools.exec.user to an unprivileged user",
			"reason", cgErr)
	}
	tree := "cgroup " + cgParent(cg)
	if cg == nil || cg.parent == "" {
		tree = "supervisor"
		if f.protect {
			tree = "supervisor, signals to it refused, process group kept"
		}
		f.log.Info("sandbox: commands get no cgroup of their own; under systemd, perch.service's Delegate= gives the gateway one to make them in", "reason", cgErr)
	}
	logStartup(f, procLimit, tree)
	return cg
}

// StartProbe starts finding where commands get a cgroup, on a goroutine of
// its own, unless that has started already; it also logs what the sandbox
// enforces.
func (r *Runner) StartProbe() {
	r.probeOnce.Do(func() {
		go func() {
			defer close(r.probed)
			r.cgroups = probeTree(r.probeFacts)
		}()
	})
}

// EndProbe waits for a probe that has started to end, and keeps one from
// starting after (a gateway that stops runs no more commands): the probe
// makes and removes a cgroup, and a process that exits in between would
// leave one behind.
func (r *Runner) EndProbe() {
	r.probeOnce.Do(func() { close(r.probed) })
	<-r.probed
}

// tree returns where commands get a cgroup (nil when nowhere), once New's
// probe has found out.
func (r *Runner) tree() *cgroups {
	r.StartProbe()
	<-r.probed
	return r.cgroups
}

// cgParent names where command cgroups are made, for logs and tests.
func cgParent(c *cgroups) string {
	if c == nil {
		return ""
	}
	if c.parent != "" {
		return c.parent
	}
	return c.v1Pids
}

// protectSupervisor: below Landlock ABI 6 nothing stops a command from
// signalling processes of its own user, the supervisor and the gateway
// included; the seccomp filter then refuses it (seccomp.go). A command run
// as another user (tools.exec.user) cannot signal them anyway.
func (r *Runner) protectSupervisor() bool {
	return r.abi < 6 && r.commandUID() == os.Geteuid()
}

func logStartup(f facts, procLimit, tree string) {
	if f.abi == 0 {
		if f.require {
			f.log.Error("sandbox: Landlock is unavailable and tools.exec.require_sandbox is true: exec and command jobs are refused",
				"reason", f.why)
		} else {
			f.log.Warn("sandbox: Landlock is unavailable: commands run with the deny list, resource limits and a clean environment only, and can read whatever the gateway's user can (set tools.exec.require_sandbox to refuse them instead)",
				"reason", f.why)
		}
	} else {
		var missing []string
		if f.abi < 3 {
			missing = append(missing, "truncate(2) outside the workspace (ABI 3)")
		}
		if f.abi < 5 {
			missing = append(missing, "ioctl on device files (ABI 5)")
		}
		if f.abi < 6 {
			missing = append(missing, "signals to the gateway and abstract UNIX sockets (ABI 6)")
		}
		if f.abi < 9 {
			missing = append(missing, "connecting to UNIX sockets outside the workspace (ABI 9)")
		}
		if len(missing) > 0 {
			f.log.Info("sandbox: this kernel's Landlock cannot restrict: "+strings.Join(missing, "; "), "abi", f.abi)
		}
	}
	if f.denyUnix {
		f.log.Warn("sandbox: commands run as root (tools.exec.user) and this kernel's Landlock cannot restrict UNIX sockets, so they get none (no D-Bus, syslog or Docker); set tools.exec.user to an unprivileged user")
	}
	runAs := "the gateway's user"
	switch {
	case f.user != "":
		runAs = f.user
	case f.gatewayRoot:
		runAs = "root without capabilities"
		f.log.Warn("sandbox: tools.exec.user is root: commands can read every root-only file Landlock allows (under /etc, most of all); set it to an unprivileged user such as nobody")
	}
	f.log.Info("sandbox ready", "landlock", f.status, "workspace", f.ws,
		"timeout", f.timeout, "process_limit", procLimit, "tree_ends_by", tree, "commands_run_as", runAs)
}

// Status reports the sandbox for the /ready "sandbox" check: "landlock ABI
// vN", or "unavailable: <why>". ok is false only when Landlock is
// unavailable and RequireSandbox is set.
func (r *Runner) Status() (ok bool, msg string) {
	return r.abi > 0 || !r.require, r.statusText()
}

func (r *Runner) statusText() string {
	if r.abi > 0 {
		return fmt.Sprintf("landlock ABI v%d", r.abi)
	}
	return "unavailable: " + r.why
}

// commandUID is the user commands run as.
func (r *Runner) commandUID() int {
	if r.user != nil {
		return r.user.uid
	}
	return os.Geteuid()
}

// denyUnix: commands run as root get no UNIX sockets where Landlock cannot
// restrict connecting to them (see seccomp.go).
func (r *Runner) denyUnix() bool { return r.commandUID() == 0 && r.abi < 9 }

// Workspace returns the workspace's resolved path.
func (r *Runner) Workspace() string { return r.ws }

// Run runs c.Line with /bin/sh -c in c.Dir, confined, and waits for it.
//
// The command gets the workspace read-write, the system directories
// read-only, a private TMPDIR inside the workspace, an environment of PATH,
// HOME (the workspace), LANG, TZ and TMPDIR only, and the resource limits.
// Before anything runs, the line is checked against the deny list
// (CheckCommand). When the deadline passes or ctx is cancelled, the command
// and everything it started are killed. A non-zero exit is not an error;
// err is set only when the command could not run (refused, bad directory,
// setup failure) or ctx was cancelled, in which case the partial Result is
// still returned.
func (r *Runner) Run(ctx context.Context, c Command) (Result, error) {
	if r.abi == 0 && r.require {
		return Result{}, fmt.Errorf("%w (%s)", ErrUnavailable, r.why)
	}
	if strings.TrimSpace(c.Line) == "" {
		return Result{}, errors.New("sandbox: empty command line")
	}
	if len(c.Line) > MaxLineBytes {
		return Result{}, fmt.Errorf("sandbox: the command line is %d bytes, over the %d-byte limit; write a script into the workspace and run that", len(c.Line), MaxLineBytes)
	}
	if strings.IndexByte(c.Line, 0) >= 0 {
		return Result{}, errors.New("sandbox: the command line contains a NUL byte")
	}
	if err := CheckCommand(c.Line); err != nil {
		return Result{}, err
	}
	dir, err := r.resolveDir(c.Dir)
	if err != nil {
		return Result{}, err
	}
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = r.timeout
	}

	n := r.seq.Add(1)
	tmpRel, err := r.makeTemp(n)
	if err != nil {
		return Result{}, err
	}
	defer r.removeTemp(tmpRel)

	spec := launchSpec{
		Line:     c.Line,
		Env:      buildEnv(r.ws, filepath.Join(r.ws, tmpRel), os.LookupEnv),
		ABI:      r.abi,
		Limits:   r.limits,
		DenyUnix: r.denyUnix(),
	}
	if r.user != nil {
		spec.SetUser, spec.UID, spec.GID, spec.Groups = true, r.user.uid, r.user.gid, r.user.groups
		spec.Hide, spec.Workspace, spec.Dir = r.hide, r.ws, dir
	}
	if r.abi > 0 {
		spec.Rules = buildRules(r.ws, readOnlyRoots, devices, r.secrets)
	}
	var cg *commandCgroup
	if tree := r.tree(); tree != nil {
		if cg, err = tree.create(fmt.Sprintf("%s%d-%d", cgroupPrefix, os.Getpid(), n), r.limits.Processes); err != nil {
			return Result{}, fmt.Errorf("%w: %v", ErrSetup, err)
		}
		defer func() {
			if err := tree.remove(cg); err != nil {
				r.log.Warn("sandbox: cgroup left behind", "err", err)
			}
		}()
		spec.Cgroups = cg.dirs()
		spec.TasksLimited = tree.limitsTasks()
	}
	if r.protectSupervisor() {
		spec.Protect, spec.GatewayPID, spec.GatewayPGID = true, os.Getpid(), r.pgid
		// Without a cgroup, the process group is what the gateway kills
		// the tree by if the supervisor dies: the command may not leave it.
		spec.KeepGroup = cg == nil || cg.v2 == ""
	}
	raw, err := json.Marshal(spec)
	if err != nil {
		return Result{}, fmt.Errorf("sandbox: encoding the launch spec: %w", err)
	}
	return r.launch(ctx, string(raw), launcherEnv(os.LookupEnv), dir, timeout, cg)
}

// launch starts the supervisor and collects output, status and exit code.
func (r *Runner) launch(ctx context.Context, rawSpec string, env []string, dir string, timeout time.Duration, cg *commandCgroup) (Result, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return Result{}, fmt.Errorf("sandbox: output pipe: %w", err)
	}
	defer outR.Close()
	statR, statW, err := os.Pipe()
	if err != nil {
		outW.Close()
		return Result{}, fmt.Errorf("sandbox: status pipe: %w", err)
	}
	defer statR.Close()

	cmd := &exec.Cmd{
		Path:       r.exe,
		Args:       []string{"perch", LauncherArg, stageSupervise, rawSpec},
		Env:        env,
		Dir:        dir,
		Stdout:     outW,
		Stderr:     outW,
		ExtraFiles: []*os.File{statW}, // fd 3 = statusFD
		SysProcAttr: &syscall.SysProcAttr{
			Setpgid: true,
			// If the gateway dies, the supervisor kills the command. (The
			// signal follows the starting thread, and Go ends a thread
			// only when a goroutine exits locked to it, which the gateway
			// never does.)
			Pdeathsig: syscall.SIGTERM,
		},
	}
	start := time.Now()
	err = cmd.Start()
	outW.Close()
	statW.Close()
	if err != nil {
		return Result{}, fmt.Errorf("%w: starting the launcher %s: %v", ErrSetup, r.exe, err)
	}

	buf := newCapBuffer(r.maxOutput)
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		_, _ = buf.ReadFrom(outR)
	}()
	waited := make(chan error, 1)
	go func() { waited <- cmd.Wait() }()

	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var timedOut, exited bool
	var ctxErr error
	select {
	case <-waited:
		exited = true
	case <-timer.C:
		timedOut = true
	case <-ctx.Done():
		ctxErr = ctx.Err()
	}
	if !exited {
		// The supervisor kills the command's whole tree and exits; the
		// cgroup, where there is one, ends it at once.
		if cg != nil {
			cg.kill()
		}
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-waited:
		case <-time.After(killGrace):
			// The supervisor is stuck (a task in uninterruptible
			// sleep): kill it and stop waiting for the tree.
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
			<-waited
		}
	}
	// The supervisor is gone. It normally took the tree with it; if it was
	// killed instead, end the tree here: by its cgroup, else by its
	// process group, which the command could not leave where it could
	// kill the supervisor (KeepGroup).
	msg, pgid := readStatus(statR)
	if cg != nil {
		cg.kill()
	} else if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); ok && ws.Signaled() && pgid > 1 {
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
	}
	select {
	case <-drained:
	case <-time.After(drainGrace):
		// Something escaped the supervisor and holds the pipe; stop
		// reading rather than wait for it.
		outR.Close()
		<-drained
	}

	res := Result{
		Output:    buf.String(),
		Truncated: buf.Truncated(),
		TimedOut:  timedOut,
		Duration:  time.Since(start),
		ExitCode:  exitStatus(cmd.ProcessState),
	}
	if timedOut {
		// Killed, as documented, even when the supervisor was stopped
		// by the SIGTERM itself (before its handler was in place).
		res.ExitCode = 128 + int(syscall.SIGKILL)
	}
	if msg != "" {
		return res, fmt.Errorf("%w: %s", ErrSetup, msg)
	}
	if ctxErr != nil {
		return res, fmt.Errorf("sandbox: command cancelled: %w", ctxErr)
	}
	return res, nil
}

func exitStatus(ps *os.ProcessState) int {
	if ps == nil {
		return -1
	}
	if ws, ok := ps.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return 128 + int(ws.Signal())
	}
	return ps.ExitCode()
}

// readStatus returns the launcher's "error: …" report, if any, and the
// command's process group, which the supervisor reports as "pgid N".
func readStatus(f *os.File) (msg string, pgid int) {
	b, _ := io.ReadAll(io.LimitReader(f, 4096))
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "pgid "); ok && msg == "" {
			pgid, _ = strconv.Atoi(v)
			continue
		}
		if line != "" || msg != "" {
			msg += line + "\n"
		}
	}
	msg = strings.TrimSpace(msg)
	return strings.TrimPrefix(msg, "error: "), pgid
}

// resolveDir turns c.Dir into an absolute directory inside the workspace,
// following symlinks, so a link cannot take the command elsewhere.
func (r *Runner) resolveDir(d string) (string, error) {
	if d == "" || d == "." {
		return r.ws, nil
	}
	p := d
	if !filepath.IsAbs(p) {
		p = filepath.Join(r.ws, p)
	}
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		if os.IsNotExist(err) {
			return "", fmt.Errorf("%w: %s does not exist; create it first or leave working_dir empty for the workspace", ErrBadDir, d)
		}
		return "", fmt.Errorf("%w: %s: %v", ErrBadDir, d, err)
	}
	if real != r.ws && !strings.HasPrefix(real, r.ws+string(filepath.Separator)) {
		return "", fmt.Errorf("%w: %s is outside the workspace %s; commands run inside the workspace only", ErrBadDir, d, r.ws)
	}
	fi, err := os.Stat(real)
	if err != nil {
		return "", fmt.Errorf("%w: %s: %v", ErrBadDir, d, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("%w: %s is a file, not a directory", ErrBadDir, d)
	}
	return real, nil
}
