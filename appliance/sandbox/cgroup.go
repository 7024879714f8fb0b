package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Each command gets a cgroup of its own where the gateway may make one:
//
//   - In the unified (v2) hierarchy, below the gateway's own cgroup, when
//     the gateway runs as root or that cgroup was delegated to its user
//     (systemd's Delegate= in perch.service chowns the unit's cgroup to
//     it). The cgroup is the handle on the command's whole tree, whatever
//     it forks, double-forks or setsids: after the supervisor exits, or
//     dies, the gateway writes cgroup.kill (Linux 5.14; before, it kills
//     what cgroup.procs lists until the cgroup is empty), so nothing
//     outlives the run even if the command killed its supervisor. A
//     pids.max holds the process budget where the pids controller is
//     enabled for the gateway's children (the hierarchy's root, or a
//     parent that has it already): the gateway never moves itself to make
//     room for it.
//   - In the v1 pids hierarchy, for a root gateway whose v2 cgroup has no
//     pids controller: the kernel does not apply RLIMIT_NPROC to root, so
//     commands run as root (tools.exec.user root) need it for their
//     budget.
//
// The command joins them in the confine stage, before it runs anything;
// the supervisor stays outside, so cgroup.kill never hits it.

// cgroupPrefix names Perch's per-command cgroups: perch-sbx-<gateway pid>-<n>.
const cgroupPrefix = "perch-sbx-"

// cgroups are the parents the gateway makes per-command cgroups in.
type cgroups struct {
	parent string // v2 parent; "" when none
	pids   bool   // children of parent get pids.max
	v1Pids string // v1 pids-hierarchy parent (root only); "" when none
}

// commandCgroup is one command's cgroups.
type commandCgroup struct {
	v2     string // in the unified hierarchy; "" when none
	v1Pids string
}

// dirs are the cgroups the command joins.
func (c *commandCgroup) dirs() []string {
	var out []string
	for _, d := range []string{c.v2, c.v1Pids} {
		if d != "" {
			out = append(out, d)
		}
	}
	return out
}

// findCgroups locates where this process may make cgroups. It returns nil
// and why when nowhere.
func findCgroups(root bool) (*cgroups, error) {
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("reading mountinfo: %w", err)
	}
	memberships, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("reading /proc/self/cgroup: %w", err)
	}
	v1Path, v2Path, haveV1, haveV2 := parseMemberships(string(memberships))
	var v1Dir, v2Dir string
	sc := bufio.NewScanner(strings.NewReader(string(mounts)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		sep := -1
		for i, x := range f {
			if x == "-" {
				sep = i
				break
			}
		}
		if sep < 5 || len(f) < sep+3 {
			continue
		}
		mroot, mnt, fstype, super := f[3], f[4], f[sep+1], f[sep+3]
		switch {
		case fstype == "cgroup" && haveV1 && hasOpt(super, "pids"):
			v1Dir = joinCgroup(mnt, mroot, v1Path)
		case fstype == "cgroup2" && haveV2:
			v2Dir = joinCgroup(mnt, mroot, v2Path)
		}
	}
	c := &cgroups{}
	var errs []error
	if v2Dir != "" {
		c.parent = v2Dir
		c.pids = enablePids(v2Dir)
		if err := c.probe(); err != nil {
			errs = append(errs, err)
			c.parent, c.pids = "", false
		}
	} else {
		errs = append(errs, errors.New("no cgroup v2 hierarchy is mounted"))
	}
	if root && !c.pids && v1Dir != "" {
		c.v1Pids = v1Dir
		if err := c.probe(); err != nil {
			errs = append(errs, err)
			c.v1Pids = ""
		}
	}
	if c.parent == "" && c.v1Pids == "" {
		return nil, errors.Join(errs...)
	}
	return c, nil
}

// parseMemberships reads /proc/self/cgroup: the v1 pids hierarchy's path
// and the unified hierarchy's ("0::/…").
func parseMemberships(s string) (v1Path, v2Path string, haveV1, haveV2 bool) {
	for _, line := range strings.Split(s, "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		if parts[0] == "0" && parts[1] == "" {
			v2Path, haveV2 = parts[2], true
		}
		for _, c := range strings.Split(parts[1], ",") {
			if c == "pids" {
				v1Path, haveV1 = parts[2], true
			}
		}
	}
	return v1Path, v2Path, haveV1, haveV2
}

