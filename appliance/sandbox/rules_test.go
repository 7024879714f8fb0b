package sandbox

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// fakeSystem builds a small /etc-like tree under a temp dir and returns its
// root and the builtin secret patterns rebased onto it.
func fakeSystem(t *testing.T) (root string, builtin []string) {
	t.Helper()
	root, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	files := map[string]string{
		"etc/hosts":                           "127.0.0.1 localhost",
		"etc/os-release":                      "ID=debian",
		"etc/shadow":                          "root:$y$hash",
		"etc/perch/config.json":               `{"api_key":"sk-x"}`,
		"etc/ssh/ssh_config":                  "Host *",
		"etc/ssh/ssh_host_ed25519_key":        "PRIVATE",
		"etc/ssh/ssh_host_ed25519_key.pub":    "PUBLIC",
		"etc/ssl/certs/ca.pem":                "CERT",
		"etc/ssl/private/server.key":          "PRIVATE",
		"etc/wpa_supplicant/wpa.conf":         "psk=secret",
		"etc/deep/a/b/app.conf":               "x",
		"usr/bin/tool":                        "#!/bin/sh",
		"var/lib/perch/perch.db":              "db",
		"var/lib/perch/workspace/notes.txt":   "n",
		"opt/app/secret-token":                "tok",
		"opt/app/readme":                      "r",
		"etc/alt/linked-config/settings.conf": "s",
		"etc/NetworkManager/system-connections/home.nmconnection": "psk=x",
		"etc/NetworkManager/NetworkManager.conf":                  "[main]",
	}
	for name, content := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// A symlink in etc to a directory holding the database.
	if err := os.Symlink(filepath.Join(root, "var/lib/perch"), filepath.Join(root, "etc/perch-data")); err != nil {
		t.Fatal(err)
	}
	for _, s := range builtinSecrets {
		builtin = append(builtin, filepath.Join(root, s))
	}
	return root, builtin
}

func accessOf(rules []pathRule, p string) (uint64, bool) {
	for _, r := range rules {
		if r.Path == p {
			return r.Access, true
		}
	}
	return 0, false
}

// reachable reports whether a rule covers p (Landlock rules apply to the
// whole hierarchy beneath their path) with all of want.
func reachable(rules []pathRule, p string, want uint64) bool {
	var got uint64
	for _, r := range rules {
		if p == r.Path || strings.HasPrefix(p, r.Path+"/") {
			got |= r.Access
		}
	}
	return got&want == want
}

// TestRulesSplitAroundSecrets: Landlock cannot carve an exception out of an
// allowed directory, so the builder must allow the siblings of a secret one
// by one and never the secret or a directory holding it.
func TestRulesSplitAroundSecrets(t *testing.T) {
	root, builtin := fakeSystem(t)
	ws := filepath.Join(root, "var/lib/perch/workspace")
	db := filepath.Join(root, "var/lib/perch/perch.db")
	token := filepath.Join(root, "opt/app/secret-token")
	sec, err := newSecrets(builtin, []string{db, token})
	if err != nil {
		t.Fatal(err)
	}
	rules := buildRules(ws, []string{filepath.Join(root, "etc"), filepath.Join(root, "usr"), filepath.Join(root, "opt")}, nil, sec)
	j := func(p string) string { return filepath.Join(root, p) }

	for _, tc := range []struct {
		path string
		want uint64
	}{
		{"etc/hosts", accReadFile},
		{"etc/os-release", accReadFile},
		{"etc/ssh/ssh_config", accReadFile},
		{"etc/ssh/ssh_host_ed25519_key.pub", accReadFile},
		{"etc/ssl/certs/ca.pem", accReadFile},
		{"etc/deep/a/b/app.conf", accReadFile},
		{"etc/NetworkManager/NetworkManager.conf", accReadFile},
		{"usr/bin/tool", accReadFile | accExecute},
		{"opt/app/readme", accReadFile},
		{"var/lib/perch/workspace/notes.txt", accReadFile | accWriteFile | accRemoveFile},
	} {
		if !reachable(rules, j(tc.path), tc.want) {
			t.Errorf("%s: not granted %#x; rules: %v", tc.path, tc.want, rulePaths(rules))
		}
	}
	for _, p := range []string{
		"etc/shadow",
		"etc/perch/config.json",
		"etc/ssh/ssh_host_ed25519_key",
		"etc/ssl/private/server.key",
		"etc/wpa_supplicant/wpa.conf",
		"etc/NetworkManager/system-connections/home.nmconnection",
		"opt/app/secret-token",
		"var/lib/perch/perch.db", // also reachable through the etc/perch-data link
	} {
		if reachable(rules, j(p), accReadFile) {
			t.Errorf("%s is readable; rules: %v", p, rulePaths(rules))
		}
	}
	// Directories split around a secret stay listable, and only that.
	for _, d := range []string{"etc", "etc/ssh", "opt/app"} {
		if a, ok := accessOf(rules, j(d)); !ok || a != accReadDir {
			t.Errorf("%s: access %#x (present %v), want read-dir only", d, a, ok)
		}
	}
	// Files carry file rights only (the kernel rejects directory rights
	// on a file).
	for _, r := range rules {
		if fi, err := os.Stat(r.Path); err == nil && !fi.IsDir() && r.Access&^accFileOnly != 0 {
			t.Errorf("file %s has directory rights %#x", r.Path, r.Access)
		}
	}
}

