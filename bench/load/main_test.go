package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestPercentile(t *testing.T) {
	l := []time.Duration{5, 1, 4, 2, 3, 6, 7, 8, 9, 10}
	if got := pct(l, 50); got != 5 {
		t.Errorf("p50 = %v", got)
	}
	if got := pct(l, 99); got != 9 {
		t.Errorf("p99 = %v", got)
	}
	if l[0] != 5 {
		t.Error("pct sorted its input in place")
	}
}

func TestProcKB(t *testing.T) {
	if n := procKB(os.Getpid(), "VmRSS"); n <= 0 {
		t.Fatalf("VmRSS of this process = %d", n)
	}
	if n := procKB(os.Getpid(), "NoSuchField"); n != 0 {
		t.Fatalf("unknown field = %d", n)
	}
}

// TestLoadRunsAgainstTheRealBinary keeps `make bench` working: a short run
// against a freshly built perch and the floors prints every figure.
func TestLoadRunsAgainstTheRealBinary(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "perch")
	build := exec.Command("go", "build", "-o", bin, "../../cmd/perch")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build: %v\n%s", err, out)
	}
	var out bytes.Buffer
	if err := run(&out, bin, "", 20, 64, 0, 0, 2); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"binary (stripped)", "exec to /ready 200", "idle RSS (after start)", "idle RSS warm", "/chat c=1", "/chat c=16",
		"peak RSS", "first turn after trim", "durable floor", "median of 2 restarts", "anonymous", "start (exec to ready, median)", "c=1 p50", "<= 0.8x durable", "c=16 req/s",
		"idle RSS, every chat channel and MQTT", "idle RSS, all channels"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestCPUTime: the CPU time read from /proc grows with work done.
func TestCPUTime(t *testing.T) {
	before := cpuTime(os.Getpid())
	x := 0
	for start := time.Now(); time.Since(start) < 300*time.Millisecond; {
		x++
	}
	if d := cpuTime(os.Getpid()) - before; d < 100*time.Millisecond {
		t.Fatalf("300 ms of spinning counted as %v of CPU (%d)", d, x)
	}
}
