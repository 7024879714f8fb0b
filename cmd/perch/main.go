// Command perch is the Perch appliance: a chat-driven AI agent gateway for
// small Linux boards. The command line lives in package cli; main only hands
// it the composition root and exits with its code.
package main

import (
	"os"

	"github.com/perchhq/perch/appliance"
	"github.com/perchhq/perch/appliance/cli"
	"github.com/perchhq/perch/appliance/sandbox"
	"github.com/perchhq/perch/image/firstboot"
)

func main() {
	// The exec sandbox re-runs this binary as its launcher: confine, then
	// exec the shell. Nothing else may run first in that process.
	if len(os.Args) > 1 && os.Args[1] == sandbox.LauncherArg {
		os.Exit(sandbox.RunLauncher(os.Args[2:]))
	}
	// The board image's first-boot unit; not a command an owner types, so
	// it stays out of the CLI's table (help, man page, completion).
	if len(os.Args) > 1 && os.Args[1] == "firstboot" {
		os.Exit(firstboot.Main(os.Args[2:]))
	}
	code := cli.Main(os.Args[1:], cli.Runtime{Gateway: appliance.RunGateway, Agent: appliance.LocalAgent})
	if atExit != nil {
		atExit()
	}
	os.Exit(code)
}

// atExit runs before the process exits with the CLI's code; only builds for
// profiling set it (cpuprofile.go).
var atExit func()
