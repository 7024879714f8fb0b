package appliance

import (
	"bufio"
	"context"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// trimWorkingSet drops start-up's pages from the process's resident set once
// the gateway is ready: the garbage of start-up goes back to the kernel, and
// the read-only mappings of the binary (code and data touched only while
// starting: package initialisers, config parsing, TLS tables) are unmapped
// with MADV_DONTNEED. On a 512 MB board this is several megabytes, since the
// kernel maps the binary in 64 KB chunks. The pages stay in the page cache,
// where the kernel reclaims them first when memory runs short; a page needed
// again faults back in from the cache without touching the SD card.
//
// MADV_PAGEOUT would ask for more, but the kernel honours it on a file's
// pages only for a process that owns the file or may write it: the gateway
// runs as its own user from a binary root owns, so it paged out nothing.
// MADV_DONTNEED is allowed to every process on its own private mappings, and
// loses nothing on these: a read-only mapping holds no private changes. It
// returns the bytes of binary mappings it advised; errors are ignored: the
// trim is an optimisation.
func trimWorkingSet() int {
	debug.FreeOSMemory()
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return 0
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return 0
	}
	defer f.Close()
	total := 0
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// address perms offset dev inode path
		if len(fields) < 6 || fields[5] != exe || strings.Contains(fields[1], "w") {
			continue
		}
		start, end, ok := strings.Cut(fields[0], "-")
		if !ok {
			continue
		}
		s, err1 := strconv.ParseUint(start, 16, 64)
		e, err2 := strconv.ParseUint(end, 16, 64)
		if err1 != nil || err2 != nil || e <= s {
			continue
		}
		// The raw call takes the address as a number: the mapping is not Go
		// memory, so it must not pass through unsafe.Pointer.
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, uintptr(s), uintptr(e-s), unix.MADV_DONTNEED); errno == 0 {
			total += int(e - s)
		}
	}
	return total
}

// startTrimDelay is how long after start-up the first trim waits.
const startTrimDelay = time.Second

// idleTrimEvery is how often the idle trimmer looks: after a full period
// without a turn (and none running) it trims once, and then again only when
// idle work has mapped regrowKB more.
const idleTrimEvery = 15 * time.Second

// regrowKB is how far the mapped file pages may grow again while idle before
// the idle trimmer trims again. Idle is not still: a Telegram long poll
// comes back, the MQTT states are published, the session sweeper reads the
// database, and every two minutes Go's forced garbage collection walks every
// goroutine's stack through the function tables. With every channel, the
// 2.5 idle minutes after a trim mapped up to 6 MB again, above the warm
// figure.
const regrowKB = 1024

// trimWhenIdle gives memory back after a burst of activity: a board spends
// most of its life waiting for the next message.
func (s *System) trimWhenIdle(ctx context.Context) {
	turns := s.Agent.Activity()
	// The start-up trim (RunGateway, unless a turn came first) covers the
	// connections made in its first second; count those made later.
	select {
	case <-ctx.Done():
		return
	case <-time.After(startTrimDelay):
	}
	it := newIdleTrim(turns, s.connects())
	t := time.NewTicker(idleTrimEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if it.tick(s.Agent.Activity(), s.connects(), s.Agent.Stats().Running, fileResidentKB()) {
			// The caches that speed up turns under load go first, so the
			// collection in the trim frees the spans they held.
			s.Store.DropCachedHistories()
			s.Agent.DropCaches()
			trimWorkingSet()
			it.trimmedTo(fileResidentKB())
		}
	}
}

// fileResidentKB is the process's resident file pages in kB (the binary's,
// and the database's mapping), from /proc/self/statm's third field; 0 when
// it cannot be read, which never triggers a trim.
func fileResidentKB() int {
	var buf [128]byte
	f, err := os.Open("/proc/self/statm")
	if err != nil {
		return 0
	}
	n, _ := f.Read(buf[:])
	f.Close()
	fields := strings.Fields(string(buf[:n]))
	if len(fields) < 3 {
		return 0
	}
	pages, err := strconv.Atoi(fields[2])
	if err != nil {
		return 0
	}
	return pages * (os.Getpagesize() >> 10)
}

// connects counts the connections of the chat channels and the MQTT link
// that came up since start. A connection that comes up after the start-up
// trim (a platform slow to answer at boot, a reconnection hours later)
// touches pages no turn needs again soon: TLS, the WebSocket upgrade, the
// platform's hello, MQTT discovery.
func (s *System) connects() uint64 {
	var n uint64
	if s.Channels != nil {
		if h := s.Channels.Hub(); h != nil {
			n += h.Connects()
		}
	}
	if s.MQTT != nil {
		n += s.MQTT.Connects()
	}
	return n
}

// idleTrim decides, once per idleTrimEvery, whether to trim: after a full
// period in which neither a turn began nor a connection came up, once,
// and never while a turn runs. Turns and connections both wait for a
// quiet period, so the trim never follows a turn closely (the next turn
// would pay for faulting the pages back in). Once trimmed, it trims again
// only when idle work has mapped regrowKB more of the process's files since
// (see regrowKB).
type idleTrim struct {
	turns, conns uint64
	trimmed      bool
	// base is the resident file kB after the last trim; 0 until known.
	base int
}

// newIdleTrim starts after the start-up trim's decision: nothing to trim
// until a turn, a connection or regrowth.
func newIdleTrim(turns, conns uint64) *idleTrim {
	return &idleTrim{turns: turns, conns: conns, trimmed: true}
}

// tick takes the counters and the resident file kB now and reports whether
// to trim.
func (it *idleTrim) tick(turns, conns uint64, running, residentKB int) bool {
	if turns != it.turns || conns != it.conns {
		it.turns, it.conns, it.trimmed = turns, conns, false
		return false
	}
	if running > 0 {
		return false
	}
	if it.trimmed {
		if it.base == 0 || residentKB < it.base {
			// The start-up trim's result, or a kernel that reclaimed
			// pages meanwhile: measure growth from here.
			it.base = residentKB
			return false
		}
		return residentKB-it.base >= regrowKB
	}
	it.trimmed = true
	return true
}

// trimmedTo records the resident file kB right after a trim.
func (it *idleTrim) trimmedTo(residentKB int) { it.base = residentKB }