func TestRulesWorkspaceReadWriteWithoutDeviceNodes(t *testing.T) {
	ws := t.TempDir()
	sec, err := newSecrets(builtinSecrets, nil)
	if err != nil {
		t.Fatal(err)
	}
	rules := buildRules(ws, nil, devices, sec)
	a, ok := accessOf(rules, ws)
	if !ok {
		t.Fatalf("workspace %s has no rule", ws)
	}
	for name, bit := range map[string]uint64{
		"read": accReadFile, "write": accWriteFile, "make files": accMakeReg, "make dirs": accMakeDir,
		"remove": accRemoveFile, "symlinks": accMakeSym, "truncate": accTruncate, "rename between dirs": accRefer,
	} {
		if a&bit == 0 {
			t.Errorf("workspace lacks %s", name)
		}
	}
	for name, bit := range map[string]uint64{
		"block devices": accMakeBlock, "char devices": accMakeChar, "device ioctl": accIoctlDev,
		"connecting to outside sockets": accResolveUnix,
	} {
		if a&bit != 0 {
			t.Errorf("workspace grants %s", name)
		}
	}
	if a, ok := accessOf(rules, "/dev/null"); !ok || a != accDevRW {
		t.Errorf("/dev/null access %#x (present %v), want read/write/truncate", a, ok)
	}
	if a, ok := accessOf(rules, "/dev/urandom"); !ok || a != accDevRO {
		t.Errorf("/dev/urandom access %#x (present %v), want read only", a, ok)
	}
}

// TestRulesRealEtc runs the builder on this machine's /etc: Perch's config
// dir and the password hashes are out, the rest of /etc is in.
func TestRulesRealEtc(t *testing.T) {
	sec, err := newSecrets(builtinSecrets, []string{"/etc/hostname"})
	if err != nil {
		t.Fatal(err)
	}
	rules := buildRules("/nonexistent-ws", readOnlyRoots, devices, sec)
	for _, p := range []string{"/etc/shadow", "/etc/gshadow", "/etc/perch/config.json", "/etc/hostname"} {
		if reachable(rules, p, accReadFile) {
			t.Errorf("%s is readable", p)
		}
	}
	for _, p := range []string{"/etc/hosts", "/etc/passwd", "/usr/bin/env", "/proc/self/status"} {
		real, err := filepath.EvalSymlinks(p)
		if err != nil {
			t.Fatal(err)
		}
		if !reachable(rules, real, accReadFile) {
			t.Errorf("%s (%s) is not readable", p, real)
		}
	}
	if reachable(rules, "/tmp/x", accReadFile) || reachable(rules, "/root/x", accReadFile) ||
		reachable(rules, "/var/lib/x", accReadFile) || reachable(rules, "/home/x", accReadFile) {
		t.Errorf("a directory outside the allow list is reachable: %v", rulePaths(rules))
	}
	if i := slices.IndexFunc(rules, func(r pathRule) bool { return r.Path == "/etc" && r.Access != accReadDir }); i >= 0 {
		t.Errorf("/etc is granted whole: %#x", rules[i].Access)
	}
}

