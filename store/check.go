package store

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
)

// CheckReport is what `perch db check` prints: the file's shape, what it
// holds and everything found wrong with it.
type CheckReport struct {
	Path string `json:"path"`
	Size int64  `json:"size_bytes"`
	// PageSize, Pages (the high water mark) and FreePages describe the
	// bbolt file; free pages are reused by later writes, and the store
	// compacts a file that is mostly free.
	PageSize  int    `json:"page_size"`
	Pages     uint64 `json:"pages"`
	FreePages uint64 `json:"free_pages"`
	TxID      uint64 `json:"txid"`
	Schema    uint64 `json:"schema"`
	// Sessions, Messages, CronJobs, Devices and SensorSeries count the
	// records that decode.
	Sessions     int `json:"sessions"`
	Messages     int `json:"messages"`
	CronJobs     int `json:"cron_jobs"`
	Devices      int `json:"device_records"`
	SensorSeries int `json:"sensor_series"`
	// Problems lists what is wrong (at most 50; ProblemCount counts all).
	// Empty when the file is sound.
	Problems     []string `json:"problems"`
	ProblemCount int      `json:"problem_count"`
	// Notes are what is worth knowing but is not damage: a meta page an
	// interrupted commit left torn, which bbolt reads past.
	Notes []string `json:"notes,omitempty"`
	// Unclean is true when the last process that opened the file for
	// writing did not close it (killed, crashed or power lost).
	Unclean bool `json:"unclean_shutdown"`
	// JournalRecords and JournalMessages count the appends waiting in the
	// journal beside the file (acknowledged, not yet in it: left by a
	// crash or power cut; the gateway applies them at its next start).
	JournalRecords  int `json:"journal_records"`
	JournalMessages int `json:"journal_messages"`
	// Duration is how long the check took.
	Duration time.Duration `json:"duration_ns"`
}

// OK reports whether the file is sound.
func (r *CheckReport) OK() bool { return r.ProblemCount == 0 }

// String renders the report for a terminal.
func (r *CheckReport) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s: %d bytes, schema v%d, %d pages of %d bytes (%d free), transaction %d\n",
		r.Path, r.Size, r.Schema, r.Pages, r.PageSize, r.FreePages, r.TxID)
	fmt.Fprintf(&b, "  %s, %s, %s, %s, %s\n", count(r.Sessions, "session"), count(r.Messages, "message"),
		count(r.CronJobs, "cron job"), count(r.Devices, "device record"), count(r.SensorSeries, "sensor series"))
	if r.Unclean {
		b.WriteString("  the last writer did not close it (power loss or crash)\n")
	}
	if r.JournalRecords > 0 {
		fmt.Fprintf(&b, "  %d messages wait in its journal (%s); the gateway applies them at its next start\n",
			r.JournalMessages, JournalPath(r.Path))
	}
	for _, n := range r.Notes {
		fmt.Fprintf(&b, "  note: %s\n", n)
	}
	if r.OK() {
		fmt.Fprintf(&b, "  no problems found (%s)\n", r.Duration.Round(time.Millisecond))
		return b.String()
	}
	noun := "problems"
	if r.ProblemCount == 1 {
		noun = "problem"
	}
	fmt.Fprintf(&b, "  %d %s:\n", r.ProblemCount, noun)
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "  - %s\n", p)
	}
	if r.ProblemCount > len(r.Problems) {
		fmt.Fprintf(&b, "  - … and %d more\n", r.ProblemCount-len(r.Problems))
	}
	if r.Size == 0 {
		b.WriteString("  there is nothing in it to salvage\n")
	}
	return b.String()
}

// GatewayAdvice says what the gateway does with the damaged file when it
// is the database of its home, and what the owner can do meanwhile.
func (r *CheckReport) GatewayAdvice() string {
	if r.Size == 0 {
		return "  the gateway starts a new, empty database in it at its next start\n"
	}
	return "  the gateway sets a damaged file aside at its next start and starts on a fresh one with whatever\n" +
		"  `perch db salvage` can read; stop the gateway and run `perch db salvage` to copy it out yourself\n"
}

// count is n and the noun, plural unless n is 1 ("series" stays).
func count(n int, noun string) string {
	if n != 1 && !strings.HasSuffix(noun, "s") {
		noun += "s"
	}
	return fmt.Sprintf("%d %s", n, noun)
}

