package appliance

import (
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"

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
	advised := trimWorkingSet()
	after := rssFileKB(t)
	if advised == 0 {
		t.Fatal("no mapping of the binary was advised (MADV_PAGEOUT unsupported?)")
	}
	if after >= before {
		t.Fatalf("RssFile %d kB before, %d kB after the trim", before, after)
	}
	t.Logf("RssFile %d kB -> %d kB (%d kB of mappings advised)", before, after, advised>>10)
}

// TestIdleTrimWaitsForAQuietPeriod: the idle trimmer trims once after a
// full period without a turn or a new connection, never right after
// either, never while a turn runs, and not again until something happens.
func TestIdleTrimWaitsForAQuietPeriod(t *testing.T) {
	it := newIdleTrim(0, 4) // four channels connected before the start-up trim
	step := func(turns, conns uint64, running int, want bool) {
		t.Helper()
		if got := it.tick(turns, conns, running); got != want {
			t.Fatalf("tick(turns %d, connections %d, running %d) = %v, want %v", turns, conns, running, got, want)
		}
	}
	step(0, 4, 0, false) // the start-up trim covered start
	step(1, 4, 1, false) // a turn began: wait a whole quiet period
	step(1, 4, 1, false) // still running
	step(1, 4, 0, true)  // quiet for a period: trim
	step(1, 4, 0, false) // once
	// A channel that connects late (a platform slow at boot) or reconnects:
	// its set-up's pages go back once the board is quiet again.
	step(1, 5, 0, false)
	step(1, 5, 0, true)
	step(1, 5, 0, false)
	// A turn right after a reconnection: only one quiet period after both.
	step(1, 6, 0, false)
	step(2, 6, 0, false)
	step(2, 6, 0, true)
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
