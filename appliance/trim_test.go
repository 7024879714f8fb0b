package appliance

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/perchhq/perch/appliance/bus"
	"github.com/perchhq/perch/appliance/channel"
	"github.com/perchhq/perch/appliance/config"
)

func rssFileKB(t *testing.T) int {
	t.Helper()
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, ln := range strings.Split(string(data), "\n") {
		if f := strings.Fields(ln); len(f) >= 2 && f[0] == "RssFile:" {
			n, _ := strconv.Atoi(f[1])
			return n
		}
	}
	t.Fatal("no RssFile in /proc/self/status")
	return 0
}

// TestTrimWorkingSetDropsBinaryPages: after the trim the process holds fewer
// pages of its own binary.
func TestTrimWorkingSetDropsBinaryPages(t *testing.T) {
	before := rssFileKB(t)
	advised, _ := trimWorkingSet()
	after := rssFileKB(t)
	if advised == 0 {
		t.Fatal("no mapping of the binary was advised (MADV_DONTNEED refused?)")
	}
	if after >= before {
		t.Fatalf("RssFile %d kB before, %d kB after the trim", before, after)
	}
	t.Logf("RssFile %d kB -> %d kB (%d kB of mappings advised)", before, after, advised>>10)
}

// trimHelperArg runs the test binary as runTrimHelper.
const trimHelperArg = "trim-helper"

// runTrimHelper trims and prints the resident kB of the binary's read-only
// mappings before and after.
func runTrimHelper([]string) int {
	before, err := binaryRssKB()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	trimWorkingSet()
	after, err := binaryRssKB()
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(before, after, pageByPage())
	return 0
}

// binaryRssKB is the resident kB of the read-only mappings of the process's
// own binary: what the trim advises (a test binary built with cgo also maps
// libc, which the trim leaves alone).
func binaryRssKB() (int, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0, err
	}
	total, seen, err := smapsRssKB(func(f []string) bool {
		return len(f) >= 6 && f[5] == exe && !strings.Contains(f[1], "w")
	})
	if err == nil && !seen {
		err = fmt.Errorf("no read-only mapping of %s in /proc/self/smaps", exe)
	}
	return total, err
}

// smapsRssKB sums the Rss of the process's mappings whose header line
// (address perms offset dev inode [path], split in fields) ours accepts,
// and reports whether any did.
func smapsRssKB(ours func(header []string) bool) (total int, seen bool, err error) {
	data, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, false, err
	}
	in := false
	for _, ln := range strings.Split(string(data), "\n") {
		f := strings.Fields(ln)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && len(f[1]) == 4:
			in = ours(f)
			seen = seen || in
		case in && len(f) >= 2 && f[0] == "Rss:":
			n, err := strconv.Atoi(f[1])
			if err != nil {
				return 0, seen, err
			}
			total += n
		}
	}
	return total, seen, nil
}

// TestTrimWorksOnABinaryOfAnotherUser: installed, the gateway runs as its
// own user from a binary root owns. The trim must give back the binary's
// pages there too (MADV_PAGEOUT gave back none: the kernel pages a file's
// pages out only for its owner or a writer).
func TestTrimWorksOnABinaryOfAnotherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("running the binary as a user who does not own it needs root")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A root-owned copy nobody can run, as /usr/bin/perch is.
	dir, err := os.MkdirTemp("", "perch-trim-*")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "perch")
	f, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	// Written back and read again from the disk, as an installed binary is
	// long before it runs: the kernel keeps a file just written in large
	// folios and maps each whole at a fault, which no trim can shrink.
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if err == nil {
		err = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	}
	if err := errors.Join(err, f.Close()); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, trimHelperArg)
	cmd.Dir = dir
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("helper as nobody: %v: %s", err, out)
	}
	var before, after int
	var byPage bool
	if _, err := fmt.Sscan(string(out), &before, &after, &byPage); err != nil {
		t.Fatalf("helper printed %q: %v", out, err)
	}
	// What the trim leaves is the chunks the helper touches after it (a
	// quarter of them, here); MADV_PAGEOUT left every one.
	if after > before/2 {
		t.Fatalf("as nobody, the binary's read-only mappings held %d kB before the trim and %d kB after: its pages were not given back", before, after)
	}
	// An unprivileged process may use a userfaultfd in user mode only,
	// which is all the page-by-page mapping needs.
	if kernelAtLeast(t, 6, 7) && !byPage {
		t.Fatal("as nobody, the binary is not mapped page by page on this kernel")
	}
	t.Logf("as nobody: the binary's read-only mappings %d kB -> %d kB, page by page: %v", before, after, byPage)
}