// CheckFile verifies the database at path without changing it: every page
// reachable from the newest valid meta page is read and bounds-checked,
// every record decoded, and, when the structure is sound, bbolt's own
// consistency check runs too. It takes a shared lock, so it fails with
// ErrLocked while a gateway has the file open. A damaged file is a report
// with problems, not an error; errors are for files that cannot be read at
// all (absent, locked, unreadable).
func CheckFile(path string) (*CheckReport, error) {
	start := time.Now()
	f, err := lockFile(path, false, time.Second, nil)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("store: check %s: %w", path, err)
	}
	rep := &CheckReport{Path: path, Size: st.Size()}
	rep.Unclean = markerUnclean(path)
	if st.Size() == 0 {
		// Not damage the gateway sets aside: it starts a new database in
		// an empty file. Said as one problem, since a file that held data
		// and now holds none has lost it.
		rep.Problems, rep.ProblemCount = []string{"the file is empty: no database was written to it, or it was emptied"}, 1
		rep.Duration = time.Since(start)
		return rep, nil
	}
	r, unmap := loadFile(f, st.Size())
	c := verifyFile(r, st.Size(), true, false)
	unmap()
	c.fill(rep)
	if c.sound() {
		// What a crash left only in the journal is part of what the file
		// holds once the gateway starts; one copying the file by hand
		// needs to know.
		if recs, err := readJournal(JournalPath(path), c.journalMark); err == nil {
			rep.JournalRecords = len(recs)
			for _, r := range recs {
				rep.JournalMessages += len(r.data)
			}
		}
		// bbolt's own check, as a second opinion: it is safe now that
		// every page it will touch has been bounds-checked. It asserts
		// both meta pages, though, and stops at a torn one, which the
		// file is read past (bbolt uses the other, and its next commit
		// rewrites the torn one): that is said as a note instead.
		if len(c.metaProblems) > 0 {
			for _, p := range c.metaProblems {
				rep.Notes = append(rep.Notes, fmt.Sprintf("%s; the file is read from the other meta page (transaction %d), as bbolt reads it, and the next write rewrites the damaged one", p, c.meta.txid))
			}
			rep.Notes = append(rep.Notes, "bbolt's own check was not run: it stops at a damaged meta page")
		} else {
			for _, e := range boltCheck(path, f) {
				rep.ProblemCount++
				if len(rep.Problems) < maxProblems {
					rep.Problems = append(rep.Problems, "bbolt check: "+e)
				}
			}
		}
	}
	rep.Duration = time.Since(start)
	return rep, nil
}

// boltCheck runs bbolt's tx.Check over the file, read-only, through the
// already locked descriptor.
func boltCheck(path string, f *os.File) (problems []string) {
	b, err := bolt.Open(path, 0o600, &bolt.Options{ReadOnly: true, OpenFile: reuseFile(f), Timeout: time.Second})
	if err != nil {
		return []string{err.Error()}
	}
	// b.Close would close f, which the caller still owns and closes.
	defer func() { _ = b.Close() }()
	err = b.View(func(tx *bolt.Tx) error {
		for e := range tx.Check() {
			problems = append(problems, e.Error())
		}
		return nil
	})
	if err != nil {
		problems = append(problems, err.Error())
	}
	return problems
}

// fileCheck is the outcome of verifyFile.
type fileCheck struct {
	meta      boltMeta
	haveMeta  bool
	pages     uint64 // high water mark
	reached   uint64
	problems  []string
	nProblems int
	counts    recordCounts
	schema    uint64
	// journalMark is the highest journal record the file holds.
	journalMark uint64
	// metaProblems are problems of a meta page when the other one is
	// valid: bbolt then uses the valid one, so they are not damage.
	metaProblems []string
}

type recordCounts struct {
	sessions, messages, cron, devices, series int
}

func (c *fileCheck) sound() bool { return c.haveMeta && c.nProblems == 0 }

func (c *fileCheck) fill(r *CheckReport) {
	r.PageSize = int(c.meta.pageSize)
	r.Pages = c.pages
	if c.pages > c.reached {
		r.FreePages = c.pages - c.reached
	}
	r.TxID = c.meta.txid
	r.Schema = c.schema
	r.Sessions, r.Messages, r.CronJobs, r.Devices, r.SensorSeries = c.counts.sessions, c.counts.messages, c.counts.cron, c.counts.devices, c.counts.series
	r.Problems = append(r.Problems, c.problems...)
	r.ProblemCount = c.nProblems
}

