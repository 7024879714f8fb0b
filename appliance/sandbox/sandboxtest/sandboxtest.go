// Package sandboxtest lets a test binary stand in for the perch binary
// wherever the exec sandbox re-executes it: a Runner starts /proc/self/exe
// with sandbox.LauncherArg for every command, and in a test that is the test
// binary, so its TestMain must hand over to the launcher as cmd/perch's main
// does.
//
//	func TestMain(m *testing.M) { sandboxtest.Main(m) }
package sandboxtest

import (
	"os"
	"testing"

	"github.com/perchhq/perch/appliance/sandbox"
)

// Helper is another role the test binary can be re-executed in: when the
// binary's first argument is Arg, Run gets the arguments after it and its
// result is the exit code. Tests use helpers to run their own code as
// another user or inside a sandboxed command.
type Helper struct {
	Arg string
	Run func(args []string) int
}

// Main runs the launcher stage when the test binary was started as the
// sandbox launcher, a helper when it was started as one, and the tests
// otherwise. It never returns.
func Main(m *testing.M, helpers ...Helper) {
	if len(os.Args) > 1 {
		if os.Args[1] == sandbox.LauncherArg {
			os.Exit(sandbox.RunLauncher(os.Args[2:]))
		}
		for _, h := range helpers {
			if os.Args[1] == h.Arg {
				os.Exit(h.Run(os.Args[2:]))
			}
		}
	}
	// Under -race every Go process sleeps a second at exit by default,
	// and each command's launcher is one; the launcher inherits GORACE.
	if _, ok := os.LookupEnv("GORACE"); !ok {
		os.Setenv("GORACE", "atexit_sleep_ms=0")
	}
	os.Exit(m.Run())
}
