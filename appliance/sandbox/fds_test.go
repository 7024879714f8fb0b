package sandbox

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestNoInheritedDescriptors: a descriptor the gateway inherited without
// close-on-exec (a shell's `exec 7<file` before `perch gateway`) does not
// reach commands, which could otherwise read through it what Landlock
// denies them.
func TestNoInheritedDescriptors(t *testing.T) {
	asRootAndNobody(t, func(t *testing.T, asNobody bool) {
		secret := filepath.Join(t.TempDir(), "secret")
		if err := os.WriteFile(secret, []byte("FD-CANARY-5d1e"), 0o600); err != nil {
			t.Fatal(err)
		}
		f, err := os.Open(secret)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		ws := newFixture(t).ws
		if asNobody {
			ws = nobodyWorkspace(t)
		}
		rep := startGateway(t, gatewayJob{
			Workspace: ws,
			Lines:     []string{"ls /proc/self/fd; cat <&7; cat /proc/self/fd/7"},
		}, gatewayRun{asNobody: asNobody, files: []*os.File{nil, nil, nil, nil, f}}) // f is descriptor 7
		res := rep.Results[0]
		if res.Err != "" {
			t.Fatalf("run: %s", res.Err)
		}
		if strings.Contains(res.Output, "CANARY") {
			t.Fatalf("the command read the gateway's descriptor 7: %q", res.Output)
		}
		var fds []string
		for _, line := range strings.Split(res.Output, "\n") {
			if _, err := strconv.Atoi(line); err == nil {
				fds = append(fds, line)
			}
		}
		// 0-2, and 3: ls's own handle on /proc/self/fd.
		if strings.Join(fds, " ") != "0 1 2 3" {
			t.Errorf("the command holds descriptors %v, want 0 1 2 (and ls's 3)\n%s", fds, res.Output)
		}
	})
}