func TestSecretsMatching(t *testing.T) {
	sec, err := newSecrets([]string{"/etc/perch", "/etc/ssh/ssh_host_*_key"}, []string{"/srv/data[1]/db"})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path      string
		is, holds bool
	}{
		{"/etc", false, true},
		{"/etc/perch", true, false},
		{"/etc/perch/config.json", true, false},
		{"/etc/perchance", false, false},
		{"/etc/ssh", false, true},
		{"/etc/ssh/ssh_host_rsa_key", true, false},
		{"/etc/ssh/ssh_config", false, false},
		{"/srv", false, true},
		{"/srv/data[1]/db", true, false},
		{"/srv/data1/db", false, false}, // extra paths are literal, not patterns
		{"/usr", false, false},
		{"/", false, true},
	} {
		if got := sec.is(tc.path); got != tc.is {
			t.Errorf("is(%s) = %v, want %v", tc.path, got, tc.is)
		}
		if got := sec.holds(tc.path); got != tc.holds {
			t.Errorf("holds(%s) = %v, want %v", tc.path, got, tc.holds)
		}
	}
}

func TestCheckWorkspace(t *testing.T) {
	base := t.TempDir()
	sec, err := newSecrets(builtinSecrets, []string{filepath.Join(base, "ws/perch.db"), filepath.Join(base, "cfg")})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		ws      string
		wantErr string
	}{
		{filepath.Join(base, "workspace"), ""},
		{filepath.Join(base, "cfg/workspace"), "protected path"},
		{filepath.Join(base, "ws"), "inside the workspace"},
		{"/", "whole filesystem"},
		{"/etc", "system directory /etc"},
		{"/usr", "system directory /usr"},
		{"/var", "system directory /var"},
		{"/home", "system directory /home"},
		{"/tmp", "system directory /tmp"},
		{"/etc/perch/workspace", "protected path"},
	} {
		err := checkWorkspace(tc.ws, sec)
		switch {
		case tc.wantErr == "" && err != nil:
			t.Errorf("%s: unexpected error %v", tc.ws, err)
		case tc.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tc.wantErr)):
			t.Errorf("%s: error %v, want one containing %q", tc.ws, err, tc.wantErr)
		}
	}
	if err := checkWorkspace(filepath.Join(base, "ws"), sec); !errors.Is(err, errWorkspaceHoldsSecret) {
		t.Errorf("a secret inside the workspace: %v, want errWorkspaceHoldsSecret", err)
	}
}

func TestNewRefusesWorkspaceHoldingTheDatabase(t *testing.T) {
	ws := t.TempDir()
	_, err := New(Options{Workspace: ws, Secrets: []string{filepath.Join(ws, "perch.db")}, Log: quietLog()})
	if !errors.Is(err, errWorkspaceHoldsSecret) {
		t.Fatalf("New: %v, want errWorkspaceHoldsSecret", err)
	}
}

func TestHandledAccessPerABI(t *testing.T) {
	for _, tc := range []struct {
		abi    int
		has    uint64
		hasNot uint64
		scoped bool
	}{
		{0, 0, accExecute, false},
		{1, accMakeSym | accExecute, accRefer, false},
		{2, accRefer, accTruncate, false},
		{3, accTruncate, accIoctlDev, false},
		{5, accIoctlDev, accResolveUnix, false},
		{6, accIoctlDev, accResolveUnix, true},
		{9, accResolveUnix, 0, true},
		{11, accResolveUnix, 0, true},
	} {
		h := handledAccess(tc.abi)
		if h&tc.has != tc.has || (tc.hasNot != 0 && h&tc.hasNot != 0) {
			t.Errorf("ABI %d: handled %#x, want %#x and not %#x", tc.abi, h, tc.has, tc.hasNot)
		}
		if got := handledScopes(tc.abi) != 0; got != tc.scoped {
			t.Errorf("ABI %d: scoped %v, want %v", tc.abi, got, tc.scoped)
		}
	}
}
