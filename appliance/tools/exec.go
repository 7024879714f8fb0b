package tools

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/perchhq/perch/appliance/sandbox"
)

// CommandRunner runs a shell command line confined. *sandbox.Runner is the
// implementation; the schedule service's command jobs use the same one.
type CommandRunner interface {
	Run(ctx context.Context, c sandbox.Command) (sandbox.Result, error)
}

// NewExec returns the exec tool: `sh -c command` in the
// workspace, or in working_dir inside it.
//
// Two layers stand between the model and the machine. The deny list
// (sandbox.CheckCommand: rm -rf, mkfs, dd if=, writes to disks, shutdown,
// reboot, fork bombs, sudo, …) is a guard rail: it refuses the obvious early
// and says which rule, but a determined command gets past any list. The
// security boundary is the sandbox the Runner puts every command in
// (Landlock, no privileges, a clean environment, resource limits, a
// timeout), which holds whatever the line says.
func NewExec(r CommandRunner) Tool { return &execTool{r: r} }

type execTool struct{ r CommandRunner }

func (*execTool) Name() string { return "exec" }

// MutatesAlways implements Mutator: a shell command can change anything.
func (*execTool) MutatesAlways() bool { return true }

// Mutates implements Mutator.
func (*execTool) Mutates(context.Context, Args) bool { return true }

func (*execTool) Description() string {
	return "Run a shell command line (sh -c) and get its exit code and output (stdout and stderr together). " +
		"It runs in the workspace, or in working_dir inside it, inside a kernel sandbox: it can read and write the " +
		"workspace, read the system directories (/usr, /etc, /proc, /sys) and use the network; it cannot reach other " +
		"files, the shared /tmp (use $TMPDIR) or root privileges (no sudo). Destructive commands (rm -rf, mkfs, dd if=, " +
		"writes to disks, shutdown, reboot, fork bombs) are refused. Output is capped, and a command still running at " +
		"the time limit is killed with everything it started; background jobs end with the command."
}

func (*execTool) Schema() Schema {
	return Object(map[string]*Property{
		"command":     String("The shell command line to run, e.g. \"ls -la\" or \"python3 script.py\"."),
		"working_dir": String("Directory to run in, relative to the workspace (default: the workspace itself)."),
	}, "command")
}

func (t *execTool) Execute(ctx context.Context, args Args) Result {
	line := args.String("command")
	res, err := t.r.Run(ctx, sandbox.Command{Line: line, Dir: args.String("working_dir")})
	if err != nil {
		var blocked *sandbox.BlockedError
		switch {
		case errors.As(err, &blocked):
			return Result{Kind: KindError, Err: err, ForLLM: fmt.Sprintf(
				"error: exec refused by the deny list, rule %s: %s. Nothing was run.", blocked.Rule, blocked.Reason)}
		case errors.Is(err, sandbox.ErrBadDir):
			return Errorf("exec: %v", strings.TrimPrefix(err.Error(), "sandbox: "))
		}
		return Error(err)
	}
	return formatRun(res)
}

// formatRun turns a finished command into what the model reads: the exit
// code first, notes on what was cut, then the output.
func formatRun(res sandbox.Result) Result {
	var b strings.Builder
	fmt.Fprintf(&b, "exit code: %d\n", res.ExitCode)
	if res.TimedOut {
		fmt.Fprintf(&b, "[timed out after %s: the command and everything it started were killed]\n",
			res.Duration.Round(100*time.Millisecond))
	}
	if res.Truncated {
		b.WriteString("[output truncated: the middle was dropped; redirect to a file and read parts of it for more]\n")
	}
	out := strings.ToValidUTF8(res.Output, "\uFFFD")
	if out == "" {
		b.WriteString("(no output)")
	} else {
		b.WriteString(out)
	}
	if res.TimedOut {
		return Result{Kind: KindError, ForLLM: b.String(), Err: errors.New("exec: timed out")}
	}
	return Text(b.String())
}
