// Package version reports what build of perch is running. The Makefile
// injects Version, Commit and BuildTime with -ldflags -X; a plain `go build`
// falls back to the VCS information Go embeds in the binary.
package version

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"time"
)

// Set at link time by the Makefile.
var (
	Version   = ""
	Commit    = ""
	BuildTime = ""
)

// Info is the resolved build description.
type Info struct {
	Version   string
	Commit    string
	BuildTime string // RFC 3339
	Go        string
}

// Get resolves the build description, filling gaps from the embedded build
// info.
func Get() Info {
	i := Info{Version: Version, Commit: Commit, BuildTime: BuildTime, Go: runtime.Version()}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if i.Version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			i.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				if i.Commit == "" {
					i.Commit = s.Value
					if len(i.Commit) > 12 {
						i.Commit = i.Commit[:12]
					}
				}
			case "vcs.time":
				if i.BuildTime == "" {
					i.BuildTime = s.Value
				}
			}
		}
	}
	if i.Version == "" {
		i.Version = "dev"
	}
	if i.Commit == "" {
		i.Commit = "unknown"
	}
	if i.BuildTime == "" {
		// No ldflags and no VCS stamp: the binary's own modification time is
		// the best statement of when it was built.
		i.BuildTime = exeTime().UTC().Format(time.RFC3339)
	}
	return i
}

// String is the one line `perch version` prints.
func (i Info) String() string {
	return fmt.Sprintf("perch %s (commit %s, built %s, %s)", i.Version, i.Commit, i.BuildTime, i.Go)
}
