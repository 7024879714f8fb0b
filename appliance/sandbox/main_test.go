package sandbox

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// quietLog discards the Runner's start-up report.
func quietLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// fixture is a workspace next to files a command must not reach.
type fixture struct {
	base    string // parent of the workspace: where the secrets are
	ws      string
	secret  string // a file beside the workspace
	victim  string // a file a command will try to delete or overwrite
	content string // what secret holds
}

func newFixture(t testing.TB) fixture {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	f := fixture{
		base:    base,
		ws:      filepath.Join(base, "workspace"),
		secret:  filepath.Join(base, "config.json"),
		victim:  filepath.Join(base, "victim.txt"),
		content: `{"providers":{"openai":{"api_key":"sk-CANARY-7f3a9"}}}`,
	}
	if err := os.MkdirAll(f.ws, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.secret, []byte(f.content), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(f.victim, []byte("still here"), 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// newRunner makes a Runner on f's workspace with o's other settings.
func (f fixture) newRunner(t *testing.T, o Options) *Runner {
	t.Helper()
	o.Workspace = f.ws
	if o.Log == nil {
		o.Log = quietLog()
	}
	r, err := New(o)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return r
}

// requireLandlock skips where the kernel has no Landlock: the only place
// confinement tests may skip.
func requireLandlock(t *testing.T, r *Runner) {
	t.Helper()
	if ok, msg := r.Status(); r.abi == 0 {
		t.Skipf("this kernel has no Landlock (%v, %s): confinement cannot be tested here", ok, msg)
	}
}

// run runs line and fails the test on a setup error.
func run(t *testing.T, r *Runner, line string) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := r.Run(ctx, Command{Line: line})
	if err != nil {
		t.Fatalf("Run(%q): %v", line, err)
	}
	return res
}

// control checks that an ordinary command inside the workspace works, so a
// refusal elsewhere is the sandbox's doing and not a broken runner.
func control(t *testing.T, r *Runner) {
	t.Helper()
	res := run(t, r, `echo ok > control.txt && cat control.txt && rm control.txt`)
	if res.ExitCode != 0 || strings.TrimSpace(res.Output) != "ok" {
		t.Fatalf("control command in the workspace failed: exit %d, output %q", res.ExitCode, res.Output)
	}
}
