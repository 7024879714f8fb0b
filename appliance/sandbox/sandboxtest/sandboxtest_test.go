package sandboxtest_test

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"github.com/perchhq/perch/appliance/sandbox"
	"github.com/perchhq/perch/appliance/sandbox/sandboxtest"
)

const echoArg = "__sandboxtest-echo"

func TestMain(m *testing.M) {
	sandboxtest.Main(m, sandboxtest.Helper{Arg: echoArg, Run: func(args []string) int {
		fmt.Print(strings.Join(args, " "))
		return 7
	}})
}

// TestMainDispatches: re-executed with a helper's argument the binary runs
// the helper and exits with its code; with the launcher's, it is the
// launcher (which refuses a call without a stage and spec).
func TestMainDispatches(t *testing.T) {
	out, err := exec.Command(os.Args[0], echoArg, "a", "b").Output()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 7 || string(out) != "a b" {
		t.Errorf("helper: %v, output %q; want exit 7 and %q", err, out, "a b")
	}
	out, err = exec.Command(os.Args[0], sandbox.LauncherArg).CombinedOutput()
	if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "internal to the exec sandbox") {
		t.Errorf("launcher: %v, output %q; want exit 2 and the launcher's refusal", err, out)
	}
	if os.Getenv("GORACE") == "" {
		t.Error("GORACE is not set for the launchers the tests start")
	}
}
