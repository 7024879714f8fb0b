package tools

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/sandbox"
)

func newExecRegistry(t *testing.T, o sandbox.Options) (*Registry, string) {
	reg, ws, _ := newExecRegistryRunner(t, o)
	return reg, ws
}

func newExecRegistryRunner(t *testing.T, o sandbox.Options) (*Registry, string, *sandbox.Runner) {
	t.Helper()
	base, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	o.Workspace = filepath.Join(base, "workspace")
	o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	r, err := sandbox.New(o)
	if err != nil {
		t.Fatal(err)
	}
	reg := NewRegistry(o.Log)
	reg.Register(NewExec(r))
	return reg, o.Workspace, r
}

func execJSON(t *testing.T, command, dir string) string {
	t.Helper()
	args := map[string]string{"command": command}
	if dir != "" {
		args["working_dir"] = dir
	}
	b, err := json.Marshal(args)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestExecTool(t *testing.T) {
	reg, ws := newExecRegistry(t, sandbox.Options{MaxOutput: 2000})
	// Long enough for two launcher stages to start under -race on a
	// loaded machine, so that "before" is printed before the kill.
	short, _ := newExecRegistry(t, sandbox.Options{Timeout: 3 * time.Second})
	if err := os.MkdirAll(filepath.Join(ws, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, command, dir string
		reg                *Registry
		kind               Kind
		want               []string
		notWant            []string
	}{
		{name: "output and exit code", command: "echo hello; echo oops >&2",
			kind: KindBasic, want: []string{"exit code: 0\n", "hello\noops\n"}},
		{name: "non-zero exit is a result, not an error", command: "echo half; exit 4",
			kind: KindBasic, want: []string{"exit code: 4\n", "half"}},
		{name: "no output", command: "true", kind: KindBasic, want: []string{"exit code: 0\n(no output)"}},
		{name: "working_dir", command: "pwd", dir: "sub", kind: KindBasic, want: []string{ws + "/sub\n"}},
		{name: "working_dir outside", command: "pwd", dir: "..", kind: KindError,
			want: []string{"error: exec: bad working directory", "outside the workspace"}},
		{name: "deny list names the rule", command: "rm -rf /", kind: KindError,
			want: []string{"deny list, rule recursive-force-delete", "Nothing was run"}},
		{name: "sudo refused", command: "sudo cat /etc/shadow", kind: KindError,
			want: []string{"rule privilege-escalation"}},
		{name: "timeout noted", command: "echo before; sleep 30", reg: short, kind: KindError,
			want: []string{"exit code: 137", "[timed out after", "before"}},
		{name: "truncation noted", command: "seq 1 100000", kind: KindBasic,
			want: []string{"[output truncated", "\n1\n2\n", "100000\n"}},
		{name: "invalid UTF-8 is replaced", command: `printf 'a\377b'`, kind: KindBasic,
			want: []string{"a\uFFFDb"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			on := reg
			if tc.reg != nil {
				on = tc.reg
			}
			res := on.Execute(context.Background(), "exec", execJSON(t, tc.command, tc.dir))
			if res.Kind != tc.kind {
				t.Errorf("kind %v, want %v: %q", res.Kind, tc.kind, res.ForLLM)
			}
			for _, w := range tc.want {
				if !strings.Contains(res.ForLLM, w) {
					t.Errorf("result lacks %q:\n%s", w, res.ForLLM)
				}
			}
		})
	}
}

func TestExecToolSchema(t *testing.T) {
	reg, _ := newExecRegistry(t, sandbox.Options{})
	res := reg.Execute(context.Background(), "exec", `{"working_dir":"x"}`)
	if !res.IsError() || !strings.Contains(res.ForLLM, `missing required argument "command"`) {
		t.Errorf("missing command: %q", res.ForLLM)
	}
	res = reg.Execute(context.Background(), "exec", `{"command": 5}`)
	if !res.IsError() || !strings.Contains(res.ForLLM, `"command" must be a string`) {
		t.Errorf("mistyped command: %q", res.ForLLM)
	}
	defs := reg.Definitions()
	if len(defs) != 1 || defs[0].Name != "exec" || defs[0].Parameters.Required[0] != "command" ||
		defs[0].Parameters.Properties["working_dir"] == nil {
		t.Errorf("definition: %+v", defs)
	}
}

// TestExecToolConfined: through the tool, a command cannot read beside the
// workspace; the same command on a workspace file works.
func TestExecToolConfined(t *testing.T) {
	reg, ws, r := newExecRegistryRunner(t, sandbox.Options{})
	if _, msg := r.Status(); strings.HasPrefix(msg, "unavailable") {
		t.Skipf("this kernel has no Landlock (%s): confinement cannot be tested here", msg)
	}
	secret := filepath.Join(filepath.Dir(ws), "config.json")
	if err := os.WriteFile(secret, []byte("sk-TOOL-CANARY"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Owned like the workspace, as the file tools leave what they write
	// (under a root gateway commands run as the workspace's owner).
	mine := filepath.Join(ws, "mine.txt")
	if err := os.WriteFile(mine, []byte("mine"), 0o600); err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(ws, &st); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(mine, int(st.Uid), int(st.Gid)); err != nil {
		t.Fatal(err)
	}
	res := reg.Execute(context.Background(), "exec", execJSON(t, "cat ../config.json "+secret, ""))
	if strings.Contains(res.ForLLM, "CANARY") || strings.Contains(res.ForLLM, "exit code: 0") {
		t.Errorf("read beside the workspace: %q", res.ForLLM)
	}
	res = reg.Execute(context.Background(), "exec", execJSON(t, "cat mine.txt", ""))
	if !strings.Contains(res.ForLLM, "exit code: 0\nmine") {
		t.Errorf("control: %q", res.ForLLM)
	}
}
