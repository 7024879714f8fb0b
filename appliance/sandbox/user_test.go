package sandbox

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func ownerOf(t *testing.T, p string) int {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	return int(st.Uid)
}

// TestRootGatewayRunsCommandsAsExecUser: when the gateway runs as root,
// commands run as tools.exec.user (nobody by default), so file permissions
// keep them out of root's files that the short deny list does not name,
// while the workspace stays theirs: files the gateway put there before are
// handed over, and what they create is theirs.
func TestRootGatewayRunsCommandsAsExecUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("commands change user only under a root gateway; TestUnprivilegedGatewayKeepsItsUser covers this user")
	}
	f := newFixture(t) // the workspace's parent is 0700 root: nobody cannot reach it by path
	stamp := strconv.FormatInt(time.Now().UnixNano(), 36)
	rootOnly := "/etc/perch-sandbox-test-" + stamp
	if err := os.WriteFile(rootOnly, []byte("ROOT-ONLY-CANARY"), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Remove(rootOnly) })
	// Left by the gateway (or by commands run as root before): handed over.
	old := filepath.Join(f.ws, "sub", "old.txt")
	if err := os.MkdirAll(filepath.Dir(old), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(old, []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A hard link to a file outside is never handed over: that would give
	// the outside file away.
	outside := filepath.Join(f.base, "outside.txt")
	if err := os.WriteFile(outside, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Link(outside, filepath.Join(f.ws, "hardlink")); err != nil {
		t.Fatal(err)
	}
	r := f.newRunner(t, Options{})
	requireLandlock(t, r)

	res := run(t, r, "id -u; id -g; id -G")
	if got := strings.Fields(res.Output); strings.Join(got, " ") != "65534 65534 65534" {
		t.Errorf("ids %q, want nobody's 65534 65534 65534 (no groups)", res.Output)
	}
	res = run(t, r, "cat "+rootOnly)
	if strings.Contains(res.Output, "CANARY") || res.ExitCode == 0 {
		t.Errorf("a root-only file under /etc was read: %q", res.Output)
	}
	res = run(t, r, "cat "+f.secret+" ../config.json")
	if strings.Contains(res.Output, "CANARY") || res.ExitCode == 0 {
		t.Errorf("the secret beside the workspace was read: %q", res.Output)
	}
	// The workspace is usable: by path and relatively, HOME and TMPDIR,
	// files left before, new files and directories.
	res = run(t, r, `set -e; cd "$HOME"; echo more >> sub/old.txt; cat sub/old.txt; mkdir -p new/dir; echo n > new/dir/f; t=$(mktemp); echo tmp > "$t"; cat "$t"; cd /; ls "$HOME/new/dir"; pwd`)
	if res.ExitCode != 0 || res.Output != "old\nmore\ntmp\nf\n/\n" {
		t.Errorf("working in the workspace: exit %d %q", res.ExitCode, res.Output)
	}
	for _, p := range []string{f.ws, filepath.Join(f.ws, "sub"), old, filepath.Join(f.ws, "new", "dir", "f")} {
		if uid := ownerOf(t, p); uid != nobodyID {
			t.Errorf("%s belongs to uid %d, want nobody", p, uid)
		}
	}
	if uid := ownerOf(t, outside); uid != 0 {
		t.Errorf("the outside file behind a hard link was handed to uid %d", uid)
	}
	sub, err := r.Run(context.Background(), Command{Line: "pwd; ls", Dir: "sub"})
	if err != nil || sub.Output != filepath.Join(f.ws, "sub")+"\nold.txt\n" {
		t.Errorf("working_dir sub: %v %q", err, sub.Output)
	}
	control(t, r)
}

// TestExecUserRoot: tools.exec.user root keeps commands uid 0, without a
// capability, and then without UNIX sockets below Landlock ABI 9.
func TestExecUserRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("commands change user only under a root gateway")
	}
	f := newFixture(t)
	r := f.newRunner(t, Options{User: "root"})
	res := run(t, r, "id -u; grep CapEff /proc/self/status")
	if got := strings.Fields(res.Output); len(got) != 3 || got[0] != "0" || got[2] != "0000000000000000" {
		t.Errorf("as root: %q", res.Output)
	}
	if got := r.denyUnix(); got != (r.abi < 9) {
		t.Errorf("denyUnix %v with ABI %d", got, r.abi)
	}
	control(t, r)
}

// TestExecUserUnknown: a user that does not exist is refused at start,
// naming the setting.
func TestExecUserUnknown(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("tools.exec.user is looked up only under a root gateway")
	}
	f := newFixture(t)
	_, err := New(Options{Workspace: f.ws, User: "no-such-user-perch", Log: quietLog()})
	if err == nil || !strings.Contains(err.Error(), "tools.exec.user") || !strings.Contains(err.Error(), "no-such-user-perch") {
		t.Errorf("err = %v, want one naming tools.exec.user and the user", err)
	}
}

// TestUnprivilegedGatewayKeepsItsUser: an ordinary gateway's commands run
// as its own user, tools.exec.user or not, and the workspace is untouched.
func TestUnprivilegedGatewayKeepsItsUser(t *testing.T) {
	line := "id -u; id -g"
	if os.Geteuid() != 0 {
		f := newFixture(t)
		r := f.newRunner(t, Options{User: "nobody"})
		res := run(t, r, line)
		if want := fmt.Sprintf("%d %d", os.Getuid(), os.Getgid()); strings.Join(strings.Fields(res.Output), " ") != want {
			t.Errorf("ids %q, want %s", res.Output, want)
		}
		return
	}
	ws := nobodyWorkspace(t)
	rep := startGateway(t, gatewayJob{Workspace: ws, User: "root", Lines: []string{line}}, gatewayRun{asNobody: true})
	if got := rep.Results[0]; got.Err != "" || strings.Join(strings.Fields(got.Output), " ") != "65534 65534" {
		t.Errorf("a nobody gateway's command: %+v", got)
	}
}
