package sandbox_test

import (
	"testing"

	"github.com/perchhq/perch/appliance/sandbox"
	"github.com/perchhq/perch/appliance/sandbox/sandboxtest"
)

// TestMain lets the test binary act as the launcher, as cmd/perch does (the
// Runner re-executes /proc/self/exe with LauncherArg), and as the helpers
// the tests start: a client copied into a workspace, a gateway run as
// another user.
func TestMain(m *testing.M) {
	var helpers []sandboxtest.Helper
	for arg, run := range sandbox.TestHelpers {
		helpers = append(helpers, sandboxtest.Helper{Arg: arg, Run: run})
	}
	sandboxtest.Main(m, helpers...)
}
