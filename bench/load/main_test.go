package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
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

func TestRoundsTakeTheMedianRatio(t *testing.T) {
	// The median ratio is a round's own, not the ratio of the medians:
	// here those are 0.8 and 900/1000.
	rs := rounds{{floor: 1000, perch: 900}, {floor: 2000, perch: 1000}, {floor: 500, perch: 400}}
	if got := rs.median(); got != 0.8 {
		t.Errorf("median ratio = %v, want 0.8", got)
	}
	if got, want := rs.perchMedian(), 900.0; got != want {
		t.Errorf("perch median = %v, want %v", got, want)
	}
	if got, want := rs.floorMedian(), 1000.0; got != want {
		t.Errorf("floor median = %v, want %v", got, want)
	}
	if got := (rounds{{floor: 10, perch: 5}, {floor: 10, perch: 7}}).median(); got != 0.6 {
		t.Errorf("median of two = %v, want 0.6", got)
	}
	if s := rs.String(); !strings.Contains(s, "900/1000 0.90x") {
		t.Errorf("String() = %q", s)
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
		"peak RSS", "first turn after trim", "durable floor", "median of 2 restarts", "anonymous", "start (exec to ready, median)", "c=1 p50", "<= 0.8x durable", "c=16 req/s (median of 3 alternating rounds)", "c=16 rounds",
		"idle RSS, every chat channel and MQTT", "idle RSS, all channels"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	// -only start: the starts alone, in the same words.
	out.Reset()
	if err := runStarts(&out, bin, "", 20, 64, 2); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"exec to /ready 200", "first start (fresh home)", "median of 2 restarts", "floor", "goal <= 1.3x"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-only start output lacks %q:\n%s", want, out.String())
		}
	}
	// -only start -against: two builds of perch, each restarted twice.
	other := filepath.Join(t.TempDir(), "perch-other")
	if data, err := os.ReadFile(bin); err != nil {
		t.Fatal(err)
	} else if err := os.WriteFile(other, data, 0o755); err != nil {
		t.Fatal(err)
	}
	out.Reset()
	against = other
	defer func() { against = "" }()
	if err := runStarts(&out, bin, "", 20, 64, 2); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{bin + " ", other + " ", "exec to /ready 200 median", "CPU median", "ratio " + bin + " / " + other, "over 2 restarts each"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("-against output lacks %q:\n%s", want, out.String())
		}
	}
}

// TestWriteDiag reads this test process's own pages: every address in
// resident.txt lies in a mapping of the test binary, and some do (its code
// is running).
func TestWriteDiag(t *testing.T) {
	dir := t.TempDir()
	if err := writeDiag(os.Getpid(), dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"smaps", "status"} {
		if st, err := os.Stat(filepath.Join(dir, f)); err != nil || st.Size() == 0 {
			t.Errorf("%s: %v", f, err)
		}
	}
	data, err := os.ReadFile(filepath.Join(dir, "resident.txt"))
	if err != nil {
		t.Fatal(err)
	}
	exe, _ := os.Readlink("/proc/self/exe")
	maps, _ := os.ReadFile("/proc/self/maps")
	type span struct{ lo, hi uint64 }
	var own []span
	for _, ln := range strings.Split(string(maps), "\n") {
		f := strings.Fields(ln)
		if len(f) >= 6 && f[5] == exe {
			lo, hi, _ := strings.Cut(f[0], "-")
			l, _ := strconv.ParseUint(lo, 16, 64)
			h, _ := strconv.ParseUint(hi, 16, 64)
			own = append(own, span{l, h})
		}
	}
	lines := strings.Split(strings.TrimSpace(string(data)), "\n")
	if len(lines) == 0 || lines[0] == "" {
		t.Fatal("no resident page of the test binary")
	}
	for _, ln := range lines {
		f := strings.Fields(ln)
		if len(f) != 3 || (f[2] != "small" && f[2] != "large") {
			t.Fatalf("line %q: want address, permissions, small or large", ln)
		}
		a, err := strconv.ParseUint(f[0], 16, 64)
		if err != nil {
			t.Fatalf("line %q: %v", ln, err)
		}
		in := false
		for _, s := range own {
			in = in || s.lo <= a && a < s.hi
		}
		if !in {
			t.Errorf("%x is not in a mapping of %s", a, exe)
		}
	}
}

// TestWriteBack syncs a binary just written and drops it from the page
// cache, and fails, naming it, on one that is not there (the run must not
// go on measuring nothing).
func TestWriteBack(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(p, bytes.Repeat([]byte("perch"), 1<<16), 0o755); err != nil {
		t.Fatal(err)
	}
	if n := cachedPages(t, p); n == 0 {
		t.Fatal("a file just written has no page in the page cache: the check below would prove nothing")
	}
	if err := writeBack(p); err != nil {
		t.Fatal(err)
	}
	if n := cachedPages(t, p); n != 0 {
		t.Errorf("%d pages of the binary still in the page cache after writeBack", n)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	if err := writeBack(missing); err == nil || !strings.Contains(err.Error(), missing) {
		t.Errorf("missing binary: %v", err)
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

// cachedPages counts the pages of the file at p that are in the page cache
// (mincore over a mapping of it, which itself reads nothing).
func cachedPages(t *testing.T, p string) int {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		t.Fatal(err)
	}
	m, err := unix.Mmap(int(f.Fd()), 0, int(st.Size()), unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	vec := make([]byte, (len(m)+os.Getpagesize()-1)/os.Getpagesize())
	if _, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(len(m)), uintptr(unsafe.Pointer(&vec[0]))); errno != 0 {
		t.Fatal("mincore:", errno)
	}
	n := 0
	for _, v := range vec {
		n += int(v & 1)
	}
	return n
}

// TestSampleRSSAndLongIdleWords: the long-idle readings are a mean and a
// largest reading over the period, and the words name them only when taken.
func TestSampleRSSAndLongIdleWords(t *testing.T) {
	cmd := exec.Command("sleep", "10")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Kill(); cmd.Wait() }()
	start := time.Now()
	mean, most, last := sampleRSS(&server{cmd: cmd}, 1500*time.Millisecond)
	if took := time.Since(start); took < 1500*time.Millisecond || took > 5*time.Second {
		t.Errorf("sampling 1.5 s took %v", took)
	}
	if mean <= 0 || most < mean || last <= 0 || last > most {
		t.Errorf("mean %d kB, largest %d kB, last %d kB", mean, most, last)
	}
	f := channelFigures{warmKB: 12 << 10, warmAnonKB: 3 << 10, trimmedKB: 7 << 10}
	if s := f.String(); s != "12.0 MB warm (3.0 MB anonymous, 9.0 MB file), 7.0 MB trimmed" {
		t.Errorf("without the long idle: %q", s)
	}
	defer func(d time.Duration) { longIdle = d }(longIdle)
	longIdle = 150 * time.Second
	f.longMeanKB, f.longMaxKB, f.longLastKB = 7<<10+512, 8<<10, 4<<10
	if s := f.String(); !strings.HasSuffix(s, ", then 7.5 MB mean and 8.0 MB at most over 2m30s of idling, 4.0 MB at its end") {
		t.Errorf("with the long idle: %q", s)
	}
}