// enablePids reports whether children of dir get a pids controller,
// enabling it when dir offers it. That fails (EBUSY) in a cgroup other than
// the root that holds processes, which is where a gateway usually sits.
func enablePids(dir string) bool {
	if ctl, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control")); err == nil && hasOpt(strings.ReplaceAll(strings.TrimSpace(string(ctl)), " ", ","), "pids") {
		return true
	}
	avail, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil || !hasOpt(strings.ReplaceAll(strings.TrimSpace(string(avail)), " ", ","), "pids") {
		return false
	}
	return os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+pids"), 0) == nil
}

func hasOpt(opts, want string) bool {
	for _, o := range strings.Split(opts, ",") {
		if o == want {
			return true
		}
	}
	return false
}

// joinCgroup maps a cgroup path to a directory under the mount that shows
// the hierarchy from root.
func joinCgroup(mnt, root, path string) string {
	if root != "/" {
		rel, ok := strings.CutPrefix(path, root)
		if !ok {
			return ""
		}
		path = rel
	}
	return filepath.Join(mnt, path)
}

// probe makes and removes a command cgroup, and clears what crashed
// gateways left behind.
func (c *cgroups) probe() error {
	c.removeStale()
	cg, err := c.create(fmt.Sprintf("%s%d-probe", cgroupPrefix, os.Getpid()), 1)
	if err != nil {
		return err
	}
	return c.remove(cg)
}

// create makes the cgroups of one command, with pids.max = max where a
// pids controller is there.
func (c *cgroups) create(name string, max uint64) (*commandCgroup, error) {
	cg := &commandCgroup{}
	mk := func(parent string, pids bool) (string, error) {
		dir := filepath.Join(parent, name)
		if err := os.Mkdir(dir, 0o755); err != nil {
			return "", fmt.Errorf("making cgroup %s: %w", dir, err)
		}
		if pids {
			if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.FormatUint(max, 10)), 0); err != nil {
				_ = os.Remove(dir)
				return "", fmt.Errorf("setting pids.max in %s: %w", dir, err)
			}
		}
		return dir, nil
	}
	var err error
	if c.parent != "" {
		if cg.v2, err = mk(c.parent, c.pids); err != nil {
			return nil, err
		}
	}
	if c.v1Pids != "" {
		if cg.v1Pids, err = mk(c.v1Pids, true); err != nil {
			_ = c.remove(cg)
			return nil, err
		}
	}
	return cg, nil
}

// limitsTasks reports whether a pids.max holds each command.
func (c *cgroups) limitsTasks() bool { return c.pids || c.v1Pids != "" }

// kill ends every process in the command's cgroups.
func (cg *commandCgroup) kill() {
	if cg.v2 != "" {
		if os.WriteFile(filepath.Join(cg.v2, "cgroup.kill"), []byte("1"), 0) == nil {
			return
		}
	}
	for _, d := range cg.dirs() {
		killListed(d)
	}
}

// killListed SIGKILLs the processes dir's cgroup.procs lists.
func killListed(dir string) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs"))
	if err != nil {
		return
	}
	for _, f := range strings.Fields(string(b)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

// remove kills whatever is left in the command's cgroups and removes them.
// The tree is normally gone already, so this seldom waits.
func (c *cgroups) remove(cg *commandCgroup) error {
	var errs []error
	for _, dir := range cg.dirs() {
		deadline := time.Now().Add(3 * time.Second)
		for {
			err := os.Remove(dir)
			if err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
				errs = append(errs, fmt.Errorf("removing cgroup %s: %w", dir, err))
				break
			}
			// Killed tasks are on their way out; a fork bomb's may still
			// be forking where cgroup.kill is missing.
			cg.kill()
			time.Sleep(2 * time.Millisecond)
		}
	}
	return errors.Join(errs...)
}

// removeStale removes cgroups of gateways that are no longer running.
func (c *cgroups) removeStale() {
	for _, parent := range []string{c.parent, c.v1Pids} {
		if parent == "" {
			continue
		}
		entries, err := os.ReadDir(parent)
		if err != nil {
			continue
		}
		for _, e := range entries {
			rest, ok := strings.CutPrefix(e.Name(), cgroupPrefix)
			if !ok || !e.IsDir() {
				continue
			}
			pidText, _, _ := strings.Cut(rest, "-")
			pid, err := strconv.Atoi(pidText)
			if err != nil || pid == os.Getpid() {
				continue
			}
			if _, err := os.Stat("/proc/" + pidText); err == nil {
				continue // that gateway still runs
			}
			dir := filepath.Join(parent, e.Name())
			stale := &commandCgroup{}
			if parent == c.parent {
				stale.v2 = dir
			} else {
				stale.v1Pids = dir
			}
			_ = c.remove(stale)
		}
	}
}

// joinCgroupDir moves the calling process into the cgroup dir.
func joinCgroupDir(dir string) error {
	return os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0)
}
