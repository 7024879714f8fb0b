package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// need returns the path of program; under CI=true a missing one fails the
// test (the CI scripts install it) rather than skipping a check.
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

// TestManPageLints: the page renders without a warning from man or groff,
// and carries every command, the files and the version.
func TestManPageLints(t *testing.T) {
	man, groff := need(t, "man"), need(t, "groff")
	t.Setenv("SOURCE_DATE_EPOCH", "1700000000")
	page, _, code := runCLI(t, "man")
	if code != 0 {
		t.Fatal(code)
	}
	path := filepath.Join(t.TempDir(), "perch.1")
	if err := os.WriteFile(path, []byte(page), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(man, "--warnings", "-E", "UTF-8", "-l", "-Tutf8", "-Z", path)
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8", "MANWIDTH=80")
	if out, err := cmd.CombinedOutput(); err != nil || strings.Contains(string(out), "warning") {
		t.Fatalf("man --warnings: %v\n%s", err, out)
	}
	if out, err := exec.Command(groff, "-man", "-ww", "-z", path).CombinedOutput(); err != nil || len(out) > 0 {
		t.Fatalf("groff -ww: %v\n%s", err, out)
	}
	text, err := exec.Command(man, "-l", path).Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range Commands() {
		if !c.Hidden && !strings.Contains(string(text), "perch "+c.Name) {
			t.Errorf("rendered page lacks 'perch %s'", c.Name)
		}
	}
	for _, s := range []string{"/etc/perch/config.json", "PERCH_HOME", "--every DURATION", "-m MESSAGE", "2023-11-14"} {
		if !strings.Contains(string(text), s) {
			t.Errorf("rendered page lacks %q", s)
		}
	}
}

// complete runs the completion script in bash for words (the last being
// the one under the cursor) in a folder holding config.json and other.txt.
func complete(t *testing.T, script string, words ...string) []string {
	t.Helper()
	bash := need(t, "bash")
	var quoted []string
	for _, w := range words {
		quoted = append(quoted, shellQuote(w))
	}
	prog := script + "\nCOMP_WORDS=(" + strings.Join(quoted, " ") + ")\nCOMP_CWORD=" +
		strconv.Itoa(len(words)-1) + "\n_perch\nprintf '%s\\n' \"${COMPREPLY[@]}\"\n"
	cmd := exec.Command(bash, "--norc", "--noprofile", "-c", prog)
	cmd.Dir = t.TempDir()
	for _, f := range []string{"config.json", "other.txt"} {
		if err := os.WriteFile(filepath.Join(cmd.Dir, f), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("bash: %v\n%s", err, out)
	}
	return strings.Fields(string(out))
}

func TestBashCompletion(t *testing.T) {
	script, _, code := runCLI(t, "completion", "bash")
	if code != 0 {
		t.Fatal(code)
	}
	cases := []struct {
		words []string
		want  []string
	}{
		{[]string{"perch", "c"}, []string{"channels", "cron", "completion"}},
		{[]string{"perch", "s"}, []string{"status", "skills"}},
		{[]string{"perch", "cron", ""}, []string{"list", "add", "remove", "enable", "disable"}},
		{[]string{"perch", "cron", "add", "--ev"}, []string{"--every"}},
		{[]string{"perch", "gateway", "--"}, []string{"--config", "--debug", "--help"}},
		{[]string{"perch", "gateway", "--config", "con"}, []string{"config.json"}},
		{[]string{"perch", "cron", "add", "--message", ""}, nil},
		{[]string{"perch", "agent", "-"}, []string{"--config", "--debug", "-m", "-s", "--help"}},
	}
	for _, c := range cases {
		got := complete(t, script, c.words...)
		slices.Sort(got)
		want := slices.Clone(c.want)
		slices.Sort(want)
		if !slices.Equal(got, want) {
			t.Errorf("%q: got %q, want %q", c.words, got, want)
		}
	}
}
