package sandbox

import (
	"os"
	"strings"
	"testing"
)

// TestFirstCommandWaitsForTheCgroupProbe: New returns before its cgroup
// probe ends, so the gateway need not wait for it; a command run at once
// must still get its own cgroup wherever one can be made.
func TestFirstCommandWaitsForTheCgroupProbe(t *testing.T) {
	f := newFixture(t)
	r := f.newRunner(t, Options{})
	res := run(t, r, "cat /proc/self/cgroup") // before anything waited for the probe
	tree := r.tree()
	if tree == nil {
		if os.Geteuid() == 0 {
			t.Log("no cgroup can be made here; checking only that the probe ended")
		}
		return
	}
	if !strings.Contains(res.Output, cgroupPrefix) {
		t.Errorf("the first command ran outside a %s cgroup (probe found %s):\n%s", cgroupPrefix, cgParent(tree), res.Output)
	}
}