// TestIdleTrimWaitsForAQuietPeriod: the idle trimmer trims once after a
// full period without a turn or a new connection, never right after
// either, never while a turn runs, and not again until something happens.
func TestIdleTrimWaitsForAQuietPeriod(t *testing.T) {
	it := newIdleTrim(0, 4) // four channels connected before the start-up trim
	step := func(turns, conns uint64, running int, trim bool) {
		t.Helper()
		want := trimNothing
		if trim {
			want = trimAll
		}
		// The resident file pages stay put: only turns and connections
		// count here. Mapped in 64 KB chunks, the binary's pages go at
		// the first trim.
		if got := it.tick(turns, conns, running, 4000, false); got != want {
			t.Fatalf("tick(turns %d, connections %d, running %d) = %v, want %v", turns, conns, running, got, want)
		}
	}
	step(0, 4, 0, false) // the start-up trim covered start
	step(1, 4, 1, false) // a turn began: wait a whole quiet period
	step(1, 4, 1, false) // still running
	step(1, 4, 0, true)  // quiet for a period: trim
	it.trimmedTo(4000)
	step(1, 4, 0, false) // once
	// A channel that connects late (a platform slow at boot) or reconnects:
	// its set-up's pages go back once the board is quiet again.
	step(1, 5, 0, false)
	step(1, 5, 0, true)
	it.trimmedTo(4000)
	step(1, 5, 0, false)
	// A turn right after a reconnection: only one quiet period after both.
	step(1, 6, 0, false)
	step(2, 6, 0, false)
	step(2, 6, 0, true)
}

// TestIdleTrimTrimsAgainWhenIdleWorkRegrows: while nothing happens, the
// idle trimmer trims again once idle work (polls, the forced collection)
// has mapped regrowKB more, measured from the last trim; never while a
// turn runs, and a turn still waits for its quiet period.
func TestIdleTrimTrimsAgainWhenIdleWorkRegrows(t *testing.T) {
	it := newIdleTrim(0, 0)
	step := func(turns uint64, running, resident int, trim bool) {
		t.Helper()
		want := trimNothing
		if trim {
			want = trimAll
		}
		if got := it.tick(turns, 0, running, resident, false); got != want {
			t.Fatalf("tick(turns %d, running %d, resident %d kB) = %v, want %v", turns, running, resident, got, want)
		}
	}
	step(0, 0, 2000, false)            // after the start-up trim: the base
	step(0, 0, 2000+regrowKB-4, false) // grew, not enough
	step(0, 0, 2000+regrowKB, true)    // enough: trim again
	it.trimmedTo(2100)                 // what the trim left
	step(0, 0, 2100+regrowKB/2, false) // from the new base
	step(0, 1, 2100+2*regrowKB, false) // a turn runs (begun before the count): never
	step(0, 0, 2100+2*regrowKB, true)  // it ended, still no new turn: trim
	it.trimmedTo(2000)
	step(1, 0, 9000, false) // a turn began: its quiet period first
	step(1, 0, 9000, true)
	it.trimmedTo(2000)
	step(1, 0, 1500, false) // the kernel took pages meanwhile: new base
	step(1, 0, 1500+regrowKB, true)
	it.trimmedTo(0) // statm unreadable: 0
	step(1, 0, 0, false)
	step(1, 0, 0, false) // never trims on a reading of 0
	if got := fileResidentKB(); got <= 0 {
		t.Fatalf("fileResidentKB() = %d", got)
	}
}

