package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/perchhq/perch/appliance/provider/providertest"
)

// The exec sandbox end to end: the fake provider asks for exec calls, the
// real gateway runs them, and what each command printed is what the next
// provider request carries back. Secrets live where they do on a real
// install: the API key in config.json beside the workspace, a token in the
// gateway's environment.
//
// They need the wiring of the sandbox in the composition root: main hands
// sandbox.LauncherArg to sandbox.RunLauncher, the registry offers
// tools.NewExec, and /ready has a "sandbox" check (Runner.Status).

// envCanary is a secret in the gateway's environment (a variable the
// harness passes on: it drops only PERCH_* and *_API_KEY).
const envCanary = "xoxb-E2E-ENV-CANARY-5d21"

// configKey is the provider key in the harness's config.json.
const configKey = "sk-or-e2e-secret"

// sandboxHome is a PERCH_HOME with a secret file beside the workspace and
// the exec timeout set.
func sandboxHome(t *testing.T, timeoutSeconds int) (*Home, string) {
	t.Helper()
	t.Setenv("SLACK_BOT_TOKEN", envCanary)
	h := NewHome(t, func(cfg map[string]any) {
		cfg["tools"] = map[string]any{"exec": map[string]any{"timeout_seconds": timeoutSeconds}}
	})
	secret := filepath.Join(h.Dir, "secret.txt")
	if err := os.WriteFile(secret, []byte("TOP-SECRET-FILE-CANARY"), 0o600); err != nil {
		t.Fatal(err)
	}
	return h, secret
}

// execCalls scripts one exec call per provider turn, then a final reply.
func execCalls(h *Home, commands ...string) {
	var replies []providertest.Reply
	for i, c := range commands {
		args, _ := json.Marshal(map[string]string{"command": c})
		replies = append(replies, providertest.Reply{ToolCalls: []providertest.ToolCall{
			{ID: "x" + strconv.Itoa(i), Name: "exec", Args: string(args)},
		}})
	}
	h.Fake.Enqueue(append(replies, providertest.Reply{Content: "done"})...)
}

// execResults returns, in order, the exec results the model was sent.
func execResults(t *testing.T, h *Home, n int) []string {
	t.Helper()
	reqs := h.Fake.Requests()
	if len(reqs) != n+1 {
		t.Fatalf("%d provider calls, want %d", len(reqs), n+1)
	}
	out := make([]string, n)
	for i := range out {
		out[i] = providertest.LastTool(reqs[i+1].Body)
	}
	return out
}

// requireSandbox reads /ready's sandbox check and skips where the kernel
// has no Landlock, the one place these tests may skip.
func requireSandbox(t *testing.T, g *Gateway) {
	t.Helper()
	status, ready := g.Do("GET", "/ready", nil)
	checks, _ := ready["checks"].(map[string]any)
	check, _ := checks["sandbox"].(map[string]any)
	if check == nil {
		t.Fatalf("/ready (HTTP %d) has no sandbox check: %v", status, ready)
	}
	msg, _ := check["message"].(string)
	if strings.HasPrefix(msg, "unavailable") {
		t.Skipf("this kernel has no Landlock (%s): confinement cannot be tested here", msg)
	}
	if check["status"] != "ok" || !strings.HasPrefix(msg, "landlock ABI v") {
		t.Fatalf("sandbox check %v", check)
	}
}

// assertNoSecret fails when a result shows a secret.
func assertNoSecret(t *testing.T, what, result string) {
	t.Helper()
	for _, s := range []string{configKey, envCanary, "TOP-SECRET-FILE-CANARY", "test-token"} {
		if strings.Contains(result, s) {
			t.Errorf("%s: the model saw %q:\n%s", what, s, result)
		}
	}
}

const controlCmd = "echo ok > control.txt && cat control.txt"

func assertControl(t *testing.T, result string) {
	t.Helper()
	if result != "exit code: 0\nok\n" {
		t.Errorf("control command inside the workspace: %q", result)
	}
}

