package deb

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// need returns the path of program, failing under CI (where .ci/deps
// installs it) and skipping elsewhere.
func need(t *testing.T, program string) string {
	t.Helper()
	p, err := exec.LookPath(program)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("CI=true: %s is missing; .ci/deps installs it", program)
		}
		t.Skipf("%s not installed", program)
	}
	return p
}

// repo is a scratch git repository with a VERSION file.
type repo struct {
	t   *testing.T
	dir string
}

func newRepo(t *testing.T, version string) *repo {
	need(t, "git")
	r := &repo{t: t, dir: t.TempDir()}
	r.git("init", "-q", "-b", "main")
	r.write("VERSION", version+"\n")
	r.commit("2026-11-20T10:00:00Z", "first")
	return r
}

func (r *repo) git(args ...string) string {
	r.t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = r.dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_SYSTEM=/dev/null",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.org", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.org")
	out, err := cmd.CombinedOutput()
	if err != nil {
		r.t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func (r *repo) write(name, text string) {
	r.t.Helper()
	if err := os.WriteFile(filepath.Join(r.dir, name), []byte(text), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// commit commits everything with the given committer date (RFC 3339, UTC).
func (r *repo) commit(date, msg string) {
	r.t.Helper()
	r.git("add", "-A")
	cmd := exec.Command("git", "commit", "-q", "--allow-empty", "-m", msg)
	cmd.Dir = r.dir
	cmd.Env = append(os.Environ(), "GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_SYSTEM=/dev/null",
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.org", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.org",
		"GIT_AUTHOR_DATE="+date, "GIT_COMMITTER_DATE="+date)
	if out, err := cmd.CombinedOutput(); err != nil {
		r.t.Fatalf("git commit: %v\n%s", err, out)
	}
}

func (r *repo) head() string { return r.git("rev-parse", "--short=7", "HEAD") }

// version runs version.sh on dir.
func version(t *testing.T, dir string) string {
	t.Helper()
	out, err := exec.Command("./version.sh", dir).CombinedOutput()
	if err != nil {
		t.Fatalf("version.sh %s: %v\n%s", dir, err, out)
	}
	return strings.TrimSpace(string(out))
}

// TestVersionRule walks one repository through a release cycle and checks
// each build's number, then that dpkg orders the numbers as they were made.
func TestVersionRule(t *testing.T) {
	r := newRepo(t, "0.2.0")
	var seq []string
	step := func(want string) {
		t.Helper()
		got := version(t, r.dir)
		if got != want {
			t.Fatalf("version = %q, want %q", got, want)
		}
		seq = append(seq, got)
	}

	// Before the release: the number being worked towards, below it.
	step("0.2.0~git20261120." + r.head())
	r.commit("2026-11-21T23:59:59Z", "work")
	step("0.2.0~git20261121." + r.head())

	// The release commit, tagged: exactly VERSION.
	r.git("tag", "v0.2.0")
	step("0.2.0")

	// Local edits on the tag are not the release.
	r.write("main.go", "package main\n")
	r.git("add", "main.go")
	if got, want := version(t, r.dir), "0.2.1~git20261121."+r.head(); got != want {
		t.Fatalf("dirty tree on the tag: version = %q, want %q", got, want)
	}
	// Untracked files (build outputs) do not count.
	r.git("reset", "-q")
	if got := version(t, r.dir); got != "0.2.0" {
		t.Fatalf("untracked file on the tag: version = %q, want 0.2.0", got)
	}

	// Commits after the release, VERSION not bumped yet: the next number.
	r.commit("2026-11-22T08:00:00+09:00", "fix") // 2026-11-21 in UTC
	step("0.2.1~git20261121." + r.head())
	r.commit("2026-11-23T12:00:00Z", "fix 2")
	step("0.2.1~git20261123." + r.head())

	// VERSION bumped after the release: a pre-release of the new number.
	r.write("VERSION", "0.3.0\n")
	r.commit("2026-11-24T12:00:00Z", "bump")
	step("0.3.0~git20261124." + r.head())
	r.git("tag", "v0.3.0")
	step("0.3.0")

	dpkg := need(t, "dpkg")
	for i := 1; i < len(seq); i++ {
		if err := exec.Command(dpkg, "--compare-versions", seq[i-1], "lt", seq[i]).Run(); err != nil {
			t.Errorf("dpkg orders %s not below %s", seq[i-1], seq[i])
		}
	}
	// A development build sorts below the release it leads to.
	if err := exec.Command(dpkg, "--compare-versions", "0.2.1~git20261123.ffffff0", "lt", "0.2.1").Run(); err != nil {
		t.Error("0.2.1~git… does not sort below 0.2.1")
	}
}

// TestVersionBranchBeforeTag: a branch that forked before the release tag
// (the tag is not its ancestor) builds a number below the release.
func TestVersionBranchBeforeTag(t *testing.T) {
	r := newRepo(t, "0.2.0")
	base := r.head()
	r.commit("2026-11-21T10:00:00Z", "release")
	r.git("tag", "v0.2.0")
	r.git("checkout", "-q", "-b", "old", base)
	r.commit("2026-11-22T10:00:00Z", "side work")
	if got, want := version(t, r.dir), "0.2.0~git20261122."+r.head(); got != want {
		t.Fatalf("version = %q, want %q", got, want)
	}
}

// TestVersionWithoutGit: a tree without .git (a release tarball) is the
// release; a clone without tags is before it.
func TestVersionWithoutGit(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "VERSION"), []byte("1.4.9\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if got := version(t, dir); got != "1.4.9" {
		t.Fatalf("tarball: version = %q, want 1.4.9", got)
	}
	r := newRepo(t, "1.4.9")
	if got := version(t, r.dir); !regexp.MustCompile(`^1\.4\.9~git20261120\.[0-9a-f]{7,}$`).MatchString(got) {
		t.Fatalf("tagless clone: version = %q", got)
	}
}

// TestVersionFileErrors: a missing or malformed VERSION names the file and
// the expected form.
func TestVersionFileErrors(t *testing.T) {
	for _, bad := range []string{"", "0.2", "0.2.0.1", "v0.2.0", "0.2.x", "0..2", ".1.2"} {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "VERSION"), []byte(bad+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command("./version.sh", dir).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "X.Y.Z") {
			t.Errorf("VERSION %q: err=%v out=%q, want a failure naming X.Y.Z", bad, err, out)
		}
	}
	out, err := exec.Command("./version.sh", t.TempDir()).CombinedOutput()
	if err == nil || !strings.Contains(string(out), "VERSION is missing") {
		t.Errorf("no VERSION: err=%v out=%q", err, out)
	}
}

// TestRepositoryVersion: this repository's own VERSION is well-formed and
// the script accepts it.
func TestRepositoryVersion(t *testing.T) {
	got := version(t, "../..")
	if !regexp.MustCompile(`^\d+\.\d+\.\d+(~git\d{8}\.[0-9a-f]{7,})?$`).MatchString(got) {
		t.Fatalf("version of this tree = %q", got)
	}
}
