package systemdtest

import (
	"os"
	"os/exec"
	"testing"
)

// Need returns the path of program (a name on PATH or an absolute path), or
// ends the test: skipped on a developer machine, failed under CI=true.
// install names the Debian package that provides it.
func Need(t testing.TB, program, install string) string {
	t.Helper()
	path, err := exec.LookPath(program)
	if err == nil {
		return path
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s is missing (%v): CI=true needs it; run .ci/deps or apt-get install %s", program, err, install)
	}
	t.Skipf("%s is missing (%v): apt-get install %s to run this test", program, err, install)
	return ""
}
