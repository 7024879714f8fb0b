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
// loses nothing on these: a read-only mapping holds no private changes.
//
// Where the kernel can (see mapPageByPage), the mappings are also switched
// to one page per fault, so what comes back after the trim is the pages
// used, not the 64 KB around each. It returns the bytes of binary mappings
// it advised, and why they are not mapped page by page (nil when they are);
// other errors are ignored: the trim is an optimisation.
func trimWorkingSet() (advised int, pageErr error) {
	debug.FreeOSMemory()
	maps, err := binaryMappings()
	if err != nil {
		return 0, err
	}
	for _, m := range maps {
		// Registering a mapping again is harmless and costs one call; a
		// kernel that cannot is asked only once (pageByPageFD).
		if err := mapPageByPage(m.start, m.end); err != nil && pageErr == nil {
			pageErr = err
		}
		// The raw call takes the address as a number: the mapping is not Go
		// memory, so it must not pass through unsafe.Pointer.
		if _, _, errno := unix.Syscall(unix.SYS_MADVISE, m.start, m.end-m.start, unix.MADV_DONTNEED); errno == 0 {
			advised += int(m.end - m.start)
		}
	}
	return advised, pageErr
}

// mapping is an address range [start, end).
type mapping struct{ start, end uintptr }

// binaryMappings lists the read-only mappings of the process's own binary:
// its code, read-only data and function tables.
func binaryMappings() ([]mapping, error) {
	exe, err := os.Readlink("/proc/self/exe")
	if err != nil {
		return nil, err
	}
	f, err := os.Open("/proc/self/maps")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var maps []mapping
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
		maps = append(maps, mapping{uintptr(s), uintptr(e)})
	}
	return maps, sc.Err()
}

// startTrimDelay is how long after start-up the first trim waits.
const startTrimDelay = time.Second

// idleTrimEvery is how often the idle trimmer looks: after a full period
// without a turn (and none running) it trims once, and then again only when
// idle work has mapped regrowKB more.
const idleTrimEvery = 15 * time.Second

// deepIdleAfter is how long the board must be quiet before the idle trim
// gives back the binary's pages too, when they are mapped page by page.
// Mapped so, a turn keeps only the pages it runs (3 MB of the binary,
// against 9 MB in 64 KB chunks), and the next turn of a conversation
// would fault each back in one by one: 9.6 ms for the first turn after
// such a trim on the bench's machine, against 2.1-2.9 ms when the trim
// leaves them. Someone chatting answers within a minute or two; after
// that the board is left alone, and the pages are better in the page
// cache.
const deepIdleAfter = 2 * time.Minute

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
		level := it.tick(s.Agent.Activity(), s.connects(), s.Agent.Stats().Running, fileResidentKB(), pageByPage())
		if level == trimNothing {
			continue
		}
		// The caches that speed up turns under load go first, so the
		// collection in the trim frees the spans they held.
		s.Store.DropCachedHistories()
		s.Agent.DropCaches()
		if level == trimHeap {
			debug.FreeOSMemory()
			continue
		}
		trimWorkingSet()
		it.trimmedTo(fileResidentKB())
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

// trimLevel is what an idle trim gives back.
type trimLevel int

const (
	trimNothing trimLevel = iota
	// trimHeap: the caches that only help under load and the heap's free
	// memory.
	trimHeap
	// trimAll: that and the binary's pages (trimWorkingSet).
	trimAll
)

// deepIdleTicks is deepIdleAfter in the idle trimmer's periods.
const deepIdleTicks = int(deepIdleAfter / idleTrimEvery)

// idleTrim decides, once per idleTrimEvery, what to trim: after a full
// period in which neither a turn began nor a connection came up, and never
// while a turn runs. Turns and connections both wait for a quiet period, so
// the trim never follows a turn closely (the next turn would pay for
// faulting the pages back in). With the binary mapped page by page, the
// first trim keeps its pages and a second, after deepIdleAfter, gives them
// back (see deepIdleAfter); otherwise the first gives back everything. Once
// everything is given back, it trims again only when idle work has mapped
// regrowKB more of the process's files since (see regrowKB).
type idleTrim struct {
	turns, conns uint64
	// quiet counts the periods since the last turn or connection.
	quiet int
	// done is the deepest trim since then.
	done trimLevel
	// base is the resident file kB after the last full trim; 0 until known.
	base int
}

// newIdleTrim starts after the start-up trim's decision: nothing to trim
// until a turn, a connection or regrowth.
func newIdleTrim(turns, conns uint64) *idleTrim {
	return &idleTrim{turns: turns, conns: conns, done: trimAll}
}

// tick takes the counters, the resident file kB now and whether the binary
// is mapped page by page, and reports what to trim.
func (it *idleTrim) tick(turns, conns uint64, running, residentKB int, pageByPage bool) trimLevel {
	if turns != it.turns || conns != it.conns {
		it.turns, it.conns, it.quiet, it.done = turns, conns, 0, trimNothing
		return trimNothing
	}
	if running > 0 {
		return trimNothing
	}
	it.quiet++
	switch {
	case it.done == trimAll:
		if it.base == 0 || residentKB < it.base {
			// The start-up trim's result, or a kernel that reclaimed
			// pages meanwhile: measure growth from here.
			it.base = residentKB
			return trimNothing
		}
		if residentKB-it.base >= regrowKB {
			return trimAll
		}
		return trimNothing
	case !pageByPage || it.quiet >= deepIdleTicks:
		it.done = trimAll
		return trimAll
	case it.done == trimNothing:
		it.done = trimHeap
		return trimHeap
	}
	return trimNothing
}

// trimmedTo records the resident file kB right after a trim.
func (it *idleTrim) trimmedTo(residentKB int) { it.base = residentKB }