// summary is a one-line reason for a damaged file.
func (c *fileCheck) summary() string {
	if len(c.problems) == 0 {
		return "no problems"
	}
	s := c.problems[0]
	if c.nProblems > 1 {
		s += fmt.Sprintf(" (and %d more problems)", c.nProblems-1)
	}
	return s
}

// verifyFile walks the file from its newest valid meta page. quick stops at
// the first problem; full decodes every record too. A meta page that fails
// its checksum while the other is valid is not damage (bbolt falls back to
// the valid one; it is what an interrupted commit leaves).
func verifyFile(r io.ReaderAt, size int64, full, quick bool) *fileCheck {
	c := &fileCheck{}
	metas, metaProblems := readMetas(r, size)
	if len(metas) == 0 {
		c.problems = metaProblems
		c.nProblems = len(metaProblems)
		if c.nProblems == 0 {
			c.problems, c.nProblems = []string{"no valid meta page"}, 1
		}
		return c
	}
	c.metaProblems = metaProblems
	c.meta, c.haveMeta = metas[0], true
	c.pages = c.meta.pgid
	v := &checkVisitor{full: full, c: c}
	w := newWalker(r, size, c.meta, v)
	w.stopEarly = quick
	w.run()
	c.reached = w.reached
	c.problems = append(w.problems, v.problems...)
	c.nProblems = w.nProblems + v.nProblems
	if len(c.problems) > maxProblems {
		c.problems = c.problems[:maxProblems]
	}
	return c
}

// checkVisitor counts records and, in full mode, decodes each one.
type checkVisitor struct {
	full      bool
	c         *fileCheck
	problems  []string
	nProblems int
}

func (v *checkVisitor) problem(format string, a ...any) {
	v.nProblems++
	if len(v.problems) < maxProblems {
		v.problems = append(v.problems, fmt.Sprintf(format, a...))
	}
}

func (v *checkVisitor) bucket(path [][]byte, name []byte, _ uint64) bool {
	switch {
	case len(path) == 1 && string(path[0]) == BucketSessions:
		v.c.counts.sessions++
	case len(path) == 2 && string(path[0]) == BucketSensors:
		v.c.counts.series++
	}
	return true
}

func (v *checkVisitor) bucketEnd([][]byte, []byte, int) {}

func (v *checkVisitor) kv(path [][]byte, k, val []byte) {
	// Compared as bytes: a string of path[0] would be a heap copy per
	// record, a sixth of the walk's time at every start.
	var top []byte
	if len(path) > 0 {
		top = path[0]
	}
	switch {
	case string(top) == BucketMeta && len(path) == 1 && string(k) == string(keySchema):
		if len(val) == 8 {
			v.c.schema = binary.BigEndian.Uint64(val)
		} else {
			v.problem("meta/schema: %d bytes, want 8", len(val))
		}
	case string(top) == BucketMeta && len(path) == 1 && string(k) == string(keyJournal):
		if len(val) == 8 {
			v.c.journalMark = binary.BigEndian.Uint64(val)
		} else {
			v.problem("meta/journal: %d bytes, want 8", len(val))
		}
	case string(top) == BucketSessions && len(path) == 3 && string(path[2]) == string(keyMsgs):
		if !v.full {
			v.c.counts.messages++
			return
		}
		// json.Valid finds what Unmarshal would refuse (damage that
		// keeps the JSON valid passes both) at a third of its cost.
		if !json.Valid(val) {
			v.problem("session %q message %x: does not decode", path[1], k)
			return
		}
		v.c.counts.messages++
	case string(top) == BucketSessions && len(path) == 2 && string(k) == string(keyInfo):
		if v.full {
			var info infoRecord
			if err := info.unmarshal(val); err != nil {
				v.problem("session %q: info record: %v", path[1], err)
			}
		}
	case (string(top) == BucketCron || string(top) == BucketDevices) && len(path) == 1:
		if v.full && !json.Valid(val) {
			v.problem("%s/%s: not valid JSON", top, k)
			return
		}
		if string(top) == BucketCron {
			v.c.counts.cron++
		} else {
			v.c.counts.devices++
		}
	case string(top) == BucketSensors && len(path) == 3:
		if v.full {
			if err := checkSensorRecord(k, val); err != nil {
				v.problem("sensor %q %q: %v", path[1], path[2], err)
			}
		}
	}
}
