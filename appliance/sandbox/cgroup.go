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

// The kernel does not enforce RLIMIT_NPROC for root (real uid 0), so when the
// gateway runs as root the process budget comes from a pids cgroup made per
// command. Unprivileged gateways rely on RLIMIT_NPROC alone and never touch
// cgroups.

// pidsCgroups makes per-command pids cgroups below parent.
type pidsCgroups struct {
	parent string
}

// cgroupPrefix names Perch's per-command cgroups: perch-sbx-<gateway pid>-<n>.
const cgroupPrefix = "perch-sbx-"

// findPidsCgroups locates the pids controller for this process (cgroup v1's
// pids hierarchy, else cgroup v2 when pids can be enabled below our cgroup)
// and checks that a child cgroup with a pids.max can be made there.
func findPidsCgroups() (*pidsCgroups, error) {
	mounts, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil, fmt.Errorf("reading mountinfo: %w", err)
	}
	memberships, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("reading /proc/self/cgroup: %w", err)
	}
	var v1Path, v2Path string
	haveV1, haveV2 := false, false
	for _, line := range strings.Split(string(memberships), "\n") {
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
		root, mnt, fstype, super := f[3], f[4], f[sep+1], f[sep+3]
		switch {
		case fstype == "cgroup" && haveV1 && hasOpt(super, "pids"):
			v1Dir = joinCgroup(mnt, root, v1Path)
		case fstype == "cgroup2" && haveV2:
			v2Dir = joinCgroup(mnt, root, v2Path)
		}
	}
	var errs []error
	if v1Dir != "" {
		c := &pidsCgroups{parent: v1Dir}
		if err := c.probe(); err == nil {
			return c, nil
		} else {
			errs = append(errs, err)
		}
	}
	if v2Dir != "" {
		c := &pidsCgroups{parent: v2Dir}
		// Children get a pids.max only when the parent delegates pids; the
		// write fails (EBUSY) in a non-root cgroup that holds processes.
		ctl, _ := os.ReadFile(filepath.Join(v2Dir, "cgroup.subtree_control"))
		if !hasOpt(strings.ReplaceAll(strings.TrimSpace(string(ctl)), " ", ","), "pids") {
			if err := os.WriteFile(filepath.Join(v2Dir, "cgroup.subtree_control"), []byte("+pids"), 0); err != nil {
				errs = append(errs, fmt.Errorf("enabling pids in %s: %w", v2Dir, err))
			}
		}
		if err := c.probe(); err == nil {
			return c, nil
		} else {
			errs = append(errs, err)
		}
	}
	if len(errs) == 0 {
		return nil, errors.New("no pids cgroup controller is mounted")
	}
	return nil, errors.Join(errs...)
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

// probe makes and removes a child cgroup, and clears what crashed gateways
// left behind.
func (c *pidsCgroups) probe() error {
	c.removeStale()
	dir, err := c.create(fmt.Sprintf("%s%d-probe", cgroupPrefix, os.Getpid()), 1)
	if err != nil {
		return err
	}
	return c.remove(dir)
}

// create makes the cgroup name with pids.max = max.
func (c *pidsCgroups) create(name string, max uint64) (string, error) {
	dir := filepath.Join(c.parent, name)
	if err := os.Mkdir(dir, 0o755); err != nil {
		return "", fmt.Errorf("making cgroup %s: %w", dir, err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.FormatUint(max, 10)), 0); err != nil {
		_ = os.Remove(dir)
		return "", fmt.Errorf("setting pids.max in %s: %w", dir, err)
	}
	return dir, nil
}

// remove kills whatever is left in dir and removes it. The supervisor has
// normally reaped everything already, so this seldom waits.
func (c *pidsCgroups) remove(dir string) error {
	deadline := time.Now().Add(3 * time.Second)
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "cgroup.procs")); err == nil {
			for _, f := range strings.Fields(string(b)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 0 {
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		err := os.Remove(dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if !errors.Is(err, syscall.EBUSY) || time.Now().After(deadline) {
			return fmt.Errorf("removing cgroup %s: %w", dir, err)
		}
		time.Sleep(5 * time.Millisecond) // killed tasks are on their way out
	}
}

// removeStale removes cgroups of gateways that are no longer running.
func (c *pidsCgroups) removeStale() {
	entries, err := os.ReadDir(c.parent)
	if err != nil {
		return
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
		_ = c.remove(filepath.Join(c.parent, e.Name()))
	}
}

// joinCgroupDir moves the calling process into the cgroup dir.
func joinCgroupDir(dir string) error {
	return os.WriteFile(filepath.Join(dir, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0)
}