// TestIdleTrimKeepsTheBinaryUntilDeepIdle: with the binary mapped page by
// page, the first trim after a turn gives back the heap only, so the next
// message of a conversation finds the pages it runs; the binary's pages go
// after deepIdleAfter without a turn, and from then on as without.
func TestIdleTrimKeepsTheBinaryUntilDeepIdle(t *testing.T) {
	it := newIdleTrim(0, 0)
	step := func(turns uint64, running, resident int, want trimLevel) {
		t.Helper()
		if got := it.tick(turns, 0, running, resident, true); got != want {
			t.Fatalf("tick(turns %d, running %d, resident %d kB) = %v, want %v", turns, running, resident, got, want)
		}
	}
	step(0, 0, 2000, trimNothing) // after the start-up trim: the base
	step(1, 1, 3000, trimNothing) // a turn
	step(1, 0, 3000, trimHeap)    // a quiet period: the heap only
	for i := 2; i < deepIdleTicks; i++ {
		step(1, 0, 3000, trimNothing)
	}
	step(1, 0, 3000, trimAll) // deepIdleAfter: everything
	it.trimmedTo(1800)
	step(1, 0, 1800+regrowKB-4, trimNothing)
	step(1, 0, 1800+regrowKB, trimAll) // regrowth, as without
	it.trimmedTo(1800)
	// A turn during the wait starts it again.
	step(2, 0, 3000, trimNothing)
	step(2, 0, 3000, trimHeap)
	step(2, 0, 3000, trimNothing)
	step(3, 0, 3000, trimNothing)
	for i := 1; i < deepIdleTicks; i++ {
		step(3, 1, 3000, trimNothing) // a long turn counts as activity
	}
	step(3, 0, 3000, trimHeap)
	if deepIdleTicks < 4 {
		t.Fatalf("deepIdleAfter is %v: not much longer than a quiet period (%v)", deepIdleAfter, idleTrimEvery)
	}
}

// kernelAtLeast reports whether the running kernel is major.minor or later.
func kernelAtLeast(t *testing.T, major, minor int) bool {
	t.Helper()
	var u unix.Utsname
	if err := unix.Uname(&u); err != nil {
		t.Fatal(err)
	}
	var ma, mi int
	if _, err := fmt.Sscanf(unix.ByteSliceToString(u.Release[:]), "%d.%d", &ma, &mi); err != nil {
		t.Fatalf("kernel release %q: %v", u.Release[:], err)
	}
	return ma > major || ma == major && mi >= minor
}

// TestConnectsCountsTheChannels: the idle trimmer's connection count is the
// chat channels' (and the MQTT link's, when there is one).
func TestConnectsCountsTheChannels(t *testing.T) {
	b := bus.New(4)
	log := slog.New(slog.DiscardHandler)
	s := &System{Channels: channel.NewManager(b, log)}
	hub := channel.NewHub(channel.HubOptions{Bus: b, Log: log})
	defer hub.Stop()
	s.Channels.UseHub(hub)
	if n := s.connects(); n != 0 {
		t.Fatalf("no channel connected: %d", n)
	}
	cfg := config.Default()
	for _, name := range []string{"telegram", "slack"} {
		sec, _ := cfg.Channels.Section(name)
		in := channel.NewIntake(channel.Deps{Section: sec, Bus: b, Log: log, Hub: hub}, channel.IntakeOptions{})
		in.State().Connected()
	}
	if n := s.connects(); n != 2 {
		t.Fatalf("two channels connected: %d, want 2", n)
	}
	if n := (&System{}).connects(); n != 0 {
		t.Fatalf("a system without channels: %d", n)
	}
}
