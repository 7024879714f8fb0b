package appliance

import (
	"os"
	"testing"

	"github.com/perchhq/perch/appliance/sandbox"
)

// TestMain lets the test binary act as the sandbox launcher, as cmd/perch
// does, so command jobs in these tests run through the real sandbox.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == sandbox.LauncherArg {
		os.Exit(sandbox.RunLauncher(os.Args[2:]))
	}
	if _, ok := os.LookupEnv("GORACE"); !ok {
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	os.Exit(m.Run())
}
