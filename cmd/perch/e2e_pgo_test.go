package main

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Every build of perch is optimised with the committed CPU profile
// (default.pgo beside main.go): a build that lost it is measurably slower
// per turn, and nothing else would tell.
func TestBuildsUseTheCommittedProfile(t *testing.T) {
	out, err := exec.Command("go", "version", "-m", perchBin).CombinedOutput()
	if err != nil {
		t.Fatalf("go version -m: %v\n%s", err, out)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "build" && strings.HasPrefix(f[1], "-pgo=") {
			if !strings.HasSuffix(f[1], "default.pgo") {
				t.Fatalf("built with %s, want cmd/perch/default.pgo", f[1])
			}
			return
		}
	}
	t.Fatalf("the binary was built without a profile (no -pgo= setting):\n%s", out)
}

// make pgo records the bench's turns through a build with the pgoprofile
// tag: the gateway writes its profile when it stops, and no other command
// writes one.
func TestProfilingBuildRecordsTheGateway(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "perch-profiling")
	build := exec.Command("go", "build", "-tags", "pgoprofile", "-o", bin, ".")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building with -tags pgoprofile: %v\n%s", err, out)
	}
	prefix := filepath.Join(t.TempDir(), "cpu")
	h := NewHome(t, nil)
	h.Bin, h.ExtraEnv = bin, []string{"PERCH_CPUPROFILE=" + prefix}
	if _, stderr, code := h.Run("version"); code != 0 {
		t.Fatalf("version: exit %d: %s", code, stderr)
	}
	if got, _ := filepath.Glob(prefix + ".*"); len(got) != 0 {
		t.Fatalf("perch version wrote a profile: %v", got)
	}
	g := h.Start()
	for range 20 {
		g.MustChat("pgo", "hello")
	}
	pid := g.Cmd.Process.Pid
	g.Signal(syscall.SIGTERM)
	if code := g.Wait(30 * time.Second); code != 0 {
		t.Fatalf("gateway exited %d:\n%s", code, g.Stderr())
	}
	got, _ := filepath.Glob(prefix + ".*")
	want := prefix + "." + strconv.Itoa(pid)
	if len(got) != 1 || got[0] != want {
		t.Fatalf("profiles written: %v, want [%s]", got, want)
	}
	data, err := os.ReadFile(want)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatalf("the profile is not gzip (pprof's encoding): %v", err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("the profile is cut short: %v", err)
	}
	// A profile's string table names its sample types (cpu/nanoseconds)
	// and, once the main binary is mapped, the binary itself.
	for _, s := range []string{"samples", "cpu", "nanoseconds", "perch-profiling"} {
		if !bytes.Contains(raw, []byte(s)) {
			t.Errorf("the profile does not name %q: not a CPU profile of this binary", s)
		}
	}
}
