package version

import (
	"regexp"
	"testing"
	"time"
)

// TestStringShape pins the line black-box tests parse.
func TestStringShape(t *testing.T) {
	Version, Commit, BuildTime = "1.2.3", "abc123", "2026-01-02T03:04:05Z"
	t.Cleanup(func() { Version, Commit, BuildTime = "", "", "" })
	got := Get().String()
	re := regexp.MustCompile(`^perch 1\.2\.3 \(commit abc123, built 2026-01-02T03:04:05Z, go[0-9.]+.*\)$`)
	if !re.MatchString(got) {
		t.Fatalf("version line %q does not match %s", got, re)
	}
}

// TestFallbackWithoutLdflags: a plain go build still prints a parseable time.
func TestFallbackWithoutLdflags(t *testing.T) {
	i := Get()
	if i.Version == "" || i.Commit == "" {
		t.Fatalf("empty fields: %+v", i)
	}
	if _, err := time.Parse(time.RFC3339, i.BuildTime); err != nil {
		t.Fatalf("build time %q is not RFC 3339: %v", i.BuildTime, err)
	}
}
