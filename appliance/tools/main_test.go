package tools

import (
	"testing"

	"github.com/perchhq/perch/appliance/sandbox/sandboxtest"
)

// TestMain lets the test binary act as the sandbox launcher, as cmd/perch
// does, so the exec tool's tests run commands through the real sandbox.
func TestMain(m *testing.M) { sandboxtest.Main(m) }
