package appliance

import (
	"testing"

	"github.com/perchhq/perch/appliance/sandbox/sandboxtest"
)

// TestMain lets the test binary act as the sandbox launcher, as cmd/perch
// does, so command jobs in these tests run through the real sandbox.
func TestMain(m *testing.M) {
	sandboxtest.Main(m, sandboxtest.Helper{Arg: trimHelperArg, Run: runTrimHelper})
}