// TestExecCannotReadSecrets: the config's API key and a file beside the
// workspace stay unreadable by relative paths, cd chains, absolute paths,
// symlinks and hard links the command makes, and /proc.
func TestExecCannotReadSecrets(t *testing.T) {
	h, secret := sandboxHome(t, 60)
	config := filepath.Join(h.Dir, "config.json")
	attempts := []string{
		"cat ../config.json ../secret.txt",
		"cd .. && cat config.json secret.txt",
		"cd ..; cd ..; cd " + h.Dir + "; cat config.json; grep -r sk- .",
		"cat " + config + " " + secret,
		"ln -s " + config + " c.json && cat c.json",
		"ln -s .. up && cat up/config.json up/secret.txt",
		"ln " + config + " hard.json; cat hard.json",
		"cp ../config.json copy.json; cat copy.json",
		"cat /proc/self/root" + config,
		"ls -la .. ~ /root; find / -name config.json -path '*perch*' 2>/dev/null | xargs cat",
	}
	g := h.Start()
	requireSandbox(t, g)
	gw := strconv.Itoa(g.Cmd.Process.Pid)
	attempts = append(attempts,
		"cat /proc/"+gw+"/root"+config,
		"cat /proc/"+gw+"/cwd/config.json",
		"ls /proc/"+gw+"/fd/ && cat /proc/"+gw+"/fd/*",
	)
	execCalls(h, append(attempts, controlCmd)...)
	if got := g.MustChat("e2e:sandbox", "read the secrets"); got != "done" {
		t.Fatalf("reply %q", got)
	}
	results := execResults(t, h, len(attempts)+1)
	for i, r := range results[:len(attempts)] {
		assertNoSecret(t, attempts[i], r)
		if strings.HasPrefix(r, "exit code: 0\n") && !strings.Contains(attempts[i], "find /") {
			t.Errorf("%q succeeded:\n%s", attempts[i], r)
		}
	}
	assertControl(t, results[len(attempts)])
}

