package sandbox

import (
	"os"
	"os/exec"
	"slices"
	"testing"
)

// TestChildrenOf: both ways of listing a process's children (the kernel's
// children files, and the /proc/*/stat walk where those are missing) find
// the same children.
func TestChildrenOf(t *testing.T) {
	var cmds []*exec.Cmd
	for i := 0; i < 3; i++ {
		c := exec.Command("sleep", "30")
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		cmds = append(cmds, c)
	}
	defer func() {
		for _, c := range cmds {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
	}()
	var want []int
	for _, c := range cmds {
		want = append(want, c.Process.Pid)
	}
	slices.Sort(want)
	found := map[string][]int{"childrenOf": childrenOf(os.Getpid())}
	if lists, ok := childrenLists(os.Getpid()); ok {
		found["children files"] = lists
	} else {
		t.Log("this kernel has no /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN): childrenOf walks /proc")
	}
	var scanned []int
	buf := make([]byte, 512)
	for _, pid := range procEntries() {
		if pp, ok := parentOf(pid, buf); ok && pp == os.Getpid() {
			scanned = append(scanned, pid)
		}
	}
	found["/proc walk"] = scanned
	for name, got := range found {
		got = slices.Clone(got)
		slices.Sort(got)
		// Other tests' children may come and go: ours must all be there.
		for _, pid := range want {
			if !slices.Contains(got, pid) {
				t.Errorf("%s: %v lacks %d", name, got, pid)
			}
		}
	}
}
