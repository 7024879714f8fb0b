package cli

import (
	"context"
	"fmt"

	"github.com/perchhq/perch/appliance/version"
)

func versionCommand() *Command {
	return &Command{
		Name:    "version",
		Summary: "print the version, commit, build time and Go version",
		Run: func(_ context.Context, e *Env, args []string) error {
			if len(args) > 0 {
				return usageError("version", "unexpected argument %q", args[0])
			}
			fmt.Fprintln(e.Stdout, version.Get())
			return nil
		},
	}
}