// TestExecCannotWriteOutside: writes, deletes, renames and truncation
// outside the workspace (beside it, in /tmp, in the config dir) fail and
// leave the files as they were.
func TestExecCannotWriteOutside(t *testing.T) {
	h, secret := sandboxHome(t, 60)
	config := filepath.Join(h.Dir, "config.json")
	before, err := os.ReadFile(config)
	if err != nil {
		t.Fatal(err)
	}
	tmp := fmt.Sprintf("/tmp/perch-e2e-sandbox-%d", time.Now().UnixNano())
	t.Cleanup(func() { os.Remove(tmp) })
	attempts := []string{
		"echo x > ../new.txt",
		"echo x > " + tmp,
		// rm without -f: a file the sandbox hides is absent, and rm -f
		// would report success for it.
		"rm ../secret.txt",
		"rm " + config,
		"ln -s .. up && rm up/secret.txt",
		"mv ../secret.txt .",
		"truncate -s 0 ../config.json",
		"echo '{}' > ../config.json",
		"rm -r " + h.Dir + "/perch.db",
	}
	g := h.Start()
	requireSandbox(t, g)
	execCalls(h, append(attempts, controlCmd)...)
	g.MustChat("e2e:sandbox", "break things")
	results := execResults(t, h, len(attempts)+1)
	for i, r := range results[:len(attempts)] {
		if strings.HasPrefix(r, "exit code: 0\n") {
			t.Errorf("%q succeeded:\n%s", attempts[i], r)
		}
	}
	assertControl(t, results[len(attempts)])
	for _, p := range []string{filepath.Join(h.Dir, "new.txt"), tmp} {
		if _, err := os.Lstat(p); err == nil {
			t.Errorf("%s was created", p)
		}
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "TOP-SECRET-FILE-CANARY" {
		t.Errorf("secret.txt changed: %q %v", b, err)
	}
	if b, err := os.ReadFile(config); err != nil || string(b) != string(before) {
		t.Errorf("config.json changed: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(h.Dir, "perch.db")); err != nil {
		t.Errorf("the database: %v", err)
	}
	// The gateway still serves: its config and database are intact.
	if status, _ := g.Do("GET", "/ready", nil); status != 200 {
		t.Errorf("/ready after the attempts: HTTP %d", status)
	}
}

// TestExecEnvironmentHoldsNoSecret: env, the command's own environ and the
// environ of its parent and of the gateway show no key or token.
func TestExecEnvironmentHoldsNoSecret(t *testing.T) {
	h, _ := sandboxHome(t, 60)
	g := h.Start()
	requireSandbox(t, g)
	gw := strconv.Itoa(g.Cmd.Process.Pid)
	attempts := []string{
		"env",
		"cat /proc/self/environ | tr '\\0' '\\n'",
		"cat /proc/$PPID/environ | tr '\\0' '\\n'",
		"cat /proc/" + gw + "/environ | tr '\\0' '\\n'; cat /proc/" + gw + "/cmdline",
		"for p in /proc/[0-9]*; do cat $p/environ 2>/dev/null; done | tr '\\0' '\\n' | grep -i -e token -e key",
	}
	execCalls(h, append(attempts, controlCmd)...)
	g.MustChat("e2e:sandbox", "show me your environment")
	results := execResults(t, h, len(attempts)+1)
	for i, r := range results[:len(attempts)] {
		assertNoSecret(t, attempts[i], r)
		if strings.Contains(r, "PERCH_") {
			t.Errorf("%q shows a PERCH_ variable:\n%s", attempts[i], r)
		}
	}
	env := results[0]
	for _, want := range []string{"HOME=" + h.Workspace(), "TMPDIR=" + h.Workspace() + "/.tmp/", "PATH=/usr/local/sbin:"} {
		if !strings.Contains(env, want) {
			t.Errorf("env lacks %q:\n%s", want, env)
		}
	}
	if !strings.Contains(results[3], "Permission denied") {
		t.Errorf("the gateway's environ was not refused:\n%s", results[3])
	}
	assertControl(t, results[len(attempts)])
}

// TestExecForkBombIsContained: the deny list refuses the classic bomb; one
// hidden in a script is held by the process limit and killed at the
// timeout, and the gateway stays healthy and keeps running commands.
func TestExecForkBombIsContained(t *testing.T) {
	h, _ := sandboxHome(t, 3)
	// A unique script name tells this bomb's processes from any other.
	script := fmt.Sprintf("bomb-e2e-%d.sh", time.Now().UnixNano())
	attempts := []string{
		":(){ :|:& };:",
		// exec: once the bomb holds every process the limit allows, the
		// shell cannot fork a sleep, and would end early with "Cannot
		// fork" instead of being held until the timeout.
		"printf 'b(){ b|b& }; b\\n' > " + script + " && sh " + script + "; exec sleep 30",
	}
	g := h.Start()
	requireSandbox(t, g)
	execCalls(h, append(attempts, controlCmd)...)
	start := time.Now()
	g.MustChat("e2e:sandbox", "fork")
	if took := time.Since(start); took > 30*time.Second {
		t.Errorf("the turn took %v", took)
	}
	results := execResults(t, h, len(attempts)+1)
	if !strings.Contains(results[0], "rule fork-bomb") {
		t.Errorf("classic fork bomb: %q", results[0])
	}
	if !strings.Contains(results[1], "[timed out after") {
		t.Errorf("script fork bomb: %q", results[1])
	}
	assertControl(t, results[2])
	if status, body := g.Do("GET", "/health", nil); status != 200 || body["status"] != "ok" {
		t.Errorf("/health after the bomb: %d %v", status, body)
	}
	// Nothing of the bomb is left: the turn ended after the supervisor
	// had reaped it all.
	if n := processesRunning(script); n > 0 {
		t.Errorf("%d bomb processes left after the turn", n)
	}
	// And the gateway answers a new turn with a working command.
	execCalls(h, controlCmd)
	g.MustChat("e2e:sandbox-2", "still there?")
	reqs := h.Fake.Requests()
	assertControl(t, providertest.LastTool(reqs[len(reqs)-1].Body))
}

// processesRunning counts live processes whose command line contains s.
func processesRunning(s string) int {
	n := 0
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		cmdline, err := os.ReadFile("/proc/" + e.Name() + "/cmdline")
		if err == nil && strings.Contains(string(cmdline), s) {
			n++
		}
	}
	return n
}
